#!/usr/bin/env bash
# [8/8] Runs ON THE GPU MACHINE, inside a bundle made by scripts/gpu-bundle.sh:
# builds the CUDA module if it is missing (gpu-cuda-module.sh), writes a
# random-weight model (gen-random-gguf.py: OUTPUT IS NOISE, speed only),
# serves it with every layer on the GPU and runs steward-bench's uniform-128
# workload (~150-token prompts, exactly 128 output tokens) at each level.
#   gpu-run.sh OUTDIR
#   env: TOK=tokenizer.json (from `gen-random-gguf.py tokenizer`), SHAPE=1b|8b,
#        TYPE=f16|q8_0|q4_k, LEVELS=1,8,32,64, PER_CLIENT=2, SEQS=64,
#        PYTHONPATH with numpy and gguf.
set -euo pipefail
b="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: gpu-run.sh OUTDIR}"; mkdir -p "$out"
cd "$b"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1 || true
./gpu-cuda-module.sh
shape="${SHAPE:-1b}"; type="${TYPE:-f16}"; model="/tmp/random-$shape-$type.gguf"
[ -f "$model" ] || python3 gen-random-gguf.py model --tok "${TOK:?set TOK}" --shape "$shape" --type "$type" --out "$model"
seqs="${SEQS:-64}"
# The runtime's own batched-decode ceiling on the same model, when the
# workplace's bbench (shared/gpu/bbench, built against the bundle's
# libraries) was put in the bundle: no HTTP, no sampling.
if [ -x ./bbench ]; then
  ./bbench -m "$model" -c $((seqs * 320)) -b 2048 -ub 512 -npp 128 -ntg 128 -npl "${LEVELS:-1,8,32,64}" \
    -ngl 99 -fa on 2>"$out/ceiling-$shape-$type.err" | tee "$out/ceiling-$shape-$type.txt" | grep '^|'
fi
./steward serve --model "$model" --port 8500 --max-seqs "$seqs" --ctx-per-seq 512 \
  --served-model-name random >"$out/serve-$shape-$type.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 900); do curl -sf http://127.0.0.1:8500/ready >/dev/null 2>&1 && break; kill -0 $pid || { tail -20 "$out/serve-$shape-$type.log"; exit 1; }; sleep 0.2; done
IFS=, read -ra levels <<<"${LEVELS:-1,8,32,64}"
for l in "${levels[@]}"; do
  ./steward-bench run --url http://127.0.0.1:8500 --workload uniform-128 --ignore-eos \
    --concurrency "$l" --conversations $((l * ${PER_CLIENT:-2})) --settle-s 2 \
    --out "$out/run-$shape-$type-$l.json" 2>>"$out/bench.log" >/dev/null
  echo "$shape $type @ $l streams: $(grep 'uniform-128:' "$out/bench.log" | tail -1)"
done
curl -sf http://127.0.0.1:8500/debug/ledger >"$out/ledger-$shape-$type.json" || true
