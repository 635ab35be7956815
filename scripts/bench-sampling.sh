#!/usr/bin/env bash
# [1/8] Sampled decoding beside llama-server, interleaved level by level in
# one run (steward-bench compare), workload uniform-128 (~150-token prompts,
# exactly 128 output tokens) at LEVELS (default 1,4,16,32) concurrent
# streams, for each sampling setting in turn:
#   greedy    temperature 0
#   default   temperature 1, top_p 1 (OpenAI's defaults: what most clients send)
#   typical   temperature 0.7, top_p 0.9, top_k 40
# Both servers on the same Q8_0 file (Steward's default format) and 2
# threads. Then guidellm (PyPI), an outside client, at 4 and 16 streams
# against each, when GUIDELLM is set (path to its binary; it needs a local
# tokenizer folder in GUIDELLM_TOKENIZER). LLAMA_SERVER must point to a
# llama-server built outside this repository. Results: target/bench/sampling/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
: "${LLAMA_SERVER:?set LLAMA_SERVER to a llama-server binary}"
out="$root/target/bench/sampling"; mkdir -p "$out"
bin=./target/release
q8="$($bin/steward fetch-model)"; q8="${q8%/*}/SmolLM2-135M-Instruct.Q8_0.gguf"
[ -f "$q8" ] || $bin/steward convert --to Q8_0 --out "$q8" >/dev/null
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
wait_ready() { for _ in $(seq 1 600); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.2; done; echo "not ready: $1" >&2; return 1; }
$bin/steward serve --port 8421 --threads 2 --model "$q8" --served-model-name m >"$out/steward.log" 2>&1 & pids+=($!)
"$LLAMA_SERVER" -m "$q8" --port 8422 -t 2 -tb 2 -np 32 -c 32768 --alias m >"$out/llama-server.log" 2>&1 & pids+=($!)
wait_ready http://127.0.0.1:8421/ready; wait_ready http://127.0.0.1:8422/health
declare -A body=(
  [greedy]='{"temperature":0}'
  [default]='{"temperature":1,"top_p":1}'
  [typical]='{"temperature":0.7,"top_p":0.9,"top_k":40}'
)
# Owner-thread host time per generated token (everything but the runtime's
# own step time: planning, batch building, sampling, detokenizing, emitting),
# from Steward's counters around each setting's run.
host() {
  curl -s http://127.0.0.1:8421/metrics | awk '/^steward_step_host_seconds_total /{h=$2} /^steward_generation_tokens_total /{g=$2} END{print h, g}'
}
i=0
for s in ${SETTINGS:-default greedy typical}; do
  echo "== $s: ${body[$s]}"
  # Each setting draws its own prompts: with the same ones, a server's
  # prompt cache would serve the later settings' prefills.
  i=$((i + 1))
  wl="$out/uniform-128-$s.toml"
  sed "s/^seed = .*/seed = $((13 + 7919 * i))/" crates/bench/workloads/uniform-128.toml >"$wl"
  before="$(host)"
  $bin/steward-bench compare --url http://127.0.0.1:8421 --name steward-q8_0 \
    --url http://127.0.0.1:8422 --name llama-server-q8_0 \
    --workload "$wl" --ignore-eos --extra-body "${body[$s]}" \
    --levels "${LEVELS:-1,4,16,32}" --per-client "${PER_CLIENT:-3}" --settle-s 3 \
    --out "$out/compare-$s.json" --html "$out/compare-$s.html" 2>"$out/bench-$s.log"
  after="$(host)"
  echo "$s $before $after" | awk '{printf "%s: Steward host work %.1f us per generated token (%d tokens)\n", $1, ($4-$2)*1e6/($5-$3), $5-$3}' | tee -a "$out/host.txt"
done
if [ -n "${GUIDELLM:-}" ]; then
  : "${GUIDELLM_TOKENIZER:?set GUIDELLM_TOKENIZER to a local tokenizer folder}"
  for c in ${GUIDELLM_LEVELS:-4 16}; do
    for p in 8421 8422; do
      name=$([ $p = 8421 ] && echo steward || echo llama-server)
      HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$GUIDELLM" run \
        --backend "kind=openai_http,target=http://127.0.0.1:$p,model=m" \
        --profile "kind=concurrent,streams=$c" \
        --constraint "kind=max_duration,seconds=${GUIDELLM_SECONDS:-40}" \
        --data kind=synthetic_text,prompt_tokens=128,output_tokens=64 \
        --tokenizer "kind=hf_auto,model=$GUIDELLM_TOKENIZER" \
        --output "kind=json,path=$out/guidellm-$name-c$c.json" --disable-progress \
        >"$out/guidellm-$name-c$c.log" 2>&1 || echo "guidellm $name c$c failed (see log)"
    done
  done
fi
echo "results in $out"
