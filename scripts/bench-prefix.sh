#!/usr/bin/env bash
# [6/8] prefix cache: 8 questions under one ~1,500-token system prompt
# (workload shared-system-1500), 16 tokens each.
#   sequential (concurrency 1): TTFT of the first request vs the mean of the rest;
#   together (concurrency 8, all sent at once): prompt tokens computed and the
#     most KV held while they are live, from Steward's /metrics (polled): the
#     ledger's cells and llama.cpp's own count (steward_kv_bytes_physical),
#     once with per-slot KV streams (the default) and once with --kv-unified
#     (where a copied prefix's cells are shared, not duplicated).
# With LLAMA_SERVER set, llama-server runs the sequential case on the same
# file, right after Steward. Results: target/bench/prefix/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$root/target/bench/prefix"; mkdir -p "$out"
bin=./target/release
model="$($bin/steward fetch-model)"; model="${model%/*}/SmolLM2-135M-Instruct.Q8_0.gguf"
[ -f "$model" ] || $bin/steward convert --to Q8_0 --out "$model" >/dev/null
wait_ready() { for _ in $(seq 1 600); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.2; done; return 1; }
metric() { curl -sf http://127.0.0.1:8431/metrics | awk -v n="$1" '$1 == n { print $2 }'; }
$bin/steward serve --port 8431 --threads 2 --model "$model" >"$out/steward.log" 2>&1 & pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
wait_ready http://127.0.0.1:8431/ready
$bin/steward-bench run --url http://127.0.0.1:8431 --workload shared-system-1500 \
  --out "$out/steward-sequential.json" 2>>"$out/bench.log"
# Together: a fresh server (cold cache), 8 clients at once, /metrics polled;
# per-slot streams, then a unified pool.
kill $pid; wait $pid 2>/dev/null || true
together() { # name, flags...
  local name=$1; shift
  $bin/steward serve --port 8431 --threads 2 --model "$model" "$@" >"$out/steward-$name.log" 2>&1 & pid=$!
  wait_ready http://127.0.0.1:8431/ready
  local before; before=$(metric steward_prompt_tokens_total)
  ( while sleep 0.05; do echo "$(metric steward_kv_cells_used) $(metric steward_kv_bytes_physical)"; done ) >"$out/kv-$name.txt" 2>/dev/null & local poll=$!
  $bin/steward-bench run --url http://127.0.0.1:8431 --workload shared-system-1500 --concurrency 8 \
    --out "$out/steward-together-$name.json" 2>>"$out/bench.log"
  kill $poll 2>/dev/null || true
  echo "$before $(metric steward_prompt_tokens_total)" >"$out/computed-$name.txt"
  bpc=$(curl -sf http://127.0.0.1:8431/debug/ledger | python3 -c "import json,sys; l=json.load(sys.stdin); print(l['kv_pool']//max(1,int('$(metric steward_kv_cells_total)')))")
  kill $pid; wait $pid 2>/dev/null || true
}
together per-slot
together unified --kv-unified
if [ -n "${LLAMA_SERVER:-}" ]; then
  "$LLAMA_SERVER" -m "$model" --port 8432 -t 2 -tb 2 -np 8 -c 32768 >"$out/llama-server.log" 2>&1 & lpid=$!
  wait_ready http://127.0.0.1:8432/health
  $bin/steward-bench run --url http://127.0.0.1:8432 --workload shared-system-1500 \
    --out "$out/llama-server-sequential.json" 2>>"$out/bench.log" || true
  kill $lpid; wait $lpid 2>/dev/null || true
fi
python3 - "$out" "$bpc" <<'PY'
import json, os, sys
out, bpc = sys.argv[1], int(sys.argv[2])
def seq(name):
    p = f"{out}/{name}-sequential.json"
    if not os.path.exists(p):
        return
    recs = sorted(json.load(open(p))["records"], key=lambda r: r["send_ms"])
    t = [r["first_text_ms"] - r["send_ms"] for r in recs if r.get("first_text_ms") is not None]
    print(f"{name:14} sequential: first TTFT {t[0]:7.0f} ms | mean of the other {len(t)-1}: {sum(t[1:])/max(1,len(t)-1):6.0f} ms")
seq("steward"); seq("llama-server")
for name in ["per-slot", "unified"]:
    recs = json.load(open(f"{out}/steward-together-{name}.json"))["records"]
    prompt = [r["prompt_tokens"] for r in recs if r.get("prompt_tokens")]
    before, after = map(float, open(f"{out}/computed-{name}.txt").read().split())
    rows = [l.split() for l in open(f"{out}/kv-{name}.txt") if len(l.split()) == 2]
    cells = max(float(a) for a, _ in rows)
    phys = max(float(b) for _, b in rows)
    print(f"steward together ({name}): {len(prompt)} requests, prompt tokens {sum(prompt)} (longest {max(prompt)}), "
          f"computed {after - before:.0f} | most KV held: ledger {cells:.0f} cells ({cells * bpc / 2**20:.1f} MiB), "
          f"llama.cpp {phys / 2**20:.1f} MiB (~{phys / bpc:.0f} cells at {bpc} bytes per cell)")
PY
