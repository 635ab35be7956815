#!/usr/bin/env bash
# The templates the transformers oracle renders: llama.cpp's models/templates
# from PyPI's llama-cpp-python 0.3.36 sdist (fetch-templates.sh) plus the
# default model's own template (SmolLM2-135M-Instruct, read from its GGUF),
# linked into target/oracle-templates; the default model is linked into
# target/template-ggufs under the same stem so the server test renders it too.
# Needs the default model (steward fetch-model) and target/pyenv with gguf
# (gen-template-ggufs.sh installs it). Prints the directory.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$("$root/scripts/fetch-templates.sh" | tail -n 1)"
out="$root/target/oracle-templates"
model="${STEWARD_CACHE_DIR:-$HOME/.cache/steward}/models/SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p "$out" "$root/target/template-ggufs"
for f in "$src"/*.jinja; do ln -sfn "$f" "$out/$(basename "$f")"; done
"$root/target/pyenv/bin/python" - "$model" "$out/SmolLM2-135M-Instruct.jinja" <<'PY'
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
f = r.fields["tokenizer.chat_template"]
text = bytes(f.parts[f.data[0]]).decode("utf-8")
open(sys.argv[2] + ".tmp", "w", encoding="utf-8").write(text)
PY
mv "$out/SmolLM2-135M-Instruct.jinja.tmp" "$out/SmolLM2-135M-Instruct.jinja"
ln -sfn "$model" "$root/target/template-ggufs/SmolLM2-135M-Instruct.gguf"
echo "$out"
