#!/usr/bin/env bash
# Writes the chat-template oracle: what Hugging Face transformers'
# apply_chat_template renders for every real template fetched by
# fetch-templates.sh and every conversation in template-oracle.py's suite.
# A Rust test compares Steward's renderer with it byte for byte.
#
#   scripts/template-oracle.sh [OUT.json]     (default target/template-cases.json)
#   scripts/template-oracle.sh --setup        (only make the venv; scripts/prefetch.sh)
#
# The Python environment (transformers without torch, jinja2) is a venv at
# target/oracle-env, reused while it imports both at the pinned versions.
# Environment: STEWARD_CACHE_DIR (see fetch-templates.sh), PYTHON (the
# interpreter the venv is made from, default python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

transformers_version=5.24.0
jinja2_version=3.1.6
env_dir="$root/target/oracle-env"
out="${1:-$root/target/template-cases.json}"

venv_ok() {
  [ -x "$env_dir/bin/python" ] && "$env_dir/bin/python" - "$transformers_version" "$jinja2_version" <<'EOF' 2>/dev/null
import sys
import jinja2, transformers
sys.exit(0 if (transformers.__version__, jinja2.__version__) == tuple(sys.argv[1:3]) else 1)
EOF
}

if ! venv_ok; then
  echo "template-oracle: making $env_dir (transformers==$transformers_version, jinja2==$jinja2_version)" >&2
  rm -rf "$env_dir"
  mkdir -p "$root/target"
  "${PYTHON:-python3}" -m venv "$env_dir"
  "$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check \
    "transformers==$transformers_version" "jinja2==$jinja2_version" >&2
  venv_ok || { echo "template-oracle: the venv at $env_dir does not import transformers and jinja2" >&2; exit 1; }
fi

[ "${1:-}" = "--setup" ] && exit 0

# STEWARD_ORACLE_TEMPLATES: a directory of templates to render instead
# (scripts/oracle-templates.sh adds the default model's to the fetched ones).
templates="${STEWARD_ORACLE_TEMPLATES:-$("$root/scripts/fetch-templates.sh" | tail -n 1)}"
mkdir -p "$(dirname "$out")"
exec "$env_dir/bin/python" "$root/scripts/template-oracle.py" --templates "$templates" "$out"
