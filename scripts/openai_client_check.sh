#!/usr/bin/env bash
# Starts `steward serve` on a free loopback port and drives it with the
# official `openai` Python package (installed into target/pyenv): streaming
# and non-streaming chat completions, unchanged client code.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="$root/target/pyenv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import openai, prometheus_client, jsonschema' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'openai>=1.40,<4' 'prometheus-client>=0.17' 'jsonschema>=4'
fi
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
log="$root/target/openai-check-server.log"
./target/release/steward serve --host 127.0.0.1 --port "$port" --max-seqs 4 --ctx-per-seq 1024 \
  --served-model-name smol --api-key test-key >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.2
done
"$venv/bin/python" "$root/scripts/openai_client_check.py" "http://127.0.0.1:$port/v1" test-key
