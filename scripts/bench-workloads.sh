#!/usr/bin/env bash
# [2/8] + [4/8] numbers: every built-in workload against `steward serve`
# (defaults), the capacity of chat-mixed under its SLO, and cancellation
# latency under 16 concurrent streams (read from Steward's /metrics).
# Results (JSON + HTML) under target/bench/workloads/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo build --release --bins >/dev/null
out="$root/target/bench/workloads"; mkdir -p "$out"
port=8430
./target/release/steward serve --port $port ${STEWARD_FLAGS:-} >"$out/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$port/ready" >/dev/null; do sleep 0.2; done
url="http://127.0.0.1:$port"
for w in chat-mixed long-prefill-interference shared-prefix cancel-storm slow-readers uniform-128; do
  ./target/release/steward-bench run --url "$url" --workload $w --out "$out/$w.json" --html "$out/$w.html" 2>&1 | grep -v '^\s*$' | tail -1
done
echo "== capacity: chat-mixed, SLO p99 TTFT <= 2000 ms and p99 inter-chunk gap <= 300 ms"
./target/release/steward-bench capacity --url "$url" --workload chat-mixed --levels 1,2,4,8,16 --per-client 4 \
  --out "$out/capacity-chat-mixed.json" --html "$out/capacity-chat-mixed.html" 2>&1 | grep -v '^\s*$' | tail -6
echo "== cancellation latency under 16 concurrent streams (cancel-16)"
./target/release/steward-bench run --url "$url" --workload cancel-16 --out "$out/cancel-16.json" 2>&1 | tail -1
curl -s "$url/metrics" | grep -E '^steward_cancel_latency_recent_seconds|^steward_cancelled_total|^steward_prompt_tokens_after_cancel_total|^steward_step_duration_seconds_(sum|count)|^steward_step_(host|runtime)_seconds_total' | tee "$out/cancel-metrics.txt"
curl -s "$url/metrics" > "$out/metrics-final.txt"
