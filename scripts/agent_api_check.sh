#!/usr/bin/env bash
# Starts `steward serve` on a free loopback port and drives its agent and RAG
# APIs with the official `anthropic` (pinned below) and `openai` Python
# packages (installed into target/pyenv): Anthropic Messages (the SDK's tool
# runner on its defaults among them) and OpenAI Responses on the default
# model (served as "smol"), then embeddings and rerank on all-MiniLM-L6-v2
# (converted to GGUF by scripts/minilm-to-gguf.py, served as "minilm"), then
# Anthropic image blocks on the default model with a random-weight image
# projector (target/mmproj/gemma3.gguf, made by scripts/gen-random-mmproj.py
# when missing; served as "smol", profile vision).
# One server at a time; exits non-zero if any check fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="$root/target/pyenv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -c 'import openai, numpy, safetensors, tokenizers, gguf' 2>/dev/null ||
  "$venv/bin/pip" install --quiet 'openai>=1.66,<3' numpy safetensors tokenizers gguf
# The Anthropic SDK pinned: 2.16 is the release whose tool runner opens
# server-side threads (`thread`, refused here with the code it falls back on).
anthropic_version=2.16.0
"$venv/bin/python" -c "import anthropic; assert anthropic.__version__ == '$anthropic_version'" 2>/dev/null ||
  "$venv/bin/pip" install --quiet --disable-pip-version-check "anthropic==$anthropic_version"
minilm="$root/target/embed-ggufs/minilm.gguf"
"$venv/bin/python" scripts/minilm-to-gguf.py --out "$minilm"
mkdir -p target/mmproj
[ -s target/mmproj/gemma3.gguf ] ||
  "$venv/bin/python" scripts/gen-random-mmproj.py --kind gemma3 --out target/mmproj/gemma3.gguf

pid=
trap '[ -n "$pid" ] && { kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; }' EXIT

# check PROFILE [serve args...]: serve, run the PROFILE checks, stop.
check() {
  local profile="$1"
  shift
  local port log rc=0
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  log="$root/target/agent-check-server-$profile.log"
  ./target/release/steward serve --host 127.0.0.1 --port "$port" --max-seqs 4 --ctx-per-seq 2048 \
    --api-key test-key "$@" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || { cat "$log"; return 1; }
    sleep 0.2
  done
  echo "== $profile"
  "$venv/bin/python" -B "$root/scripts/agent_api_check.py" "http://127.0.0.1:$port" test-key "$profile" || rc=$?
  if [ "$profile" = smol ]; then
    echo "== agent flows (multi-turn, event order, usage, tool-call fidelity)"
    "$venv/bin/python" -B "$root/scripts/agent_flows_check.py" "http://127.0.0.1:$port" test-key || rc=$?
  fi
  kill $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  pid=
  return $rc
}

failed=0
# Pins held 3 s at most: the check sees one released (no timed assertion).
check smol --served-model-name smol --pin-max-ttl-s 3 || failed=1
check minilm --model "minilm=$minilm" || failed=1
check vision --served-model-name smol --mmproj target/mmproj/gemma3.gguf || failed=1
exit $failed
