#!/usr/bin/env bash
# [3/8] benchmark: long-prefill interference at several prompt budgets, and
# aggregate throughput at 1-32 streams, Steward next to llama-server (same
# model file, 2 threads), interleaved in one run. LLAMA_SERVER must point to
# a llama-server binary built outside this repository. FORMAT picks the file
# both serve: q8_0 (default: the format Steward serves the default model in),
# q4_0, or original (the shipped Q4_1). Results: target/bench/sched/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
: "${LLAMA_SERVER:?set LLAMA_SERVER to a llama-server binary}"
model="$(./target/release/steward fetch-model)"
case "${FORMAT:-q8_0}" in
  original) ;;
  q8_0) model="${model%/*}/SmolLM2-135M-Instruct.Q8_0.gguf" ;;
  q4_0) model="${model%/*}/SmolLM2-135M-Instruct.Q4_0.gguf" ;;
  *) echo "FORMAT must be q8_0, q4_0 or original" >&2; exit 2 ;;
esac
if [ ! -f "$model" ]; then
  ./target/release/steward convert --to "$(echo "${FORMAT:-q8_0}" | tr a-z A-Z)" --out "$model" >/dev/null
fi
echo "model: $model"
out="$root/target/bench/sched"; mkdir -p "$out"
bench=./target/release/steward-bench
wait_ready() { for _ in $(seq 1 600); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
summ() { python3 - "$1" "$2" <<'PY'
import json, sys
v = json.load(open(sys.argv[2]))["summary"]
print(f"{sys.argv[1]:28} worst decoder gap during long prefill {v['worst_gap_during_labelled_ms'] or 0:8.0f} ms | "
      f"long TTFT {v['labelled_ttft_ms'].get('long-prompt', 0):8.0f} ms | short-after TTFT {v['labelled_ttft_ms'].get('short-after-long', 0):8.0f} ms | "
      f"gap p99 {v['inter_chunk_gap_ms']['p99']:6.0f} ms | out {v['output_tokens_per_s']:.1f} tok/s")
PY
}
steward_run() { # name, extra flags...
  local name=$1; shift
  ./target/release/steward serve --port 8401 --threads 2 --model "$model" "$@" >"$out/$name.log" 2>&1 & local pid=$!
  wait_ready http://127.0.0.1:8401/ready
  $bench run --url http://127.0.0.1:8401 --workload long-prefill-interference --out "$out/$name.json" 2>>"$out/bench.log" || true
  stop $pid; summ "$name" "$out/$name.json"
}
llama_run() {
  "$LLAMA_SERVER" -m "$model" --port 8402 -t 2 -tb 2 -np 5 -c 20480 >"$out/llama-server-interf.log" 2>&1 & local pid=$!
  wait_ready http://127.0.0.1:8402/health
  $bench run --url http://127.0.0.1:8402 --workload long-prefill-interference --out "$out/llama-server.json" 2>>"$out/bench.log" || true
  stop $pid; summ "llama-server" "$out/llama-server.json"
}
echo "== interference (4 streams decoding, a 3,000-token prompt and a short one arrive 1 s in)"
steward_run steward-default
llama_run
steward_run steward-budget-64 --prompt-budget 64 --target-step-ms 0
steward_run steward-adaptive-200ms --target-step-ms 200
steward_run steward-budget-128 --prompt-budget 128 --target-step-ms 0
echo "== throughput: uniform-128 (~150-token prompts, 128 tokens each), 2 conversations per client"
./target/release/steward serve --port 8401 --threads 2 --model "$model" ${STEWARD_FLAGS:-} >"$out/steward-tput.log" 2>&1 & s_pid=$!
"$LLAMA_SERVER" -m "$model" --port 8402 -t 2 -tb 2 -np 32 -c 32768 >"$out/llama-server-tput.log" 2>&1 & l_pid=$!
wait_ready http://127.0.0.1:8401/ready; wait_ready http://127.0.0.1:8402/health
$bench compare --url http://127.0.0.1:8401 --url http://127.0.0.1:8402 --name steward --name llama-server \
  --workload uniform-128 --levels ${LEVELS:-1,4,8,16,32} --per-client ${PER_CLIENT:-3} --settle-s 5 \
  --out "$out/compare.json" --html "$out/compare.html" 2>>"$out/bench.log"
stop $s_pid; stop $l_pid
