#!/usr/bin/env bash
# Starts `steward serve` on a free loopback port and drives it with the
# official `openai` Python package (installed into target/pyenv), unchanged
# client code: first the default model (served as "smol"), then Gemma 3 270M
# (`steward fetch-model gemma3-270m`, a base model with no chat template,
# served as "gemma"), then the default model with a random-weight image
# projector (target/mmproj/gemma3.gguf, profile vision) and with an audio one
# (target/mmproj/ultravox.gguf, profile audio), both served as "smol" and
# made by scripts/gen-random-mmproj.py when missing. One server at a time;
# exits non-zero if any check fails.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
venv="$root/target/pyenv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import openai, prometheus_client, jsonschema, numpy, gguf' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'openai>=1.40,<4' 'prometheus-client>=0.17' 'jsonschema>=4' numpy gguf
fi

pid=
trap '[ -n "$pid" ] && { kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; }' EXIT

# check PROFILE SERVED_NAME [serve args...]: serve, run the PROFILE checks, stop.
check() {
  local profile="$1" name="$2"
  shift 2
  local port log rc=0
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  log="$root/target/openai-check-server-$profile.log"
  ./target/release/steward serve --host 127.0.0.1 --port "$port" --max-seqs 4 --ctx-per-seq 1024 \
    --served-model-name "$name" --api-key test-key "$@" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || { cat "$log"; return 1; }
    sleep 0.2
  done
  echo "== $profile ($name)"
  "$venv/bin/python" -B "$root/scripts/openai_client_check.py" "http://127.0.0.1:$port/v1" test-key "$profile" || rc=$?
  kill $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  pid=
  return $rc
}

# The random-weight projectors for the default model (noise out; see the
# generator's doc), made once.
mkdir -p target/mmproj
for k in gemma3 ultravox; do
  [ -s "target/mmproj/$k.gguf" ] ||
    "$venv/bin/python" scripts/gen-random-mmproj.py --kind "$k" --out "target/mmproj/$k.gguf"
done

failed=0
check smol smol || failed=1
gemma="$(./target/release/steward fetch-model gemma3-270m)"
check gemma gemma --model "$gemma" || failed=1
check vision smol --mmproj target/mmproj/gemma3.gguf || failed=1
check audio smol --mmproj target/mmproj/ultravox.gguf || failed=1
exit $failed
