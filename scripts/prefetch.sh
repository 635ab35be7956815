#!/usr/bin/env bash
# What the suite downloads, fetched ahead: test.sh runs this in the
# background while cargo compiles (downloads wait on the network, the
# compile on the CPU), then waits for it before the first step that needs
# any of it. Each piece is skipped when already there; each later script
# still checks for its own and installs what is missing, so they also run
# alone. Output: target/prefetch.log.
# Usage: scripts/prefetch.sh [engine|http|all] (default all), test.sh's tier:
# engine: the templates, the oracle's venv and the project venv; http: also
# Chromium, the vLLM Router, schemathesis, curl and jq; all: also podman,
# runc, mmdebstrap, patchelf and the images' Debian base.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
tier="${1:-all}"
mkdir -p target
# The real chat templates (the llama-cpp-python sdist) and the oracle's venv.
./scripts/fetch-templates.sh >/dev/null
./scripts/template-oracle.sh --setup
# The project venv: every Python package the checks use, in one install.
venv="$root/target/pyenv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check numpy gguf safetensors tokenizers \
  'openai>=1.66,<3' 'anthropic==2.16.0' 'prometheus-client>=0.17' 'jsonschema>=4' httpx \
  pyyaml 'kubernetes-validate==1.37.0' 'pyzmq>=25' 'msgpack>=1' \
  'opentelemetry-proto==1.39.1' 'grpcio>=1.60'
if [ "$tier" = engine ]; then
  echo "prefetch: done (engine)"
  exit 0
fi
# Debian's Chromium and the pinned Playwright (scripts/browser_check.sh).
./scripts/browser_check.sh --install-only
# The vLLM Router (scripts/router_check.sh).
./scripts/router_check.sh --install-only
# schemathesis (scripts/schemathesis_check.sh).
[ -x scripts/schemathesis_check.sh ] && ./scripts/schemathesis_check.sh --install-only
# The tarball, image and pod checks: podman with runc, mmdebstrap, patchelf,
# jq; tmux for the terminal clients' check (scripts/term_check.py); then the
# images' Debian base (mmdebstrap over Debian's packages, cached in
# target/image/), which needs no build.
need=()
tools=(jq curl tmux)
[ "$tier" = http ] || tools=(podman runc mmdebstrap patchelf jq curl tmux)
for t in "${tools[@]}"; do
  command -v "$t" >/dev/null 2>&1 || need+=("$t")
done
if [ ${#need[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get -o DPkg::Lock::Timeout=600 update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${need[@]}" >/dev/null
fi
[ "$tier" = http ] || ./scripts/image.sh --base-only
echo "prefetch: done"
