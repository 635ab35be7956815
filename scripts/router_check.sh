#!/usr/bin/env bash
# [7/8] Two replicas behind the vLLM Router (scripts/router_check.py). The
# router is PyPI's vllm-router (a Rust binary in a wheel), pinned, in its
# own venv under target/ (never built here).
# Usage: scripts/router_check.sh [--install-only]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
VLLM_ROUTER_VERSION=0.1.17
venv="$root/target/router-venv"
if ! "$venv/bin/vllm-router" --help >/dev/null 2>&1 ||
  ! "$venv/bin/pip" show vllm-router 2>/dev/null | grep -qx "Version: $VLLM_ROUTER_VERSION"; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "vllm-router==$VLLM_ROUTER_VERSION"
fi
[ "${1:-}" = --install-only ] && exit 0
python3 scripts/router_check.py ./target/release/steward "$venv/bin/vllm-router"
