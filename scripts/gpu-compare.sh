#!/usr/bin/env bash
# [8/8] Runs ON THE GPU MACHINE, inside a bundle made by scripts/gpu-bundle.sh:
# Steward and llama-server side by side on one GPU, same random-weight model
# (gen-random-gguf.py: OUTPUT IS NOISE, speed only), same client
# (steward-bench compare, interleaved level by level), and the runtime's own
# bound measured in the same call (gpu-mixstep).
#   gpu-compare.sh OUTDIR
#   env: LLAMA_SERVER=path to a llama-server built with CUDA (outside the
#          repository; nothing here builds it), TOK=tokenizer.json,
#          PYTHONPATH with numpy and gguf, SHAPE=8b, TYPE=f16,
#        PHASES (default "bound levels stall"):
#          bound   gpu-mixstep: N = 64, 128 decode rows with k = 0 .. 512
#                  prompt tokens riding in the step, per-slot and unified KV
#          levels  both servers at 128 slots of 1,536 cells: uniform-128
#                  (ignore_eos) at LEVELS (1,8,32,64,128), chat-mixed and
#                  shared-prefix at 4 and 32 clients
#          stall   long-prefill-16k on each server in turn (Steward with its
#                  step trace: the server-side cadence of every decoder)
#          target  Steward alone, two instances: the GPU defaults beside the
#                  step target always on (--target-min-prompt 0) at uniform-128
#                  1,64,128 and chat-mixed 32, the fitted step cost terms of
#                  each (steward_step_cost_model_ms), then long-prefill-16k on
#                  the defaults with the step trace (no llama-server needed)
set -euo pipefail
b="$(cd "$(dirname "$0")" && pwd)"
out="${1:?usage: gpu-compare.sh OUTDIR}"; mkdir -p "$out"
cd "$b"
case " ${PHASES:-bound levels stall} " in *" levels "*|*" stall "*) : "${LLAMA_SERVER:?set LLAMA_SERVER}" ;; esac
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1 || true
./gpu-cuda-module.sh >/dev/null
shape="${SHAPE:-8b}"; type="${TYPE:-f16}"; model="/tmp/random-$shape-$type.gguf"
[ -f "$model" ] || python3 gen-random-gguf.py model --tok "${TOK:?set TOK}" --shape "$shape" --type "$type" --out "$model"
phases="${PHASES:-bound levels stall}"
pids=()
stop() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done; pids=(); }
trap stop EXIT
ready() { for _ in $(seq 1 900); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.2; done; echo "not ready: $1" >&2; return 1; }
serve() { # serve NAME STEWARD_ARGS -- LLAMA_ARGS
  local log=info
  [ "${TRACE:-0}" = 1 ] && log=info,steward_engine=trace,llama-cpp-2=off
  local sa=() la=() side=s
  for x in "$@"; do [ "$x" = -- ] && { side=l; continue; }; [ $side = s ] && sa+=("$x") || la+=("$x"); done
  RUST_LOG=$log ./steward serve --model "$model" --port 8500 --served-model-name random "${sa[@]}" \
    >"$out/steward-$phase.log" 2>&1 & pids+=($!)
  "$LLAMA_SERVER" -m "$model" --port 8501 --alias random -ngl 99 -fa on "${la[@]}" \
    >"$out/llama-$phase.log" 2>&1 & pids+=($!)
  ready http://127.0.0.1:8500/ready && ready http://127.0.0.1:8501/health
}
both=(--url http://127.0.0.1:8500 --name steward --url http://127.0.0.1:8501 --name llama-server --settle-s 2)
for phase in $phases; do
  echo "== $phase $(date -u +%T)"
  case "$phase" in
    bound)
      ./gpu-mixstep "$model" 64,128 0,32,64,128,256,512 20 0 2>"$out/bound-perslot.err" | tee "$out/bound-perslot.md"
      grep 'prefill of' "$out/bound-perslot.err" || true
      ./gpu-mixstep "$model" 64,128 0,64,128 20 1 2>"$out/bound-unified.err" | tee "$out/bound-unified.md"
      grep 'prefill of' "$out/bound-unified.err" || true ;;
    levels)
      serve --max-seqs 128 --ctx-per-seq 1536 -- -np 128 -c 196608
      ./steward-bench compare "${both[@]}" --workload uniform-128 --ignore-eos --levels "${LEVELS:-1,8,32,64,128}" \
        --per-client 2 --out "$out/uniform-128.json" 2>"$out/uniform-128.log" | tee "$out/uniform-128.md"
      for w in chat-mixed shared-prefix; do
        ./steward-bench compare "${both[@]}" --workload "$w" --levels 4,32 --per-client 2 \
          --out "$out/$w.json" 2>"$out/$w.log" | tee "$out/$w.md"
      done
      curl -sf http://127.0.0.1:8500/metrics >"$out/metrics-levels.txt" || true
      curl -sf http://127.0.0.1:8500/debug/ledger >"$out/ledger-levels.json" || true
      stop ;;
    target)
      sv() { RUST_LOG=info ./steward serve --model "$model" --port "$1" --served-model-name random \
        --max-seqs 128 --ctx-per-seq 1536 "${@:2}" >"$out/steward-target-$1.log" 2>&1 & pids+=($!); }
      sv 8500; sv 8502 --target-min-prompt 0
      ready http://127.0.0.1:8500/ready && ready http://127.0.0.1:8502/ready
      ab=(--url http://127.0.0.1:8500 --name defaults --url http://127.0.0.1:8502 --name target-always --settle-s 2)
      ./steward-bench compare "${ab[@]}" --workload uniform-128 --ignore-eos --levels "${LEVELS:-1,64,128}" \
        --per-client 2 --out "$out/target-uniform-128.json" 2>"$out/target-uniform-128.log" | tee "$out/target-uniform-128.md"
      ./steward-bench compare "${ab[@]}" --workload chat-mixed --levels 32 --per-client 2 \
        --out "$out/target-chat-mixed.json" 2>"$out/target-chat-mixed.log" | tee "$out/target-chat-mixed.md"
      for p in 8500 8502; do
        curl -sf "http://127.0.0.1:$p/metrics" | grep steward_step_cost_model_ms | tee "$out/cost-$p.txt" || true
      done
      stop
      RUST_LOG=info,steward_engine=trace,llama-cpp-2=off ./steward serve --model "$model" --port 8500 \
        --served-model-name random --max-seqs 33 --ctx-per-seq 16640 >"$out/steward-target-stall.log" 2>&1 & pids+=($!)
      ready http://127.0.0.1:8500/ready
      ./steward-bench run --url http://127.0.0.1:8500 --workload long-prefill-16k --settle-s 2 \
        --out "$out/target-stall.json" 2>>"$out/stall.log" | tail -4
      curl -sf http://127.0.0.1:8500/metrics | grep steward_step_cost_model_ms | tee "$out/cost-stall.txt" || true
      stop ;;
    stall)
      TRACE=1 serve --max-seqs 33 --ctx-per-seq 16640 -- -np 33 -c 45056 -kvu
      for s in steward:8500 llama-server:8501; do
        ./steward-bench run --url "http://127.0.0.1:${s#*:}" --workload long-prefill-16k --settle-s 2 \
          --out "$out/stall-${s%%:*}.json" 2>>"$out/stall.log" | tail -4
      done
      stop ;;
  esac
done
echo "== done $(date -u +%T)"
