#!/usr/bin/env bash
# [8/8] Speculative decoding on the CPU beside llama-server, interleaved level
# by level in one run (steward-bench compare), on the input-grounded built-in
# workloads (WORKLOADS, default edit-grounded code-grounded: the answer is
# mostly the given input, where drafts from the prompt are accepted) at
# LEVELS (default 1,4,16,32) concurrent streams, four arms:
#   steward-off      Steward, request option speculative.mode = off
#   steward-ngram    the same Steward process, speculative.mode = ngram
#   llama-off        llama-server without speculation
#   llama-ngram      llama-server --spec-type ngram-simple (lookup 3 tokens,
#                    drafts up to 8: Steward's n-gram lookup is 2-4 tokens,
#                    its --draft-max 8; llama-server's defaults, lookup 12,
#                    hardly ever match on these prompts)
# Same Q8_0 file, 2 threads, no prompt cache on either (each arm sees the
# same prompts; a cache would serve the later arms' prefills). Greedy
# (temperature 0) unless BODY is set, e.g. BODY='{"temperature":1}'.
# LLAMA_SERVER points to a llama-server built outside this repository; without
# it only the two Steward arms run. ABBA=1 runs every arm a second time in
# the reverse order at each level (A B C D D C B A: a drift in the host's
# speed over a level then lands on each arm alike; the table has both).
# STEP_TRACE=1 writes Steward's step trace to steward.log.
# Results: target/bench/speculation/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$root/target/bench/speculation"; mkdir -p "$out"
bin=./target/release
q8="$($bin/steward fetch-model)"; q8="${q8%/*}/SmolLM2-135M-Instruct.Q8_0.gguf"
[ -f "$q8" ] || $bin/steward convert --to Q8_0 --out "$q8" >/dev/null
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
wait_ready() { for _ in $(seq 1 600); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.2; done; echo "not ready: $1" >&2; return 1; }
[ "${STEP_TRACE:-0}" = 1 ] && export RUST_LOG="${RUST_LOG:-info,steward_engine::owner=trace}"
$bin/steward serve --port 8431 --threads 2 --model "$q8" --served-model-name m --max-seqs 32 \
  --ctx-per-seq 1024 --prefix-cache false >"$out/steward.log" 2>&1 & pids+=($!)
# Arms: name, URL, per-request extra body.
arms=(steward-off http://127.0.0.1:8431 '{"speculative":{"mode":"off"}}'
  steward-ngram http://127.0.0.1:8431 '{"speculative":{"mode":"ngram"}}')
if [ -n "${LLAMA_SERVER:-}" ]; then
  "$LLAMA_SERVER" -m "$q8" --port 8432 -t 2 -tb 2 -np 32 -c 32768 --alias m >"$out/llama-off.log" 2>&1 & pids+=($!)
  "$LLAMA_SERVER" -m "$q8" --port 8433 -t 2 -tb 2 -np 32 -c 32768 --alias m --spec-type ngram-simple \
    --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 8 --spec-draft-n-max 8 >"$out/llama-ngram.log" 2>&1 & pids+=($!)
  wait_ready http://127.0.0.1:8432/health; wait_ready http://127.0.0.1:8433/health
  arms+=(llama-off http://127.0.0.1:8432 '{"cache_prompt":false}'
    llama-ngram http://127.0.0.1:8433 '{"cache_prompt":false}')
fi
wait_ready http://127.0.0.1:8431/ready
args=()
for ((i = 0; i < ${#arms[@]}; i += 3)); do
  args+=(--url "${arms[i + 1]}" --name "${arms[i]}" --server-extra "${arms[i + 2]}")
done
if [ "${ABBA:-0}" = 1 ]; then
  for ((i = ${#arms[@]} - 3; i >= 0; i -= 3)); do
    args+=(--url "${arms[i + 1]}" --name "${arms[i]}-2" --server-extra "${arms[i + 2]}")
  done
fi
greedy='{"temperature":0}'
body="${BODY:-$greedy}"
tag="${TAG:-greedy}"
for w in ${WORKLOADS:-edit-grounded code-grounded}; do
  echo "== $w ($tag: $body)"
  $bin/steward-bench compare "${args[@]}" \
    --workload "$w" --extra-body "$body" --levels "${LEVELS:-1,4,16,32}" --per-client "${PER_CLIENT:-4}" \
    --settle-s 3 --out "$out/$w-$tag.json" 2>"$out/$w-$tag.log" | tee "$out/$w-$tag.md"
  curl -s http://127.0.0.1:8431/metrics | grep -E '^(vllm:spec_decode|steward_spec)' | tee "$out/$w-$tag.metrics" || true
done
