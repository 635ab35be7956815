#!/usr/bin/env bash
# [6/8] host tier: returning conversations whose KV state was evicted from
# the slots (K conversations of ~1,500 tokens each on a server with 2 slots,
# round-robin), with the host tier on (default 512 MiB) and off, interleaved
# twice. Results: target/bench/prefix-host/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$root/target/bench/prefix-host"; mkdir -p "$out"
bin=./target/release
run() { # name, flags...
  local name=$1; shift
  $bin/steward serve --port 8441 --threads 2 --max-seqs 2 --ctx-per-seq 2048 "$@" >"$out/$name.log" 2>&1 & local pid=$!
  for _ in $(seq 1 600); do curl -sf http://127.0.0.1:8441/ready >/dev/null 2>&1 && break; sleep 0.2; done
  printf '%-10s ' "$name"
  python3 scripts/bench-prefix-host.py http://127.0.0.1:8441 "${K:-4}" "${ROUNDS:-3}" 2>"$out/$name.turns"
  kill $pid; wait $pid 2>/dev/null || true
}
for round in 1 2; do
  run "host-on-$round"
  run "host-off-$round" --prefix-host-mb 0
done
