#!/usr/bin/env bash
# [9/9] CPU section: Steward next to llama-server and vLLM-CPU, interleaved
# level by level in one run (steward-bench compare), workload uniform-128
# (~150-token prompts, exactly 128 output tokens, temperature 0) at
# LEVELS (default 1,4,16,32) concurrent streams, 2 conversations per client.
#
# Servers (each on 2 threads, each named with its weight format):
#   steward-q8_0      Steward's default (Q8_0 converted from the shipped Q4_1)
#   steward-q4_0      Steward with --default-format q4_0 (fastest format)
#   llama-server-q4_0 llama.cpp's server on the same Q4_0 file (its fastest)
#   llama-server-q8_0 ... and on the same Q8_0 file
#   vllm-bf16         only when VLLM_URL is set (start it with
#                     shared/peers/start-vllm.sh; --dtype bfloat16)
# LLAMA_SERVER must point to a llama-server binary built outside this
# repository. Results: target/bench/cpu/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
: "${LLAMA_SERVER:?set LLAMA_SERVER to a llama-server binary}"
out="$root/target/bench/cpu"; mkdir -p "$out"
bin=./target/release
q8="$($bin/steward fetch-model)"; q8="${q8%/*}/SmolLM2-135M-Instruct.Q8_0.gguf"
q4="${q8%/*}/SmolLM2-135M-Instruct.Q4_0.gguf"
[ -f "$q8" ] || $bin/steward convert --to Q8_0 --out "$q8" >/dev/null
[ -f "$q4" ] || $bin/steward convert --to Q4_0 --out "$q4" >/dev/null
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
wait_ready() { for _ in $(seq 1 600); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.2; done; echo "not ready: $1" >&2; return 1; }
$bin/steward serve --port 8411 --threads 2 --model "$q8" >"$out/steward-q8_0.log" 2>&1 & pids+=($!)
$bin/steward serve --port 8412 --threads 2 --model "$q4" >"$out/steward-q4_0.log" 2>&1 & pids+=($!)
"$LLAMA_SERVER" -m "$q4" --port 8413 -t 2 -tb 2 -np 32 -c 32768 >"$out/llama-server-q4_0.log" 2>&1 & pids+=($!)
"$LLAMA_SERVER" -m "$q8" --port 8414 -t 2 -tb 2 -np 32 -c 32768 >"$out/llama-server-q8_0.log" 2>&1 & pids+=($!)
for u in http://127.0.0.1:8411/ready http://127.0.0.1:8412/ready http://127.0.0.1:8413/health http://127.0.0.1:8414/health; do wait_ready "$u"; done
args=(--url http://127.0.0.1:8411 --name steward-q8_0 --url http://127.0.0.1:8412 --name steward-q4_0
      --url http://127.0.0.1:8413 --name llama-server-q4_0 --url http://127.0.0.1:8414 --name llama-server-q8_0)
if [ -n "${VLLM_URL:-}" ]; then
  wait_ready "$VLLM_URL/v1/models"
  args+=(--url "$VLLM_URL" --name vllm-bf16)
fi
$bin/steward-bench compare "${args[@]}" --workload uniform-128 --ignore-eos \
  --levels "${LEVELS:-1,4,16,32}" --per-client "${PER_CLIENT:-3}" --settle-s 5 \
  --out "$out/compare.json" --html "$out/compare.html" 2>"$out/bench.log"
