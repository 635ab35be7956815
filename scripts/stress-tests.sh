#!/usr/bin/env bash
# The flake check: `cargo test --release --workspace` N times in a row
# (default 5) while stress-ng keeps every core busy, stopping at the first
# failure. No retries anywhere: a test that fails here at random is a
# defect. Needs what scripts/test.sh makes first (the release build, the
# models and the test fixtures; run it once, or this makes them).
# Usage: scripts/stress-tests.sh [N]   (STRESS=0: no load)
# Output: each run's log under target/stress/, a line per run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
n="${1:-5}"
# A test whose fixture is missing fails here (never a silent skip).
export STEWARD_REQUIRE_FIXTURES=1
./scripts/setup.sh
command -v stress-ng >/dev/null 2>&1 || {
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq stress-ng >/dev/null
}
cargo test --release --workspace --no-run
[ -x target/pyenv/bin/python ] || ./scripts/prefetch.sh
./scripts/test-fixtures.sh
mkdir -p target/stress
load=""
if [ "${STRESS:-1}" != 0 ]; then
  stress-ng --cpu "$(nproc)" --timeout 0 >/dev/null 2>&1 &
  load=$!
  trap 'kill $load 2>/dev/null || true' EXIT
  echo "load: stress-ng --cpu $(nproc) (pid $load)"
fi
for i in $(seq 1 "$n"); do
  start=$SECONDS
  if cargo test --release --workspace >"target/stress/run-$i.log" 2>&1; then
    echo "run $i/$n: passed in $((SECONDS - start)) s"
  else
    echo "run $i/$n: FAILED after $((SECONDS - start)) s (target/stress/run-$i.log):"
    grep -E "^(test .* FAILED|---- |thread .* panicked)" "target/stress/run-$i.log" | head -20
    exit 1
  fi
done
echo "all $n runs passed"
