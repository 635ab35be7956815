#!/usr/bin/env bash
# Installs what the build needs when it is missing (Debian: cmake, libclang-dev,
# a C/C++ compiler) and writes the CPU flags (.cargo/config.toml). Sourced by
# serve.sh and test.sh; safe to run again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v c++ >/dev/null 2>&1 || need+=(g++)
# bindgen needs libclang itself (not libclang-cpp, which images often carry).
if command -v dpkg >/dev/null 2>&1; then
  dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
elif ! ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/*/libclang-[0-9]*.so* >/dev/null 2>&1; then
  need+=(libclang-dev)
fi
command -v python3 >/dev/null 2>&1 || need+=(python3 python3-pip python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi
"$root/scripts/cpu-flags.sh"
