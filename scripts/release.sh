#!/usr/bin/env bash
# Release tarballs that run without a Rust toolchain, compiler or Python.
#
#   scripts/release.sh                 portable: dist/steward-VER-linux-x86_64.tar.gz
#   scripts/release.sh --native        this machine's CI build (target/release, this CPU's
#                                      flags, llama.cpp linked in): ...-linux-x86_64-native.tar.gz
#   scripts/release.sh --check [TGZ]   verify, extract, serve and drive a tarball (default: the
#                                      portable one), here and in an older Debian under podman
#
# Each archive holds one folder, steward-VER-linux-x86_64/ (the native archive
# keeps that folder name too), flat: steward, steward-bench, the shared
# libraries they need besides glibc and the C++ runtime (RPATH $ORIGIN on every
# ELF), licenses, README.md and SHA256SUMS; beside it TGZ.sha256.
#
# Portable: built in a Debian 11 "bullseye" rootfs (glibc 2.31; mmdebstrap into
# target-dist/rootfs-bullseye, cached, rebuilt when BUILD_PKGS changes; run
# under podman as root with runc, deploy/podman/containers.conf) with the
# host's Rust toolchain mounted, offline (crates fetched on the host first),
# from a snapshot of the working tree (target-dist/src), into target-dist/build.
# The C/C++ compiler there is clang-16 (bullseye's gcc 10 cannot build ggml's
# alderlake/sapphirerapids CPU variants: no -mavxvnni / -mamx-*), so OpenMP is
# LLVM's libomp.so.5, which the archive carries. Rust code is baseline x86-64
# (RUSTFLAGS replaces .cargo/config.toml's target-cpu); ggml's CPU backend is
# one module per x86 variant (features steward-server/gpu-dl: GGML_BACKEND_DL,
# GGML_CPU_ALL_VARIANTS, GGML_NATIVE off), the best one for the CPU picked at
# start; the sapphirerapids (AMX) module is withheld (these VMs report AMX but
# fault on it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

version="$(awk '/^\[workspace.package\]/{s=1; next} /^\[/{s=0} s && $1 == "version" {gsub(/"/, "", $3); print $3; exit}' Cargo.toml)"
[ -n "$version" ] || { echo "release: no version in Cargo.toml [workspace.package]" >&2; exit 1; }
name="steward-$version-linux-x86_64"
dist="$root/dist"
td="$root/target-dist"
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
rustup_home="${RUSTUP_HOME:-$HOME/.rustup}"
suite=bullseye
mirror=http://deb.debian.org/debian
# The build rootfs's packages: changing this list rebuilds the rootfs.
BUILD_PKGS="ca-certificates cmake make pkg-config git g++ clang-16 libclang-16-dev libomp-16-dev"
# The check rootfs (an older Debian with nothing but a base system).
CHECK_PKGS="ca-certificates"
# Libraries an archive leaves to the system: glibc's own, and the C++ runtime
# (a distribution with the glibc the archive needs has a libstdc++ at least as
# new as the GLIBCXX it needs: both are printed from objdump at the end).
SYSTEM_LIBS=" libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libutil.so.1 libresolv.so.2 libmvec.so.1 ld-linux-x86-64.so.2 libstdc++.so.6 libgcc_s.so.1 "

say() { printf '== %s\n' "$*"; }
die() { printf 'release: %s\n' "$*" >&2; exit 1; }

usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; }

# ---------------------------------------------------------------- podman, rootfs

podman_setup() {
  [ "$(id -u)" -eq 0 ] || die "podman works here only as root (runc); run as root"
  if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 || ! command -v mmdebstrap >/dev/null 2>&1; then
    echo "release: installing mmdebstrap podman runc" >&2
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq mmdebstrap podman runc >/dev/null
  fi
  if [ -f "$root/deploy/podman/containers.conf" ]; then
    export CONTAINERS_CONF="$root/deploy/podman/containers.conf"
  else
    # Same content as the repository's file: no ulimits of podman's own, runc.
    podman_conf="$(mktemp "${TMPDIR:-/tmp}/steward-containers.XXXXXX.conf")"
    printf '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n' >"$podman_conf"
    export CONTAINERS_CONF="$podman_conf"
  fi
}

# ensure_image DIR VARIANT "PKGS" -> prints the podman image name. The rootfs is
# kept in DIR and rebuilt (then re-imported) when the suite, variant or package
# list changes.
ensure_image() {
  local dir="$1" variant="$2" pkgs="$3" key old="" image
  key="$(printf '%s\n' "$suite" "$mirror" "$variant" "$pkgs" | sha256sum | cut -c1-12)"
  [ -f "$dir.key" ] && old="$(cat "$dir.key")"
  image="localhost/steward-$(basename "$dir"):$key"
  if [ "$old" != "$key" ] || [ ! -d "$dir" ]; then
    echo "release: making $dir ($suite, $variant: $pkgs)" >&2
    rm -rf "$dir.tmp" "$dir" "$dir.key"
    if [ -n "$old" ]; then podman rmi -f "localhost/steward-$(basename "$dir"):$old" >/dev/null 2>&1 || true; fi
    nice -n 10 mmdebstrap --variant="$variant" --include="${pkgs// /,}" \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      "$suite" "$dir.tmp" "$mirror" >&2
    mv "$dir.tmp" "$dir"
    printf '%s\n' "$key" >"$dir.key"
  fi
  if ! podman image exists "$image"; then
    echo "release: importing $dir as $image" >&2
    tar -C "$dir" -c . | podman import - "$image" >/dev/null
  fi
  printf '%s\n' "$image"
}

# rootfs_file ROOTFS PATH: the host path of PATH inside ROOTFS, symlinks
# followed within the rootfs.
rootfs_file() {
  local rootfs="$1" p="$2" t n=0
  while [ -L "$rootfs$p" ]; do
    t="$(readlink "$rootfs$p")"
    case "$t" in /*) p="$t" ;; *) p="$(dirname "$p")/$t" ;; esac
    n=$((n + 1)); [ "$n" -lt 40 ] || die "symlink loop at $rootfs$p"
  done
  printf '%s\n' "$rootfs$p"
}

# ---------------------------------------------------------------- packaging

is_elf() { [ "$(head -c4 "$1" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = "7f454c46" ]; }

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

ensure_patchelf() {
  command -v patchelf >/dev/null 2>&1 && return 0
  echo "release: installing patchelf" >&2
  local sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get -o DPkg::Lock::Timeout=600 install -y -qq patchelf >/dev/null
}

# bundle_deps STAGE DIR...: copy every library an ELF in STAGE needs (and what
# those need) from the first DIR that has it, unless glibc / the C++ runtime.
bundle_deps() {
  local stage="$1"; shift
  local changed=1 f lib d found
  while [ "$changed" -eq 1 ]; do
    changed=0
    for f in "$stage"/*; do
      is_elf "$f" || continue
      while read -r lib; do
        [ -n "$lib" ] || continue
        case "$SYSTEM_LIBS" in *" $lib "*) continue ;; esac
        [ -e "$stage/$lib" ] && continue
        found=""
        for d in "$@"; do
          if [ -e "$d/$lib" ]; then found="$d/$lib"; break; fi
        done
        [ -n "$found" ] || die "$(basename "$f") needs $lib, found in none of: $*"
        cp -L "$found" "$stage/$lib"
        chmod 0755 "$stage/$lib"
        changed=1
      done < <(needed "$f")
    done
  done
}

third_party() {
  # The Rust crates in the two binaries, from Cargo.lock (cargo tree, offline).
  local manifest="$1"; shift
  {
    echo "Third-party software in this archive"
    echo "===================================="
    echo
    echo "llama.cpp and ggml (libllama, libggml*, the CPU backend modules, or linked into"
    echo "steward in a native archive): MIT, see LICENSE-llama.cpp."
    echo
    local extra
    for extra in "$@"; do echo "$extra"; echo; done
    echo "Rust crates compiled into steward and steward-bench (name version license):"
    echo
    cargo tree --offline --manifest-path "$manifest" --target x86_64-unknown-linux-gnu \
      -p steward-server -p steward-bench -e normal --prefix none --format '{p} :: {l}' "${TREE_FEATURES[@]}" |
      sed -e 's/ (\*)$//' -e 's/ ([^)]*) ::/ ::/' | grep -v -e '^steward-' -e '^$' | sort -u |
      awk -F' :: ' '{ printf "%-50s %s\n", $1, ($2 == "" ? "(no license field)" : $2) }'
  } >"$stage/THIRD-PARTY-NOTICES.txt"
}

write_readme() {
  local kind="$1" floor="$2" note="$3"
  cat >"$stage/README.md" <<EOF
# Steward $version ($kind build, Linux x86-64)

An OpenAI-compatible LLM inference server on llama.cpp. Nothing to install:

\`\`\`sh
./steward serve                 # serve the default model (SmolLM2-135M-Instruct) on 127.0.0.1:8080,
                                # fetching it into ~/.cache/steward on first use
./steward serve --model M.gguf  # any other GGUF
./steward serve --help          # every flag; ./steward --help for the other commands
./steward --version
./steward-bench --help          # load generator / benchmark client
\`\`\`

Then \`curl http://127.0.0.1:8080/v1/chat/completions -H 'content-type: application/json' \\
  -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":32}'\`, or open http://127.0.0.1:8080/.

Runs on: $floor.
Build: $note.

Keep the files together: the binaries load their libraries from their own folder
(RPATH \$ORIGIN). \`sha256sum -c SHA256SUMS\` checks them.

Licenses: Steward is MIT OR Apache-2.0 (LICENSE-MIT, LICENSE-APACHE); llama.cpp is
MIT (LICENSE-llama.cpp); the rest in THIRD-PARTY-NOTICES.txt.
EOF
}

# glibc_floor DIR: the highest symbol versions any ELF in DIR needs.
glibc_floor() {
  local f
  for f in "$1"/*; do
    is_elf "$f" || continue
    objdump -T "$f" | grep -o '\(GLIBC\|GLIBCXX\|CXXABI\|GCC\)_[0-9][0-9.]*' | sort -u
  done | awk -F_ '{ k = $1; v = $2; if (!(k in best) || cmp(v, best[k]) > 0) best[k] = v }
    function cmp(a, b,   x, y, i, n) { n = split(a, x, "."); split(b, y, ".");
      for (i = 1; i <= 4; i++) { if ((x[i] + 0) != (y[i] + 0)) return (x[i] + 0) - (y[i] + 0) } return 0 }
    END { for (k in best) print k "_" best[k] }' | sort
}

# finish PARENT OUT_TGZ KIND NOTE: licenses, README, rpath, SHA256SUMS, tar of
# $stage (= PARENT/$name).
finish() {
  local parent="$1" out="$2" kind="$3" note="$4" f floor epoch lic
  lic="$(ls -d "$cargo_home"/registry/src/*/llama-cpp-sys-2-"$llama_ver"/llama.cpp/LICENSE 2>/dev/null | head -1)"
  [ -n "$lic" ] || die "no vendored llama.cpp LICENSE for llama-cpp-sys-2 $llama_ver"
  cp "$lic" "$stage/LICENSE-llama.cpp"
  cp "$root/LICENSE-MIT" "$root/LICENSE-APACHE" "$stage/"
  ensure_patchelf
  for f in "$stage"/*; do
    is_elf "$f" || continue
    strip --strip-unneeded "$f"
    # shellcheck disable=SC2016 # a literal $ORIGIN
    patchelf --force-rpath --set-rpath '$ORIGIN' "$f"
    # shellcheck disable=SC2016 # a literal $ORIGIN
    [ "$(readelf -d "$f" | sed -n 's/.*(RPATH).*\[\(.*\)\]/\1/p')" = '$ORIGIN' ] || die "RPATH of $f is not \$ORIGIN"
  done
  floor="$(glibc_floor "$stage" | tr '\n' ' ')"
  say "symbol version floor ($kind): $floor"
  local glibc glibcxx
  glibc="$(printf '%s\n' "$floor" | grep -o 'GLIBC_[0-9.]*' | head -1 | cut -d_ -f2)"
  glibcxx="$(printf '%s\n' "$floor" | grep -o 'GLIBCXX_[0-9.]*' | head -1 | cut -d_ -f2)"
  write_readme "$kind" "x86-64 Linux with glibc >= ${glibc:-?} and libstdc++ >= GLIBCXX_${glibcxx:-?}" "$note"
  (cd "$stage" && find . -type f | sed 's|^\./||' | LC_ALL=C sort | xargs -d '\n' sha256sum >../SHA256SUMS)
  mv "$parent/SHA256SUMS" "$stage/SHA256SUMS"
  epoch="$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)"
  mkdir -p "$dist"
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
    --mode='u+rwX,go+rX,go-w' -C "$parent" -cf - "$name" | gzip -n -9 >"$out.tmp"
  mv "$out.tmp" "$out"
  (cd "$dist" && sha256sum "$(basename "$out")" >"$(basename "$out").sha256.tmp" && mv "$(basename "$out").sha256.tmp" "$(basename "$out").sha256")
  say "$out ($(du -h "$out" | cut -f1), $(ls "$stage" | wc -l) files)"
  ls -l "$stage" | tail -n +2
}

llama_ver="$(awk '/^name = "llama-cpp-sys-2"/ {getline; gsub(/[^0-9.]/, ""); print; exit}' "$root/Cargo.lock")"

# ---------------------------------------------------------------- portable

portable() {
  local t0 t1 image src="$td/src" build="$td/build" commit out f
  mkdir -p "$td" "$build"
  podman_setup
  say "build rootfs ($suite)"
  image="$(ensure_image "$td/rootfs-$suite" minbase "$BUILD_PKGS")"

  say "source snapshot -> $src"
  commit="$(git rev-parse --short HEAD)"
  [ -n "$(git status --porcelain --untracked-files=no)" ] && commit="$commit-dirty"
  rm -rf "$src.tmp"; mkdir -p "$src.tmp"
  # Tracked and untracked-but-not-ignored files, as they are now (not the
  # outputs of this script).
  git ls-files -z -co --exclude-standard -- . ':!target-dist' ':!dist' | while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"
  done | tar --null -T - -cf - | tar -xf - -C "$src.tmp"
  rm -rf "$src"; mv "$src.tmp" "$src"

  say "cargo fetch (host)"
  cargo fetch --manifest-path "$src/Cargo.toml" --target x86_64-unknown-linux-gnu

  say "cargo build in $image (log: $td/build.log)"
  t0="$(date +%s)"
  # Paths inside differ from the host's (/src, /steward-target): ggml compiles
  # its backend directory in (GGML_BACKEND_DIR, searched first at start, and it
  # holds the withheld AMX module); that path must not exist where the archive runs.
  if ! podman run --rm --network none \
    -v "$src:/src:ro" -v "$build:/steward-target" \
    -v "$cargo_home:/root/.cargo" -v "$rustup_home:/root/.rustup:ro" \
    -e HOME=/root -e CARGO_HOME=/root/.cargo -e RUSTUP_HOME=/root/.rustup \
    -e PATH=/root/.cargo/bin:/usr/local/bin:/usr/bin:/bin \
    -e CARGO_TARGET_DIR=/steward-target -e CARGO_NET_OFFLINE=true \
    -e RUSTFLAGS='-C target-cpu=x86-64 -C link-arg=-Wl,--disable-new-dtags,-rpath,$ORIGIN' \
    -e CC=clang-16 -e CXX=clang++-16 -e LIBCLANG_PATH=/usr/lib/llvm-16/lib -e CLANG_PATH=/usr/bin/clang-16 \
    -e GGML_RPC=ON -e STEWARD_GIT_COMMIT="$commit" -e CARGO_TERM_COLOR=never \
    -w /src "$image" \
    nice -n 10 cargo build --release --frozen --features steward-server/gpu-dl \
    -p steward-server --bin steward -p steward-bench --bin steward-bench >"$td/build.log" 2>&1; then
    tail -40 "$td/build.log" >&2
    die "portable build failed (log: $td/build.log)"
  fi
  t1="$(date +%s)"
  say "portable build took $((t1 - t0)) s"

  out="$(ls -td "$build"/release/build/llama-cpp-sys-2-*/out 2>/dev/null | head -1)"
  [ -d "$out/backends" ] || die "no ggml backends in $out"
  grep -q '^GGML_NATIVE:BOOL=OFF' "$out/build/CMakeCache.txt" || die "GGML_NATIVE is not OFF in $out/build/CMakeCache.txt"
  grep -q '^GGML_CPU_ALL_VARIANTS:BOOL=ON' "$out/build/CMakeCache.txt" || die "GGML_CPU_ALL_VARIANTS is not ON"

  local parent
  parent="$(mktemp -d "$td/stage.XXXXXX")"
  stage="$parent/$name"
  mkdir -p "$stage"
  cp "$build/release/steward" "$build/release/steward-bench" "$stage/"
  local m
  for m in "$out"/backends/*.so; do
    case "$m" in *sapphirerapids*) ;; *) cp -L "$m" "$stage/" ;; esac
  done
  local omp
  omp="$(dirname "$(rootfs_file "$td/rootfs-$suite" /usr/lib/llvm-16/lib/libomp.so.5)")"
  bundle_deps "$stage" "$out/lib" "$omp"
  TREE_FEATURES=(--features steward-server/gpu-dl)
  third_party "$src/Cargo.toml" \
    "LLVM OpenMP runtime (libomp.so.5, from Debian 11's libomp5-16): Apache-2.0 WITH LLVM-exception (https://llvm.org/LICENSE.txt)."
  finish "$parent" "$dist/$name.tar.gz" portable \
    "portable, on Debian 11 with clang 16; any x86-64 CPU (ggml's CPU kernels for it picked at start)"
  rm -rf "$parent"
}

# ---------------------------------------------------------------- native

native() {
  local rel="$root/target/release" t0 parent
  t0="$(date +%s.%N)"
  if [ ! -x "$rel/steward" ] || [ ! -x "$rel/steward-bench" ]; then
    say "building target/release (steward, steward-bench)"
    [ -f "$root/.cargo/config.toml" ] || ./scripts/setup.sh
    nice -n 10 cargo build --release --bin steward --bin steward-bench
  fi
  parent="$(mktemp -d "${TMPDIR:-/tmp}/steward-native.XXXXXX")"
  stage="$parent/$name"
  mkdir -p "$stage"
  cp "$rel/steward" "$rel/steward-bench" "$stage/"
  # libgomp (and anything else not glibc / the C++ runtime) from this machine.
  bundle_deps "$stage" /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu
  TREE_FEATURES=()
  third_party "$root/Cargo.toml" \
    "GNU OpenMP runtime (libgomp.so.1, from this build machine's GCC): GPL-3.0-or-later WITH GCC-exception-3.1."
  finish "$parent" "$dist/$name-native.tar.gz" native \
    "CI's build on this machine, for its CPU ($(sed -n 's/.*target-cpu=\([^"]*\)".*/\1/p' "$root/.cargo/config.toml" 2>/dev/null | head -1)), llama.cpp linked in; NOT portable (the container image's)"
  rm -rf "$parent"
  say "native packaging took $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
}

# ---------------------------------------------------------------- check

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_ready PORT ALIVE_FN: /health, then /ready, 15 minutes at most (a first
# start fetches the default model and converts it); ALIVE_FN fails once the
# server is gone.
host_alive() { kill -0 "$server_pid" 2>/dev/null; }
container_alive() { [ "$(podman inspect -f '{{.State.Running}}' "$container" 2>/dev/null)" = true ]; }
wait_ready() {
  local port="$1" alive="$2" what deadline
  deadline=$(($(date +%s) + 900))
  for what in health ready; do
    until curl -sf "http://127.0.0.1:$port/$what" >/dev/null 2>&1; do
      "$alive" || { echo "release: server exited before /$what" >&2; return 1; }
      [ "$(date +%s)" -lt "$deadline" ] || { echo "release: no /$what within 15 minutes" >&2; return 1; }
      sleep 0.5
    done
    say "/$what ok after $(($(date +%s) - deadline + 900)) s"
  done
}

check() {
  local tgz="${1:-$dist/$name.tar.gz}" tmp dir port rc=0
  [ -f "$tgz" ] || die "no tarball $tgz (make it first: scripts/release.sh)"
  tgz="$(cd "$(dirname "$tgz")" && pwd)/$(basename "$tgz")"
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/steward-release-check.XXXXXX")"
  server_pid=""; container=""
  # shellcheck disable=SC2064
  trap "cleanup_check '$tmp'" EXIT

  say "checksum $(basename "$tgz").sha256"
  (cd "$(dirname "$tgz")" && sha256sum -c --strict "$(basename "$tgz").sha256")

  say "extract into an empty folder"
  mkdir -p "$tmp/x" "$tmp/home" "$tmp/emptybin" "$tmp/cache" "$tmp/cache-old"
  tar -xzf "$tgz" -C "$tmp/x"
  [ "$(ls -A "$tmp/x" | wc -l)" -eq 1 ] || die "the archive holds more than one top-level entry"
  dir="$(ls -d "$tmp"/x/steward-*-linux-x86_64)"
  if [ ! -x "$dir/steward" ] || [ ! -x "$dir/steward-bench" ]; then die "no steward / steward-bench in $dir"; fi

  say "SHA256SUMS"
  (cd "$dir" && sha256sum -c --strict --quiet SHA256SUMS)
  diff <(cd "$dir" && find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort) \
    <(sed 's/^[0-9a-f]*  //' "$dir/SHA256SUMS" | LC_ALL=C sort) || die "SHA256SUMS does not list exactly the folder's files"

  say "RPATH and symbol versions"
  local f
  for f in "$dir"/*; do
    is_elf "$f" || continue
    # shellcheck disable=SC2016 # a literal $ORIGIN
    [ "$(readelf -d "$f" | sed -n 's/.*R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')" = '$ORIGIN' ] || die "RPATH of $(basename "$f") is not \$ORIGIN"
  done
  glibc_floor "$dir" | tr '\n' ' '; echo

  say "steward --version"
  env -i HOME="$tmp/home" PATH="$tmp/emptybin" "$dir/steward" --version

  # The standard TLS trust knobs pass through when set (a machine whose TLS is
  # intercepted by a proxy with its own CA): they are not a toolchain.
  local tls_env=()
  [ -n "${SSL_CERT_FILE:-}" ] && tls_env+=("SSL_CERT_FILE=$SSL_CERT_FILE")
  [ -n "${SSL_CERT_DIR:-}" ] && tls_env+=("SSL_CERT_DIR=$SSL_CERT_DIR")
  say "serve (env -i, empty PATH, empty STEWARD_CACHE_DIR: fetches the default model)"
  port="$(free_port)"
  (cd "$tmp/home" && exec env -i HOME="$tmp/home" PATH="$tmp/emptybin" STEWARD_CACHE_DIR="$tmp/cache" "${tls_env[@]}" \
    "$dir/steward" serve --host 127.0.0.1 --port "$port" --max-seqs 4 --ctx-per-seq 1024 \
    --served-model-name smol --api-key test-key) >"$tmp/serve.log" 2>&1 &
  server_pid=$!
  wait_ready "$port" host_alive || { tail -30 "$tmp/serve.log" >&2; exit 1; }

  say "OpenAI client check (scripts/openai_client_check.py smol)"
  local venv="$root/target/pyenv"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import openai, prometheus_client, jsonschema' 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet 'openai>=1.40,<4' 'prometheus-client>=0.17' 'jsonschema>=4'
  fi
  "$venv/bin/python" -B "$root/scripts/openai_client_check.py" "http://127.0.0.1:$port/v1" test-key smol ||
    { tail -30 "$tmp/serve.log" >&2; die "OpenAI client check failed"; }
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""

  say "older distribution: Debian 11 minbase under podman (the cache the first server filled)"
  cp -a "$tmp/cache/." "$tmp/cache-old/"
  podman_setup
  local image
  image="$(ensure_image "$td/rootfs-$suite-min" minbase "$CHECK_PKGS")"
  podman run --rm --network none -v "$dir:/opt/steward:ro" "$image" /opt/steward/steward --version
  podman run --rm --network none -v "$dir:/opt/steward:ro" "$image" sh -c 'ldd --version | head -1'
  port="$(free_port)"
  container="steward-release-check-$$"
  podman run -d --name "$container" --network host -v "$dir:/opt/steward:ro" -v "$tmp/cache-old:/cache" \
    -e STEWARD_CACHE_DIR=/cache -e HOME=/tmp -w /tmp "$image" \
    /opt/steward/steward serve --host 127.0.0.1 --port "$port" --served-model-name smol >/dev/null
  wait_ready "$port" container_alive ||
    { podman logs "$container" 2>&1 | tail -30 >&2; exit 1; }
  say "chat completion in $suite"
  local resp
  resp="$(curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' \
    -d '{"model":"smol","messages":[{"role":"user","content":"Say hello."}],"max_tokens":8}')" || rc=$?
  [ "$rc" -eq 0 ] || { podman logs "$container" 2>&1 | tail -30 >&2; die "chat completion failed (curl $rc)"; }
  printf '%s\n' "$resp" | jq -e '.choices[0].message.content | type == "string"' >/dev/null ||
    die "unexpected answer: $resp"
  printf '%s\n' "$resp" | jq -c '{content: .choices[0].message.content, usage}'
  say "check passed: $(basename "$tgz")"
}

cleanup_check() {
  local tmp="$1"
  if [ -n "${server_pid:-}" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  [ -n "${container:-}" ] && podman rm -f "$container" >/dev/null 2>&1
  rm -rf "$tmp"
}

case "${1:-}" in
  "") portable ;;
  --native) native ;;
  --check) check "${2:-}" ;;
  -h | --help) usage ;;
  *) usage >&2; exit 2 ;;
esac
