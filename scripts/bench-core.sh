#!/usr/bin/env bash
# [1/8] numbers: single-stream decode through HTTP next to the runtime
# adapter's own single-sequence decode (the ceiling), and aggregate tokens/s
# at 8 concurrent streams. Interleaved, two rounds. Results under target/bench/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo build --release --bins >/dev/null
out="$root/target/bench"; mkdir -p "$out"
port=8391
./target/release/steward serve --port $port --max-seqs 32 >"$out/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$port/ready" >/dev/null; do sleep 0.2; done
for round in 1 2; do
  echo "== round $round"
  ./target/release/steward bench-runtime --flash-attn --parallel 1 --prompt-tokens 150 --tokens 128 --reps 2 2>/dev/null | tee "$out/ceiling-p1-$round.json"
  ./target/release/steward bench-runtime --flash-attn --parallel 8 --prompt-tokens 150 --tokens 128 --reps 2 2>/dev/null | tee "$out/ceiling-p8-$round.json"
  ./target/release/steward-bench run --url "http://127.0.0.1:$port" --workload uniform-128 \
    --concurrency 1 --conversations 3 --out "$out/http-c1-$round.json"
  ./target/release/steward-bench run --url "http://127.0.0.1:$port" --workload uniform-128 \
    --concurrency 8 --conversations 16 --out "$out/http-c8-$round.json"
done
python3 - "$out" <<'PY'
import json, sys, glob
out = sys.argv[1]
for r in (1, 2):
    c1 = json.load(open(f"{out}/http-c1-{r}.json"))["summary"]
    c8 = json.load(open(f"{out}/http-c8-{r}.json"))["summary"]
    p1 = json.load(open(f"{out}/ceiling-p1-{r}.json"))
    p8 = json.load(open(f"{out}/ceiling-p8-{r}.json"))
    print(f"round {r}: ceiling 1 seq {max(p1['decode_tok_s']):.1f} tok/s | HTTP 1 stream decode {1000/c1['tpot_ms']['p50']:.1f} tok/s "
          f"(aggregate incl. prefill {c1['output_tokens_per_s']:.1f}) | ceiling 8 seq decode {max(p8['decode_tok_s']):.1f} | "
          f"HTTP 8 streams aggregate {c8['output_tokens_per_s']:.1f} tok/s, TTFT p50 {c8['ttft_ms']['p50']:.0f} ms")
PY
