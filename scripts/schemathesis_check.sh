#!/usr/bin/env bash
# Property-based tests of the live API against its own OpenAPI 3.1 document
# (`GET /openapi.json`, generated from the wire types by utoipa): a pinned
# schemathesis (PyPI, installed into target/pyenv) generates requests from
# the document for every operation, valid and invalid, and checks every
# answer: no 5xx (`not_a_server_error`), a documented status, content type
# and headers, and a body that matches the documented schema.
#
# Two servers, one at a time, on free loopback ports, each with one decode
# thread (the other core runs schemathesis; two OpenMP threads on a busy
# 2-core machine spin-wait and make a 16-token answer take seconds):
#   1. the default model with small limits (4 slots of 256 cells, answers
#      of at most 16 tokens, at most 2 choices) so that generated requests
#      stay cheap: every operation but the three below (`/dashboard/events`,
#      an endless stream, is read to its first event only);
#   2. all-MiniLM-L6-v2 (target/embed-ggufs/minilm.gguf, converted by
#      scripts/minilm-to-gguf.py) as the default model: `/v1/embeddings`,
#      `/v1/rerank` and `/rerank`, which on a generative model only answer
#      400 `model_not_embedding`.
# Neither server has an API key, so the admin routes answer 403
# `admin_disabled` (documented) and nothing needs authentication.
#
# Usage: scripts/schemathesis_check.sh [MAX_EXAMPLES (default 12)] [SEED (default 1)]
#        scripts/schemathesis_check.sh --install-only   (scripts/prefetch.sh)
# Exits non-zero if schemathesis reports any failure; its JUnit reports
# and the servers' logs are left in target/schemathesis/.
# ST_EXPECT_5XX="504 …" accepts those 5xx statuses as not server errors
# (for a run that looks past a known, reported finding; default: none).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
version=4.32.5
venv="$root/target/pyenv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
[ "$("$venv/bin/schemathesis" --version 2>/dev/null | awk '{print $NF}')" = "$version" ] ||
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
# --install-only: schemathesis, nothing run (scripts/prefetch.sh).
[ "${1:-}" = --install-only ] && exit 0
examples="${1:-12}"
seed="${2:-1}"
[ -x target/release/steward ] || cargo build --release --bins
out="$root/target/schemathesis"
mkdir -p "$out"

pid=
trap '[ -n "$pid" ] && { kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; }' EXIT

checks=not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance
config="$out/config.toml"
printf '[[operations]]\ninclude-path = "/dashboard/events"\nmax-stream-events = 1\n' >"$config"
if [ -n "${ST_EXPECT_5XX:-}" ]; then
  statuses='"2xx", "3xx", "4xx"'
  for s in $ST_EXPECT_5XX; do statuses+=", \"$s\""; done
  printf '\n[checks.not_a_server_error]\nexpected-statuses = [%s]\n' "$statuses" >>"$config"
  echo "== accepting $ST_EXPECT_5XX as not server errors (ST_EXPECT_5XX)"
fi

# run NAME [serve args...] -- [schemathesis args...]: serve, test, stop.
run() {
  local name="$1" port log rc=0
  shift
  local serve=()
  while [ "$1" != -- ]; do
    serve+=("$1")
    shift
  done
  shift
  port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
  log="$out/server-$name.log"
  # The Batch API's files and jobs: a fresh directory of this run's.
  rm -rf "$out/state-$name"
  ./target/release/steward serve --host 127.0.0.1 --port "$port" --threads 1 --max-seqs 4 --ctx-per-seq 256 \
    --max-tokens-limit 16 --max-n 2 --state-dir "$out/state-$name" "${serve[@]}" >"$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || { cat "$log"; return 1; }
    sleep 0.2
  done
  echo "== schemathesis: $name (max $examples examples per operation, seed $seed)"
  local t0=$SECONDS
  "$venv/bin/schemathesis" --config-file "$config" run "http://127.0.0.1:$port/openapi.json" \
    --checks "$checks" --max-examples "$examples" --seed "$seed" --workers 1 \
    --generation-database none --request-timeout 60 --no-color --output-sanitize false \
    --report junit --report-junit-path "$out/$name.xml" "$@" || rc=$?
  echo "== $name: $((SECONDS - t0)) s"
  if ! kill -0 $pid 2>/dev/null; then
    echo "the server died:" && tail -n 40 "$log"
    rc=1
  fi
  kill $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  pid=
  return $rc
}

failed=0
run chat -- --exclude-path /v1/embeddings --exclude-path /v1/rerank --exclude-path /rerank || failed=1
"$venv/bin/python" -c 'import numpy, safetensors, tokenizers, gguf' 2>/dev/null ||
  "$venv/bin/pip" install --quiet numpy safetensors tokenizers gguf
minilm="$root/target/embed-ggufs/minilm.gguf"
"$venv/bin/python" scripts/minilm-to-gguf.py --out "$minilm" >/dev/null
run embed --model "minilm=$minilm" -- \
  --include-path /v1/embeddings --include-path /v1/rerank --include-path /rerank || failed=1
exit $failed
