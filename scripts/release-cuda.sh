#!/usr/bin/env bash
# The CUDA module as a second release archive that drops into the portable one.
#
#   scripts/release-cuda.sh --bundle [DIR]            here: what the GPU machine needs -> DIR
#                                                     (default target-dist/cuda-bundle)
#   scripts/release-cuda.sh --build BUNDLE_DIR OUT_DIR  there (nvcc, cmake, ninja): builds
#                                                     OUT_DIR/steward-VER-linux-x86_64-cuda.tar.gz
#   scripts/release-cuda.sh --check BASE_TGZ CUDA_TGZ [BUNDLE_DIR|MODEL.gguf]
#                                                     there (a GPU): extract both, serve on the GPU
#
# The portable archive (scripts/release.sh) is built with GGML_BACKEND_DL:
# ggml_backend_load_all() loads every libggml-*.so beside the binary. This
# archive holds one folder of the same name, steward-VER-linux-x86_64/, with
# libggml-cuda.so (ggml's CUDA backend, built from the exact llama.cpp source
# that llama-cpp-sys-2 in Cargo.lock vendors; stripped, RPATH $ORIGIN),
# README-CUDA.md and SHA256SUMS-cuda; beside it TGZ.sha256. So
#   tar xzf steward-VER-linux-x86_64.tar.gz && tar xzf steward-VER-linux-x86_64-cuda.tar.gz
# lays the module beside the binary and overwrites nothing of the base.
#
# --bundle (no Rust needed there): ggml-src.tar.gz (the vendored ggml/, plus
# the empty ggml.pc.in a standalone configure needs), bundle.env (versions,
# source date), this script, gen-random-gguf.py, tokenizer.json (the default
# model's tokenizer, for a random-weight test model there) and py/gguf (the
# pure-Python gguf package, from PY's environment).
# --build: cmake flags as scripts/gpu-cuda-module.sh; env CUDA_ARCH (default
# 90: 230 s on 16 cores; "80;86;89;90" compiles each object ~2.5x as long,
# an estimated 9.4 min; its module size was not measured), NVCC, JOBS, W
# (work folder).
# --check: env SHAPE (tiny|1b|8b, default tiny), TYPE (f16|q8_0|q4_k), PORT.
# Prints PASS/FAIL lines; exits non-zero on any FAIL.
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"

say() { printf '== %s\n' "$*"; }
die() { printf 'release-cuda: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '2,9p' "$self" | sed 's/^# \{0,1\}//'; }

is_elf() { [ "$(head -c4 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "7f454c46" ]; }
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
rpath_of() { readelf -d "$1" | sed -n 's/.*R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p'; }

# glibc_floor FILE...: the highest symbol version of each kind the ELFs need.
glibc_floor() {
  local f
  for f in "$@"; do
    is_elf "$f" || continue
    objdump -T "$f" | grep -o '\(GLIBC\|GLIBCXX\|CXXABI\|GCC\)_[0-9][0-9.]*' | sort -u || true
  done | awk -F_ '{ k = $1; v = $2; if (!(k in best) || cmp(v, best[k]) > 0) best[k] = v }
    function cmp(a, b,   x, y, i, n) { n = split(a, x, "."); split(b, y, ".");
      for (i = 1; i <= 4; i++) { if ((x[i] + 0) != (y[i] + 0)) return (x[i] + 0) - (y[i] + 0) } return 0 }
    END { for (k in best) print k "_" best[k] }' | sort
}

# env_get FILE KEY: a value from a KEY=VALUE file (not sourced).
env_get() { sed -n "s/^$2=//p" "$1" | head -1; }

# ---------------------------------------------------------------- bundle (here)

bundle() {
  local root out version llama_ver src t tmp epoch commit py model
  root="$(cd "$(dirname "$self")/.." && pwd)"
  out="${1:-$root/target-dist/cuda-bundle}"
  cd "$root"
  version="$(awk '/^\[workspace.package\]/{s=1; next} /^\[/{s=0} s && $1 == "version" {gsub(/"/, "", $3); print $3; exit}' Cargo.toml)"
  [ -n "$version" ] || die "no version in Cargo.toml [workspace.package]"
  llama_ver="$(awk '/^name = "llama-cpp-sys-2"/ {getline; gsub(/[^0-9.]/, ""); print; exit}' Cargo.lock)"
  [ -n "$llama_ver" ] || die "no llama-cpp-sys-2 in Cargo.lock"
  src=""
  for t in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/llama-cpp-sys-2-"$llama_ver"/llama.cpp; do
    [ -d "$t" ] && { src="$t"; break; }
  done
  [ -n "$src" ] || die "llama-cpp-sys-2 $llama_ver is not in the cargo registry (cargo fetch first)"
  rm -rf "$out.tmp"; mkdir -p "$out.tmp/py"

  say "ggml source of llama-cpp-sys-2 $llama_ver"
  tmp="$(mktemp -d)"
  cp -r "$src/ggml" "$tmp/"
  # (ggml-cpu stays: ggml-base includes its headers, though GGML_CPU=OFF there)
  touch "$tmp/ggml/ggml.pc.in" # the crate does not ship it; a standalone configure needs it
  epoch="$(git log -1 --format=%ct 2>/dev/null || date +%s)"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -C "$tmp" -cf - ggml | gzip -n -9 >"$out.tmp/ggml-src.tar.gz"
  rm -rf "$tmp"

  commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit-dirty"
  printf 'STEWARD_VERSION=%s\nLLAMA_CPP_SYS_2=%s\nSOURCE_EPOCH=%s\nCOMMIT=%s\n' \
    "$version" "$llama_ver" "$epoch" "$commit" >"$out.tmp/bundle.env"
  cp "$self" "$root/scripts/gen-random-gguf.py" "$out.tmp/"

  say "tokenizer of the default model, gguf package"
  py="${PY:-$root/target/pyenv/bin/python3}"
  [ -x "$py" ] || py=python3
  "$py" -c 'import gguf, numpy' 2>/dev/null || die "$py lacks gguf/numpy (PY=python with both)"
  model="${TOK_SRC:-${STEWARD_CACHE_DIR:-$HOME/.cache/steward}/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
  if [ ! -f "$model" ] && [ -x "$root/target/release/steward" ]; then
    model="$("$root/target/release/steward" fetch-model)"
  fi
  [ -f "$model" ] || die "no default model at $model (TOK_SRC=any GGUF with the wanted tokenizer)"
  "$py" "$root/scripts/gen-random-gguf.py" tokenizer "$model" "$out.tmp/tokenizer.json" >/dev/null
  cp -r "$("$py" -c 'import gguf, os; print(os.path.dirname(gguf.__file__))')" "$out.tmp/py/gguf"
  find "$out.tmp/py" -name __pycache__ -type d -prune -exec rm -rf {} +
  rm -rf "$out"; mv "$out.tmp" "$out"
  du -sh "$out"; ls -l "$out"
}

# ---------------------------------------------------------------- build (there)

build() {
  local b="${1:?usage: --build BUNDLE_DIR OUT_DIR}" outd="${2:?usage: --build BUNDLE_DIR OUT_DIR}"
  local version llama_ver epoch commit name arch nvcc jobs w t0 secs mod parent stage out
  b="$(cd "$b" && pwd)"; mkdir -p "$outd"; outd="$(cd "$outd" && pwd)"
  { [ -f "$b/bundle.env" ] && [ -f "$b/ggml-src.tar.gz" ]; } || die "$b is no bundle (scripts/release-cuda.sh --bundle)"
  version="$(env_get "$b/bundle.env" STEWARD_VERSION)"
  llama_ver="$(env_get "$b/bundle.env" LLAMA_CPP_SYS_2)"
  epoch="$(env_get "$b/bundle.env" SOURCE_EPOCH)"
  commit="$(env_get "$b/bundle.env" COMMIT)"
  name="steward-$version-linux-x86_64"
  arch="${CUDA_ARCH:-90}"
  nvcc="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
  [ -x "$nvcc" ] || die "no nvcc (NVCC=path)"
  { command -v cmake >/dev/null && command -v ninja >/dev/null; } || die "needs cmake and ninja"
  jobs="${JOBS:-$(nproc)}"
  w="${W:-/tmp/steward-cuda-build}"
  rm -rf "$w"; mkdir -p "$w"
  tar xzf "$b/ggml-src.tar.gz" -C "$w"

  say "configure ggml (llama-cpp-sys-2 $llama_ver) for CUDA_ARCH=$arch with $("$nvcc" --version | grep -o 'release [0-9.]*')"
  # GGML_CUDA_GRAPHS=ON as llama.cpp's own build; GGML_CPU=OFF: the CPU
  # backend modules are in the base archive; GGML_NATIVE is refused with
  # GGML_BACKEND_DL; NCCL off as llama-cpp-sys-2's build. The module's RPATH
  # is $ORIGIN (DT_RPATH, as the base archive's ELFs).
  # shellcheck disable=SC2016 # a literal $ORIGIN
  cmake -S "$w/ggml" -B "$w/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_CPU=OFF -DGGML_NATIVE=OFF \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGGML_CUDA_GRAPHS=ON \
    -DGGML_CUDA_NCCL=OFF -DGGML_BUILD_EXAMPLES=OFF -DGGML_BUILD_TESTS=OFF \
    -DCMAKE_CUDA_COMPILER="$nvcc" \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH='$ORIGIN' \
    -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--disable-new-dtags -DCMAKE_MODULE_LINKER_FLAGS=-Wl,--disable-new-dtags \
    >"$w/configure.log" 2>&1 || { tail -40 "$w/configure.log" >&2; die "configure failed"; }
  grep -m1 'Using CMAKE_CUDA_ARCHITECTURES' "$w/configure.log" || true

  say "build ggml-cuda (-j $jobs; log $w/build.log)"
  t0="$(date +%s)"
  cmake --build "$w/build" --target ggml-cuda -j "$jobs" >"$w/build.log" 2>&1 ||
    { grep -m 20 -B 2 -A 6 'error' "$w/build.log" >&2 || tail -40 "$w/build.log" >&2; die "build failed"; }
  secs=$(($(date +%s) - t0))
  say "build time: $secs s (CUDA_ARCH=$arch, $jobs jobs, $(nproc) cores)"

  parent="$(mktemp -d "$w/stage.XXXXXX")"
  stage="$parent/$name"; mkdir -p "$stage"
  mod="$stage/libggml-cuda.so"
  cp -L "$w/build/bin/libggml-cuda.so" "$mod"
  chmod 0755 "$mod"
  strip --strip-unneeded "$mod"
  # shellcheck disable=SC2016 # a literal $ORIGIN
  if [ "$(rpath_of "$mod")" != '$ORIGIN' ]; then
    command -v patchelf >/dev/null || die "RPATH of the module is '$(rpath_of "$mod")', and no patchelf to set \$ORIGIN"
    # shellcheck disable=SC2016 # a literal $ORIGIN
    patchelf --force-rpath --set-rpath '$ORIGIN' "$mod"
  fi
  # shellcheck disable=SC2016 # a literal $ORIGIN
  [ "$(rpath_of "$mod")" = '$ORIGIN' ] || die "RPATH of the module is not \$ORIGIN"

  # What the module needs beyond the base archive and glibc / the C++ runtime.
  local direct cuda_libs floor glibc glibcxx cuda_ver driver sm
  direct="$(needed "$mod" | paste -sd' ')"
  cuda_libs="$(LD_LIBRARY_PATH="$w/build/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$mod" |
    awk '$1 ~ /cuda|cublas|nv/ { print $1 }' | sort -u | paste -sd' ')"
  floor="$(glibc_floor "$mod" | paste -sd' ')"
  glibc="$(printf '%s\n' "$floor" | grep -o 'GLIBC_[0-9.]*' | head -1 | cut -d_ -f2 || true)"
  glibcxx="$(printf '%s\n' "$floor" | grep -o 'GLIBCXX_[0-9.]*' | head -1 | cut -d_ -f2 || true)"
  cuda_ver="$("$nvcc" --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')"
  case "${cuda_ver%%.*}" in
    13) driver="580 or newer" ;;
    12) driver="525 or newer (CUDA 12's minor-version compatibility; 570+ for CUDA 12.8 features)" ;;
    *) driver="one that supports CUDA $cuda_ver" ;;
  esac
  sm="$(printf '%s' "$arch" | tr ';' '\n' | sed 's/-.*//' | sort -un | sed 's/^/sm_/' | paste -sd' ')"
  local cxx="libstdc++ >= GLIBCXX_$glibcxx"
  [ -n "$glibcxx" ] || cxx="no libstdc++ symbols"
  say "NEEDED: $direct"
  say "CUDA libraries (ldd): $cuda_libs"
  say "symbol version floor: $floor"
  objdump -T "$mod" | awk -v v="GLIBC_$glibc" '$0 ~ v { print "   needs " v ": " $NF }' | sort -u | head -8 || true

  cat >"$stage/README-CUDA.md" <<EOF
# Steward $version: CUDA module (Linux x86-64, NVIDIA GPUs)

This archive adds one library to the portable archive \`$name.tar.gz\`:
\`libggml-cuda.so\`, ggml's CUDA backend, built from the same llama.cpp source
(llama-cpp-sys-2 $llama_ver) as the binaries there. Unpack it over that archive:

\`\`\`sh
tar xzf $name.tar.gz
tar xzf $name-cuda.tar.gz
cd $name
sha256sum -c SHA256SUMS && sha256sum -c SHA256SUMS-cuda
./steward serve --model M.gguf                  # every layer on the GPU when one is found
./steward serve --model M.gguf --gpu-layers 99  # refuses to start when no GPU can be used
\`\`\`

At start steward loads every \`libggml-*.so\` beside it; with this one it finds the
GPU (log: \`GPU found: offloading every layer\`, or \`offloaded N/N layers to GPU\`),
and \`/debug/ledger\` shows \`"placement": "device"\` and the \`CUDA0\` device.

## Requirements (besides the base archive's, in README.md)

- An NVIDIA GPU of architecture $sm (CMAKE_CUDA_ARCHITECTURES=$arch; sm_90 is Hopper:
  H100, H200, GH200). An entry without -real also embeds PTX, which the driver compiles
  for newer GPUs at their first start, slowly.
- The NVIDIA driver for CUDA $cuda_ver: $driver. It provides libcuda.so.1.
- The CUDA ${cuda_ver%%.*} runtime libraries, which this archive does not carry, where the
  dynamic loader finds them (ldconfig, or LD_LIBRARY_PATH): $cuda_libs
  (the module links $direct). For example NVIDIA's packages cuda-cudart-${cuda_ver/./-} and
  libcublas-${cuda_ver/./-}, or the pip wheels nvidia-cuda-runtime and nvidia-cublas.
- glibc >= ${glibc:-?}, $cxx (symbol versions the module needs: $floor).
  This is newer than the base archive's floor: the module was built on the GPU build
  machine's system, not in the base archive's old Debian.

A module that cannot be loaded (a missing CUDA library, an older glibc) is skipped
without a word and steward runs on the CPU, unless \`--gpu-layers N\` was given: then it
refuses to start. \`GGML_BACKEND_PATH=\$PWD/libggml-cuda.so ./steward serve ...\` prints
the loader's own error.

Built from commit $commit with CUDA $cuda_ver, CMAKE_CUDA_ARCHITECTURES=$arch, GGML_CUDA_GRAPHS=ON,
GGML_CUDA_NCCL=OFF (scripts/release-cuda.sh --build). License: ggml / llama.cpp is MIT
(LICENSE-llama.cpp in the base archive); the CUDA libraries are NVIDIA's, under the
CUDA Toolkit's license, and are not included.
EOF

  (cd "$stage" && sha256sum libggml-cuda.so README-CUDA.md >SHA256SUMS-cuda)
  out="$outd/$name-cuda.tar.gz"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    --mode='u+rwX,go+rX,go-w' -C "$parent" -cf - "$name" | gzip -n -9 >"$out.tmp"
  mv "$out.tmp" "$out"
  (cd "$outd" && sha256sum "$(basename "$out")" >"$(basename "$out").sha256")
  rm -rf "$parent"
  say "$out ($(du -h "$out" | cut -f1); module $(du -h "$w/build/bin/libggml-cuda.so" | cut -f1) before strip)"
  cat "$out.sha256"
  tar tzvf "$out"
}

# ---------------------------------------------------------------- check (there)

fails=0
pass() { printf 'PASS %s\n' "$*"; }
fail() { printf 'FAIL %s\n' "$*"; fails=$((fails + 1)); }
sums_ok() { (cd "$1" && sha256sum -c --strict --quiet "$2"); }
# ok WHAT CMD...: PASS or FAIL by CMD's status.
ok() { local what="$1"; shift; if "$@"; then pass "$what"; else fail "$what"; fi; }

server_pid=""
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cleanup_check() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  [ -n "${tmp:-}" ] && [ "${KEEP:-0}" != 1 ] && rm -rf "$tmp"
  return 0
}

check() {
  local base="${1:?usage: --check BASE_TGZ CUDA_TGZ [BUNDLE_DIR|MODEL.gguf]}" cuda="${2:?usage: --check BASE_TGZ CUDA_TGZ}"
  local aux="${3:-}" t top dir model port resp code log json
  base="$(cd "$(dirname "$base")" && pwd)/$(basename "$base")"
  cuda="$(cd "$(dirname "$cuda")" && pwd)/$(basename "$cuda")"
  if [ -z "$aux" ]; then
    aux="$(dirname "$self")"
    [ -f "$aux/tokenizer.json" ] || aux="$(cd "$(dirname "$self")/.." && pwd)/target-dist/cuda-bundle"
  fi
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/steward-cuda-check.XXXXXX")"
  trap cleanup_check EXIT

  for t in "$base" "$cuda"; do
    if [ -f "$t.sha256" ]; then
      ok "checksum $(basename "$t").sha256" sums_ok "$(dirname "$t")" "$(basename "$t").sha256"
    else
      printf 'note: no %s.sha256\n' "$(basename "$t")"
    fi
  done

  say "extract both into one empty folder"
  mkdir -p "$tmp/x" "$tmp/base-only"
  tar xzf "$base" -C "$tmp/x"
  tar tzf "$base" | LC_ALL=C sort >"$tmp/base.list"
  tar tzf "$cuda" | LC_ALL=C sort >"$tmp/cuda.list"
  tar xzf "$cuda" -C "$tmp/x"
  top="$(cut -d/ -f1 "$tmp/base.list" "$tmp/cuda.list" | sort -u | tr '\n' ' ')"
  if [ "$top" = "$(cut -d/ -f1 "$tmp/base.list" | sort -u) " ] && [ "$(find "$tmp/x" -mindepth 1 -maxdepth 1 | wc -l)" -eq 1 ]; then
    pass "one top folder, the same in both archives: $top"
  else
    fail "top folders differ: $top"
  fi
  dir="$tmp/x/${top%% *}"
  if [ -z "$(LC_ALL=C comm -12 <(grep -v '/$' "$tmp/base.list") <(grep -v '/$' "$tmp/cuda.list"))" ]; then
    pass "the CUDA archive overwrites no file of the base: $(grep -v '/$' "$tmp/cuda.list" | sed 's|^[^/]*/||' | tr '\n' ' ')"
  else
    fail "files in both archives: $(LC_ALL=C comm -12 "$tmp/base.list" "$tmp/cuda.list" | grep -v '/$' | tr '\n' ' ')"
  fi
  ok "base SHA256SUMS" sums_ok "$dir" SHA256SUMS
  ok "SHA256SUMS-cuda" sums_ok "$dir" SHA256SUMS-cuda
  # shellcheck disable=SC2016 # a literal $ORIGIN
  ok "module RPATH $(rpath_of "$dir/libggml-cuda.so")" test "$(rpath_of "$dir/libggml-cuda.so")" = '$ORIGIN'
  if ldd "$dir/libggml-cuda.so" | grep -q 'not found'; then
    fail "module libraries: $(ldd "$dir/libggml-cuda.so" | grep 'not found' | tr -s ' \t\n' ' ')"
  else
    pass "every library the module needs resolves: $(ldd "$dir/libggml-cuda.so" | awk '{ print $1 "=>" $3 }' | grep -e ggml -e cuda -e cublas | tr '\n' ' ')"
  fi
  say "module symbol floor: $(glibc_floor "$dir/libggml-cuda.so" | tr '\n' ' ')(host: $(ldd --version | head -1))"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/   gpu: /' || true

  say "test model"
  if [ -f "$aux" ]; then
    model="$aux"
  else
    [ -f "$aux/tokenizer.json" ] || die "no tokenizer.json in $aux (a bundle dir, or give a GGUF)"
    model="$tmp/random-${SHAPE:-tiny}-${TYPE:-f16}.gguf"
    PYTHONPATH="$aux/py${PYTHONPATH:+:$PYTHONPATH}" python3 "$aux/gen-random-gguf.py" model \
      --tok "$aux/tokenizer.json" --shape "${SHAPE:-tiny}" --type "${TYPE:-f16}" --out "$model" >/dev/null ||
      die "gen-random-gguf.py failed"
  fi
  ls -l "$model"

  say "the base archive alone refuses --gpu-layers (no GPU without the module)"
  tar xzf "$base" -C "$tmp/base-only"
  if timeout 120 env -u GGML_BACKEND_PATH "$tmp"/base-only/*/steward serve --model "$model" --host 127.0.0.1 \
    --port "$(free_port)" --gpu-layers 99 \
    >"$tmp/base-only.log" 2>&1; then
    fail "the base archive alone started with --gpu-layers 99"
  elif grep -q 'found no GPU device' "$tmp/base-only.log"; then
    pass "base alone: $(grep -o 'asks for GPU offload, but this runtime found no GPU device' "$tmp/base-only.log" | head -1)"
  else
    fail "base alone failed otherwise: $(tail -3 "$tmp/base-only.log" | tr '\n' ' ')"
  fi

  port="${PORT:-$(free_port)}"
  log="$tmp/serve.log"
  say "serve with --gpu-layers 99 on 127.0.0.1:$port (log $log)"
  (cd "$tmp" && exec env -u GGML_BACKEND_PATH RUST_LOG=info "$dir/steward" serve --model "$model" \
    --host 127.0.0.1 --port "$port" --gpu-layers 99 --max-seqs 4 --ctx-per-seq 1024 \
    --served-model-name random) >"$log" 2>&1 &
  server_pid=$!
  local i ready=0
  for i in $(seq 1 600); do
    if curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1; then ready=1; break; fi
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.2
  done
  if [ "$ready" = 1 ]; then
    pass "ready after ~$((i / 5)) s"
  else
    fail "server not ready"; tail -30 "$log"; return 1
  fi
  grep -i -E 'cuda|gpu|offload' "$log" | sed 's/\x1b\[[0-9;]*m//g' | cut -c1-220 | head -12 | sed 's/^/   log: /' || true
  if grep -q -E 'CUDA0|ggml_cuda_init|offloaded [0-9]+/[0-9]+ layers to GPU' "$log"; then
    pass "serve log names the CUDA device: $(grep -o -E 'offloaded [0-9]+/[0-9]+ layers to GPU|found [0-9]+ CUDA devices' "$log" | sort -u | tr '\n' ' ')"
  else
    fail "serve log does not name a CUDA device"
  fi
  json="$(curl -sf "http://127.0.0.1:$port/debug/ledger" || true)"
  if printf '%s' "$json" | python3 -c '
import json, sys
l = json.load(sys.stdin)
devs = [d["name"] for d in l.get("devices", [])]
print("   ledger: placement=%s device_bytes=%s devices=%s" % (l.get("placement"), l.get("device_bytes"), devs))
sys.exit(0 if l.get("placement") == "device" and l.get("device_bytes", 0) > 0 and any(d.startswith("CUDA") for d in devs) else 1)'; then
    pass "/debug/ledger: placement device, weights/KV on a CUDA device"
  else
    fail "/debug/ledger: not on a CUDA device"
  fi

  say "chat completion through curl"
  resp="$tmp/chat.json"
  code="$(curl -s -o "$resp" -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" \
    -H 'content-type: application/json' \
    -d '{"model":"random","messages":[{"role":"user","content":"Say hello."}],"max_tokens":16,"ignore_eos":true}' || true)"
  if [ "$code" = 200 ] && python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
c = r["choices"][0]["message"]["content"]
print("   content (random weights: noise): %r" % c[:80])
print("   usage: %s" % r.get("usage"))
sys.exit(0 if isinstance(c, str) and c else 1)' "$resp"; then
    pass "chat completion: HTTP 200 with content"
  else
    fail "chat completion: HTTP $code $(head -c 300 "$resp" 2>/dev/null)"
  fi
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null | sed 's/^/   gpu app: /' || true

  kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; server_pid=""
  if [ "$fails" -eq 0 ]; then
    say "PASS: $(basename "$cuda") over $(basename "$base")"
  else
    say "FAIL: $fails check(s) failed"; tail -20 "$log"
  fi
  [ "$fails" -eq 0 ]
}

case "${1:-}" in
  --bundle) bundle "${2:-}" ;;
  --build) shift; build "$@" ;;
  --check) shift; check "$@" ;;
  -h | --help) usage ;;
  *) usage >&2; exit 2 ;;
esac
