#!/usr/bin/env bash
# [8/8] Runs ON THE GPU MACHINE, in a bundle made by scripts/gpu-bundle.sh:
# builds ggml's CUDA backend as the loadable module libggml-cuda.so from the
# bundle's ggml source (the exact version the binary was built with) and puts
# it beside the binary, where ggml_backend_load_all() finds it. Skips the
# build when the module is already there. Needs nvcc, cmake and ninja.
set -euo pipefail
b="$(cd "$(dirname "$0")" && pwd)"
[ -f "$b/libggml-cuda.so" ] && { echo "$b/libggml-cuda.so"; exit 0; }
w="${W:-/tmp/steward-cuda}"; mkdir -p "$w"; tar xzf "$b/ggml-src.tar.gz" -C "$w"
# GGML_CUDA_GRAPHS=ON as llama.cpp's own build; GGML_CPU=OFF: the CPU
# backend modules come with the bundle; GGML_NATIVE is refused with
# GGML_BACKEND_DL.
cmake -S "$w/ggml" -B "$w/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_CPU=OFF -DGGML_NATIVE=OFF \
  -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90}" -DGGML_CUDA_GRAPHS=ON \
  -DGGML_CUDA_NCCL=OFF -DGGML_BUILD_EXAMPLES=OFF -DGGML_BUILD_TESTS=OFF \
  -DCMAKE_CUDA_COMPILER="${NVCC:-/usr/local/cuda/bin/nvcc}" >"$w/configure.log" 2>&1 ||
  { tail -40 "$w/configure.log" >&2; exit 1; }
cmake --build "$w/build" --target ggml-cuda -j "$(nproc)" >"$w/build.log" 2>&1 ||
  { grep -m 20 -B 2 -A 6 'error' "$w/build.log" >&2 || tail -40 "$w/build.log" >&2; exit 1; }
cp "$w/build/bin/libggml-cuda.so" "$b/"
echo "$b/libggml-cuda.so"
