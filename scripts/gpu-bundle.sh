#!/usr/bin/env bash
# [8/8] The GPU bundle, built HERE (no Rust on the GPU machine):
#   steward built with `--features steward-server/gpu-dl` (ggml with dynamic
#   backends: every backend is a shared module loaded at start) into
#   target-gpu/ (its own target directory: a cold build compiles ggml's CPU
#   backend for every x86 variant, ~40 minutes on 2 cores), then
#   target-gpu/bundle/ = the binaries, their shared libraries (rpath $ORIGIN),
#   ggml's CPU backend modules minus sapphirerapids (AMX: these VMs fault on
#   it), the vendored ggml source of the exact crate version, and
#   gpu-cuda-module.sh, which builds the CUDA module from it on the GPU machine,
#   and gpu-run.sh (+ gen-random-gguf.py), which serves a random-weight model
#   there and runs steward-bench against it.
# The CPU build (target/) and CI are untouched.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
./scripts/setup.sh
export CARGO_TARGET_DIR="$root/target-gpu"
cargo build --release --features steward-server/gpu-dl --bin steward
cargo build --release -p steward-bench
out="$(ls -td "$CARGO_TARGET_DIR"/release/build/llama-cpp-sys-2-*/out | head -1)"
b="$CARGO_TARGET_DIR/bundle"
rm -rf "$b"; mkdir -p "$b"
cp "$CARGO_TARGET_DIR/release/steward" "$CARGO_TARGET_DIR/release/steward-bench" "$b/"
cp -a "$out"/lib/lib*.so* "$b/"
for m in "$out"/backends/*.so; do
  case "$m" in *sapphirerapids*) ;; *) cp "$m" "$b/" ;; esac
done
strip "$b/steward" "$b/steward-bench" "$b"/*.so* 2>/dev/null || true
ver="$(awk '/^name = "llama-cpp-sys-2"/ {getline; gsub(/[^0-9.]/, ""); print}' Cargo.lock)"
src="$(ls -d ~/.cargo/registry/src/*/llama-cpp-sys-2-"$ver"/llama.cpp | head -1)"
tmp="$(mktemp -d)"
cp -r "$src/ggml" "$tmp/"
# (ggml-cpu stays: ggml-base includes its headers, though GGML_CPU=OFF there)
touch "$tmp/ggml/ggml.pc.in" # the crate does not ship it; a standalone configure needs it
tar czf "$b/ggml-src.tar.gz" -C "$tmp" ggml
rm -rf "$tmp"
cp scripts/gpu-cuda-module.sh scripts/gpu-run.sh scripts/gpu-compare.sh scripts/gen-random-gguf.py "$b/"
# The runtime's mixed-step bound, against the bundle's own libllama.
g++ -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" scripts/gpu-mixstep.cpp -L"$b" -lllama -lggml \
  -lggml-base -Wl,--disable-new-dtags,-rpath,'$ORIGIN' -o "$b/gpu-mixstep"
# The default model's tokenizer, for random-weight models there.
"${PY:-target/pyenv/bin/python3}" scripts/gen-random-gguf.py tokenizer "$("$root/target/release/steward" fetch-model 2>/dev/null || "$CARGO_TARGET_DIR/release/steward" fetch-model)" "$b/tokenizer.json"
echo "llama-cpp-sys-2 $ver" >"$b/VERSION"
du -sh "$b"; ls "$b"
