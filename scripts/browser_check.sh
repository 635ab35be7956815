#!/usr/bin/env bash
# Real-browser check of the built-in pages (web chat at /, dashboard at
# /dashboard): Debian's Chromium driven by a pinned Python Playwright in
# target/pyenv, against a `steward serve` that scripts/browser_check.py
# starts itself. Never `playwright install`: the browser is /usr/bin/chromium.
#
#   scripts/browser_check.sh [--web-dir crates/server/web] [--keep]
#   STEWARD=path/to/steward scripts/browser_check.sh
#
# Writes docs/img/chat.png, docs/img/dashboard.png and docs/img/chat-image.png
# (a second steward with --mmproj target/mmproj/gemma3.gguf); prints one
# `browser check: PASS|FAIL` line; exits non-zero on a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

PLAYWRIGHT_VERSION=1.65.2
STEWARD=${STEWARD:-target/release/steward}

if [ ! -x /usr/bin/chromium ]; then
  SUDO=
  [ "$(id -u)" = 0 ] || SUDO=sudo
  echo "installing Debian's chromium (apt-get)"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium fonts-dejavu-core >/dev/null
fi

[ -x target/pyenv/bin/python ] || python3 -m venv target/pyenv
if ! target/pyenv/bin/python - "$PLAYWRIGHT_VERSION" <<'PY' 2>/dev/null; then
import sys, importlib.metadata as m
sys.exit(0 if m.version("playwright") == sys.argv[1] else 1)
PY
  echo "installing playwright==$PLAYWRIGHT_VERSION into target/pyenv"
  target/pyenv/bin/pip install --quiet --disable-pip-version-check "playwright==$PLAYWRIGHT_VERSION"
fi

# --install-only: Chromium and Playwright, nothing run (scripts/prefetch.sh).
[ "${1:-}" = "--install-only" ] && exit 0

if [ ! -x "$STEWARD" ]; then
  echo "browser check: FAIL - no steward binary at $STEWARD (build it: cargo build --release)"
  exit 1
fi
exec target/pyenv/bin/python scripts/browser_check.py --steward "$STEWARD" "$@"
