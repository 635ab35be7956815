#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 20): request
# validation, the streaming detokenizer with stop strings, the tool-call
# parser, template rendering with protected client text, grammar and schema
# compilation under the request limits. 0 crashes is the bar; a crash leaves
# its input under fuzz/artifacts/<target>/ (add it to a test).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#        scripts/fuzz.sh --build-only   (every target, nothing run: test.sh
#        runs this niced in the background while its tests run)
#
# FUZZ_BUILD=dev (the default, what CI runs): unoptimized Rust with debug
# assertions and overflow checks, llama.cpp at -O0 (the targets never call
# into it; it is only linked). A cold build takes ~5 min on 2 cores instead
# of ~15-20 for a release one (cargo-fuzz forces one codegen unit per crate
# there). FUZZ_BUILD=release for long runs by hand: faster executions.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build_only=0
if [ "${1:-}" = --build-only ]; then
  build_only=1
  shift
fi
secs="${1:-20}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(validate detok tool_parser template grammar)
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz@0.13.2
# cargo-fuzz passes unstable flags; the stable toolchain accepts them so.
export RUSTC_BOOTSTRAP=1
mode=(--dev)
if [ "${FUZZ_BUILD:-dev}" = release ]; then
  mode=(-O)
else
  # llama.cpp's CMake build as Debug without -g (build.rs forwards CMAKE_*).
  export LLAMA_LIB_PROFILE=Debug CMAKE_C_FLAGS_DEBUG=-O0 CMAKE_CXX_FLAGS_DEBUG=-O0
fi
cd fuzz
# Every target in one build (the links run in parallel).
cargo fuzz build "${mode[@]}" -s none >/dev/null
[ "$build_only" = 1 ] && exit 0
for t in "${targets[@]}"; do
  cargo fuzz build "${mode[@]}" -s none "$t" >/dev/null
  mkdir -p "corpus/$t"
  seeds=()
  [ -d "seeds/$t" ] && seeds=("seeds/$t")
  echo "== fuzz $t (${secs}s)"
  log="$(mktemp)"
  rc=0
  cargo fuzz run "${mode[@]}" -s none "$t" "corpus/$t" "${seeds[@]}" -- \
    -max_total_time="$secs" -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 >"$log" 2>&1 || rc=$?
  grep -E "^(Done|stat::number_of_executed_units|stat::peak_rss_mb)|panicked|ERROR" "$log" || true
  if [ "$rc" -ne 0 ]; then
    tail -20 "$log"
    echo "fuzz $t: CRASH (exit $rc; input under fuzz/artifacts/$t)"
    exit 1
  fi
  rm -f "$log"
done
echo "fuzz: 0 crashes"
