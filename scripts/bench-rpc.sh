#!/usr/bin/env bash
# [7/8] benchmark: one model split over two RPC workers against the same
# model served locally, in one run. Two `steward rpc-worker` processes on
# loopback ports (1 thread each: the two cores this machine has), a local
# server (2 threads) and an RPC server (`--rpc A,B`, its own 2 threads only
# sample and orchestrate) up side by side; `steward-bench compare` runs
# uniform-128 against both, interleaved level by level; then the runtime
# alone (`steward bench-runtime`, one sequence, 128 tokens), local and over
# RPC, twice, interleaved. Loopback has no network latency: on real machines
# every step also pays a round trip per worker.
#
# Env: STEWARD, STEWARD_BENCH, LEVELS (1,4), CONVERSATIONS (per level, 8),
# OUT (target/bench/rpc).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
steward="${STEWARD:-./target/release/steward}"
bench="${STEWARD_BENCH:-./target/release/steward-bench}"
levels="${LEVELS:-1,4}"
convs="${CONVERSATIONS:-8}"
out="${OUT:-$root/target/bench/rpc}"
mkdir -p "$out"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
"$steward" rpc-worker --port 50071 --threads 1 >"$out/worker-a.log" 2>&1 & pids+=($!)
"$steward" rpc-worker --port 50072 --threads 1 >"$out/worker-b.log" 2>&1 & pids+=($!)
sleep 2
common=(--served-model-name smol --max-seqs 8 --ctx-per-seq 1024 --threads 2)
"$steward" serve --port 18531 "${common[@]}" >"$out/local.log" 2>&1 & pids+=($!)
"$steward" serve --port 18532 "${common[@]}" --rpc 127.0.0.1:50071,127.0.0.1:50072 >"$out/rpc.log" 2>&1 & pids+=($!)
for p in 18531 18532; do
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$p/ready" >/dev/null && break; sleep 0.2; done
done
"$bench" compare --url http://127.0.0.1:18531 --url http://127.0.0.1:18532 --name local --name rpc \
  --workload uniform-128 --levels "$levels" --conversations "$convs" --ignore-eos --settle-s 3 \
  --out "$out/compare.json" | tee "$out/compare.txt"
kill "${pids[2]}" "${pids[3]}"; wait "${pids[2]}" "${pids[3]}" 2>/dev/null || true
# The RPC server held the workers (one client each): restart them for the
# runtime-only runs.
kill "${pids[0]}" "${pids[1]}"; wait "${pids[0]}" "${pids[1]}" 2>/dev/null || true
pids=()
"$steward" rpc-worker --port 50071 --threads 1 >>"$out/worker-a.log" 2>&1 & pids+=($!)
"$steward" rpc-worker --port 50072 --threads 1 >>"$out/worker-b.log" 2>&1 & pids+=($!)
sleep 2
for round in 1 2; do
  echo "== round $round: bench-runtime local"
  "$steward" bench-runtime --threads 2 --tokens 128 --reps 3 2>/dev/null | tail -2
  echo "== round $round: bench-runtime over RPC"
  "$steward" bench-runtime --threads 2 --tokens 128 --reps 3 --rpc 127.0.0.1:50071,127.0.0.1:50072 2>/dev/null | tail -2
done | tee "$out/runtime.txt"
