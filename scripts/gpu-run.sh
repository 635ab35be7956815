#!/usr/bin/env bash
# [8/8] Runs ON THE GPU MACHINE, inside a bundle made by scripts/gpu-bundle.sh:
# builds the CUDA module if it is missing (gpu-cuda-module.sh), writes a
# random-weight model (gen-random-gguf.py: OUTPUT IS NOISE, speed only),
# serves it with every layer on the GPU(s) and runs steward-bench against it.
#   gpu-run.sh OUTDIR
#   env: TOK=tokenizer.json (from `gen-random-gguf.py tokenizer`), SHAPE=1b|8b,
#        TYPE=f16|q8_0|q4_k, PYTHONPATH with numpy and gguf, and
#        MODE=levels (default): uniform-128 (~150-token prompts, exactly 128
#          output tokens) at each of LEVELS=1,8,32,64 with PER_CLIENT=2
#          conversations per client, on `--max-seqs SEQS` (64);
#        MODE=stall: workload long-prefill-16k (32 streams decoding, a
#          16,000-token prompt arrives) on `--max-seqs 33 --ctx-per-seq 16640`;
#        SERVE_ARGS: more `steward serve` flags (e.g. --device-sampling true);
#        TAG: a label for this run's files; CEILING=0 skips bbench;
#        TRACE=1 writes every step's timing into the serve log.
set -euo pipefail
b="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: gpu-run.sh OUTDIR}"; mkdir -p "$out"
cd "$b"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1 || true
./gpu-cuda-module.sh
shape="${SHAPE:-1b}"; type="${TYPE:-f16}"; model="/tmp/random-$shape-$type.gguf"
[ -f "$model" ] || python3 gen-random-gguf.py model --tok "${TOK:?set TOK}" --shape "$shape" --type "$type" --out "$model"
seqs="${SEQS:-64}"; mode="${MODE:-levels}"; tag="$shape-$type${TAG:+-$TAG}"
# The runtime's own batched-decode ceiling on the same model, when the
# workplace's bbench (shared/gpu/bbench, built against the bundle's
# libraries) was put in the bundle: no HTTP, no sampling.
if [ -x ./bbench ] && [ "${CEILING:-1}" != 0 ] && [ "$mode" = levels ]; then
  ./bbench -m "$model" -c $((seqs * 320)) -b 2048 -ub 512 -npp 128 -ntg 128 -npl "${LEVELS:-1,8,32,64}" \
    -ngl 99 -fa on 2>"$out/ceiling-$tag.err" | tee "$out/ceiling-$tag.txt" | grep '^|'
fi
if [ "$mode" = stall ]; then
  size=(--max-seqs 33 --ctx-per-seq 16640)
else
  size=(--max-seqs "$seqs" --ctx-per-seq 512)
fi
log=info
[ "${TRACE:-0}" = 1 ] && log=info,steward_engine=trace,llama-cpp-2=off
# shellcheck disable=SC2086
RUST_LOG=$log ./steward serve --model "$model" --port 8500 "${size[@]}" \
  --served-model-name random ${SERVE_ARGS:-} >"$out/serve-$tag.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 900); do curl -sf http://127.0.0.1:8500/ready >/dev/null 2>&1 && break; kill -0 $pid || { tail -20 "$out/serve-$tag.log"; exit 1; }; sleep 0.2; done
curl -sf http://127.0.0.1:8500/ready >/dev/null || { echo "not ready after 180 s"; tail -20 "$out/serve-$tag.log"; exit 1; }
if [ "$mode" = stall ]; then
  ./steward-bench run --url http://127.0.0.1:8500 --workload long-prefill-16k --settle-s 2 \
    --out "$out/stall-$tag.json" 2>>"$out/bench.log" | tail -5
else
  IFS=, read -ra levels <<<"${LEVELS:-1,8,32,64}"
  for l in "${levels[@]}"; do
    ./steward-bench run --url http://127.0.0.1:8500 --workload uniform-128 --ignore-eos \
      --concurrency "$l" --conversations $((l * ${PER_CLIENT:-2})) --settle-s 2 \
      --out "$out/run-$tag-$l.json" 2>>"$out/bench.log" >/dev/null
    echo "$tag @ $l streams: $(grep 'uniform-128:' "$out/bench.log" | tail -1)"
  done
fi
curl -sf http://127.0.0.1:8500/metrics >"$out/metrics-$tag.txt" || true
curl -sf http://127.0.0.1:8500/debug/ledger >"$out/ledger-$tag.json" || true
