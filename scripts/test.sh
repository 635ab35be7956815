#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit + real-model + HTTP tests
# (release build: the model runs in every tier), chat templates against
# transformers (scripts/template-oracle.sh; tiny GGUFs per template from
# scripts/gen-template-ggufs.sh; the templates are fetched from PyPI's
# llama-cpp-python 0.3.36 source package, never kept here), the official OpenAI
# Python client against a live server, and every fuzz target briefly
# (FUZZ_SECONDS each, default 20). Fetches the model when missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
./scripts/setup.sh
echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --release --all-targets -- -D warnings
cargo build --release --bins
echo "== default model"
./target/release/steward fetch-model
echo "== chat templates: the transformers oracle and one tiny GGUF per template"
./scripts/gen-template-ggufs.sh "$(./scripts/fetch-templates.sh | tail -n 1)" target/template-ggufs
STEWARD_ORACLE_TEMPLATES="$(./scripts/oracle-templates.sh | tail -n 1)" ./scripts/template-oracle.sh target/template-cases.json
echo "== cargo test"
cargo test --release --workspace
echo "== OpenAI Python client against steward serve"
./scripts/openai_client_check.sh
echo "== fuzz targets, ${FUZZ_SECONDS:-20} s each"
./scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
