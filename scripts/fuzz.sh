#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 20): request
# validation, the streaming detokenizer with stop strings, the tool-call
# parser, template rendering with protected client text, grammar and schema
# compilation under the request limits. 0 crashes is the bar; a crash leaves
# its input under fuzz/artifacts/<target>/ (add it to a test).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
secs="${1:-20}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(validate detok tool_parser template grammar)
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz@0.13.2
# cargo-fuzz passes unstable flags; the stable toolchain accepts them so.
export RUSTC_BOOTSTRAP=1
cd fuzz
cargo fuzz build -O -s none "${targets[@]/#/}" 2>&1 | tail -3 || true
for t in "${targets[@]}"; do
  cargo fuzz build -O -s none "$t" >/dev/null
  mkdir -p "corpus/$t"
  seeds=()
  [ -d "seeds/$t" ] && seeds=("seeds/$t")
  echo "== fuzz $t (${secs}s)"
  cargo fuzz run -O -s none "$t" "corpus/$t" "${seeds[@]}" -- \
    -max_total_time="$secs" -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 2>&1 \
    | grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|==|INFO: Running with)|crash|panicked|Done" || true
  # libFuzzer exits non-zero on a crash; cargo fuzz run propagates it.
  if [ "${PIPESTATUS[0]}" -ne 0 ]; then
    echo "fuzz $t: CRASH (see fuzz/artifacts/$t)"; exit 1
  fi
done
echo "fuzz: 0 crashes"
