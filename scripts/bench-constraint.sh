#!/usr/bin/env bash
# [7/8] The cost of constrained decoding: decode speed with and without a
# JSON-schema constraint on one Steward server, interleaved level by level
# (steward-bench compare, the same URL twice, the schema as a per-server
# extra body), workload uniform-128 (~150-token prompts, temperature 0), at
# LEVELS (default 1,8) concurrent streams. Under the schema the grammar
# would allow more than 128 tokens (12 strings of 40-60 characters), so
# both kinds yield exactly 128 tokens (the plain one with ignore_eos).
# Then the owner-thread time the constraint took, from /metrics.
# Results: target/bench/constraint/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$root/target/bench/constraint"; mkdir -p "$out"
bin=./target/release
port="${PORT:-8431}"
$bin/steward serve --port "$port" --threads 2 --max-seqs 8 >"$out/steward.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break; sleep 0.2; done
schema='{"ignore_eos":false,"response_format":{"type":"json_schema","json_schema":{"name":"facts","schema":
  {"type":"object","properties":{"facts":{"type":"array","items":{"type":"string","minLength":40,"maxLength":60},
  "minItems":12,"maxItems":12}},"required":["facts"],"additionalProperties":false}}}}'
metric() { curl -s "http://127.0.0.1:$port/metrics" | awk -v n="$1" '$1==n {print $2}'; }
s0=$(metric steward_constraint_seconds_total); t0=$(metric steward_constraint_tokens_total)
$bin/steward-bench compare --url "http://127.0.0.1:$port" --name plain \
  --url "http://127.0.0.1:$port" --name json-schema --server-extra '{}' --server-extra "$schema" \
  --workload uniform-128 --ignore-eos --levels "${LEVELS:-1,8}" --per-client "${PER_CLIENT:-3}" \
  --settle-s 5 --out "$out/compare.json" 2>"$out/bench.log"
s1=$(metric steward_constraint_seconds_total); t1=$(metric steward_constraint_tokens_total)
step_sum=$(metric steward_step_duration_seconds_sum); step_n=$(metric steward_step_duration_seconds_count)
python3 - "$s0" "$s1" "$t0" "$t1" "$step_sum" "$step_n" <<'PY'
import sys
s0, s1, t0, t1, ss, sn = map(float, sys.argv[1:])
tok = t1 - t0
print(f"constraint: {tok:.0f} tokens, {1e3 * (s1 - s0):.1f} ms owner-thread time, "
      f"{1e6 * (s1 - s0) / max(tok, 1):.0f} us per constrained token; "
      f"mean step (both runs) {1e3 * ss / max(sn, 1):.1f} ms")
PY
