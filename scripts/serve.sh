#!/usr/bin/env bash
# Build (release) and serve the default model on 127.0.0.1:8080, fetching the
# model when it is missing. Extra arguments go to `steward serve`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
./scripts/setup.sh
cargo build --release --bin steward
exec ./target/release/steward serve --host 127.0.0.1 --port 8080 "$@"
