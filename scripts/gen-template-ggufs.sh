#!/usr/bin/env bash
# Tiny random-weight GGUFs, one per chat template, for TEMPLATE TESTS ONLY
# (their output is noise): each carries a family's real chat template and that
# family's marker tokens, so Steward's real load / template / tokenize path runs
# without the real weights.
#
#   scripts/gen-template-ggufs.sh DIR_OF_JINJA OUT_DIR
#
# For every DIR_OF_JINJA/<stem>.jinja whose name the table below knows, writes
# OUT_DIR/<stem>.gguf with scripts/gen-random-gguf.py chat: the "tiny" shape
# (256 wide, 2 layers, f16, ~28 MiB), the tokenizer of the default model
# (SmolLM2-135M-Instruct: gpt2/BPE, 49,152 tokens; set STEWARD_TEMPLATE_SRC for
# another GGUF) plus the family's markers, bos/eos/eot ids set to the family's.
# The source's own control tokens (<|endoftext|>, <|im_start|>, <|im_end|>, ...)
# stay, so <|endoftext|> and <|im_end|> are end-of-generation tokens in every file.
# Templates the table does not know are skipped with a note. An output newer
# than its template and than both scripts is left as it is.
#
# Markers go in as CONTROL tokens (type 3), except where the family's real
# tokenizer marks an added token non-special, which llama.cpp's converter
# writes as USER_DEFINED (type 4): Qwen's and DeepSeek's <think>, <tool_call>...
# Rows marked "from the template" list the markers the template prints; their
# bos/eos are the best guess, not checked against the real tokenizer.
# Templates are read from DIR_OF_JINJA (e.g. llama.cpp's models/templates/);
# none are kept in this repository.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ $# -ne 2 ] || [ ! -d "$1" ]; then
  echo "usage: $0 DIR_OF_JINJA OUT_DIR" >&2
  exit 2
fi
tdir="$1"
out="$2"
src="${STEWARD_TEMPLATE_SRC:-${STEWARD_CACHE_DIR:-$HOME/.cache/steward}/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
if [ ! -f "$src" ]; then
  echo "$src is missing (\`steward serve\` with no --model fetches the default model)" >&2
  exit 1
fi
gen="$root/scripts/gen-random-gguf.py"
venv="$root/target/pyenv" # shared with openai_client_check.sh, which adds its own packages
py="$venv/bin/python"
if ! "$py" -c 'import numpy, gguf' 2>/dev/null; then
  [ -x "$py" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet numpy gguf
fi
mkdir -p "$out"

# ---- the family table -------------------------------------------------------
LLAMA3=('<|begin_of_text|>' '<|end_of_text|>' '<|start_header_id|>' '<|end_header_id|>'
  '<|eot_id|>' '<|eom_id|>' '<|python_tag|>' '<|finetune_right_pad_id|>')
QWEN=('<|endoftext|>' '<|im_start|>' '<|im_end|>' '<|vision_start|>' '<|vision_end|>'
  '<|vision_pad|>' '<|image_pad|>' '<|video_pad|>')
DEEPSEEK=('<｜begin▁of▁sentence｜>' '<｜end▁of▁sentence｜>' '<｜User｜>' '<｜Assistant｜>'
  '<｜tool▁calls▁begin｜>' '<｜tool▁calls▁end｜>' '<｜tool▁call▁begin｜>' '<｜tool▁call▁end｜>'
  '<｜tool▁sep｜>' '<｜tool▁outputs▁begin｜>' '<｜tool▁outputs▁end｜>' '<｜tool▁output▁begin｜>'
  '<｜tool▁output▁end｜>')
MISTRAL=('<s>' '</s>' '[INST]' '[/INST]' '[TOOL_CALLS]' '[AVAILABLE_TOOLS]' '[/AVAILABLE_TOOLS]'
  '[TOOL_RESULTS]' '[/TOOL_RESULTS]' '[TOOL_CONTENT]' '[ARGS]' '[CALL_ID]' '[SYSTEM_PROMPT]'
  '[/SYSTEM_PROMPT]' '[THINK]' '[/THINK]' '[IMG]')
COHERE=('<BOS_TOKEN>' '<|START_OF_TURN_TOKEN|>' '<|END_OF_TURN_TOKEN|>' '<|USER_TOKEN|>'
  '<|CHATBOT_TOKEN|>' '<|SYSTEM_TOKEN|>')
COHERE2=("${COHERE[@]}" '<|START_ACTION|>' '<|END_ACTION|>' '<|START_THINKING|>' '<|END_THINKING|>'
  '<|START_RESPONSE|>' '<|END_RESPONSE|>' '<|START_TOOL_RESULT|>' '<|END_TOOL_RESULT|>'
  '<|START_TEXT|>' '<|END_TEXT|>')
KIMI=('[BOS]' '[EOS]' '<|im_user|>' '<|im_assistant|>' '<|im_system|>' '<|im_middle|>' '<|im_end|>'
  '<|tool_calls_section_begin|>' '<|tool_calls_section_end|>' '<|tool_call_begin|>'
  '<|tool_call_argument_begin|>' '<|tool_call_end|>' '<|media_start|>' '<|media_content|>'
  '<|media_end|>' '<|media_pad|>')
GLM=('[gMASK]' '<sop>' '<eop>' '<|endoftext|>' '<|system|>' '<|user|>' '<|assistant|>' '<|observation|>'
  '<tool_call>' '</tool_call>' '<tool_response>' '</tool_response>' '<arg_key>' '</arg_key>'
  '<arg_value>' '</arg_value>' '<think>' '</think>')
CHATML_TOOLS=('<|im_start|>' '<|im_end|>' '<tool_call>' '</tool_call>' '<tool_response>'
  '</tool_response>' '<think>' '</think>')

# Sets FAM, S (control), U (user-defined), BOS, EOS, EOT, ADD_BOS ("" = the source's).
family() {
  FAM="" S=() U=() BOS="" EOS="" EOT="" ADD_BOS=""
  case "$1" in
  NousResearch-Hermes-*) # Llama 3 vocabulary with ChatML and tool tags in the reserved slots
    FAM=hermes-llama3 S=("${LLAMA3[@]}" '<|im_start|>' '<|im_end|>' '<tool_call>' '</tool_call>'
      '<tool_response>' '</tool_response>' '<tools>' '</tools>')
    BOS='<|begin_of_text|>' EOS='<|im_end|>' EOT='<|im_end|>' ADD_BOS=true ;;
  meta-llama-Llama-3* | *llama-3-firefunction* | meetkai-functionary-*)
    # functionary's ">>>" and "<function=" are plain text in its tokenizer
    FAM=llama3 S=("${LLAMA3[@]}") BOS='<|begin_of_text|>' EOS='<|eot_id|>' EOT='<|eot_id|>' ADD_BOS=true ;;
  Qwen-Qwen2.5* | Qwen-Qwen2-* | MiMo-VL*) # Qwen2.5 vocabulary: no <think>
    FAM=qwen2.5 S=("${QWEN[@]}") U=('<tool_call>' '</tool_call>')
    BOS='<|endoftext|>' EOS='<|im_end|>' EOT='<|im_end|>' ADD_BOS=false ;;
  Qwen-QwQ* | Qwen-Qwen3* | Qwen3*)
    FAM=qwen3 S=("${QWEN[@]}") U=('<tool_call>' '</tool_call>' '<tool_response>' '</tool_response>' '<think>' '</think>')
    BOS='<|endoftext|>' EOS='<|im_end|>' EOT='<|im_end|>' ADD_BOS=false ;;
  HuggingFaceTB-SmolLM3*)
    FAM=smollm3 S=('<|begin_of_text|>' '<|end_of_text|>' "${CHATML_TOOLS[@]}")
    BOS='<|begin_of_text|>' EOS='<|im_end|>' EOT='<|im_end|>' ADD_BOS=false ;;
  deepseek-ai-* | llama-cpp-deepseek-r1*)
    FAM=deepseek S=("${DEEPSEEK[@]}") U=('<think>' '</think>')
    BOS='<｜begin▁of▁sentence｜>' EOS='<｜end▁of▁sentence｜>' ADD_BOS=true ;;
  mistralai-* | Mistral-* | unsloth-mistral-* | *Devstral*)
    FAM=mistral S=("${MISTRAL[@]}") BOS='<s>' EOS='</s>' ADD_BOS=true ;;
  openai-gpt-oss-*)
    FAM=gpt-oss S=('<|startoftext|>' '<|endoftext|>' '<|start|>' '<|end|>' '<|message|>' '<|channel|>'
      '<|constrain|>' '<|return|>' '<|call|>')
    BOS='<|startoftext|>' EOS='<|return|>' ADD_BOS=false ;;
  google-gemma-4*) # from the template
    FAM=gemma4 S=('<bos>' '<eos>' '<|turn>' '<turn|>' '<|channel>' '<channel|>' '<|think|>' '<|tool>' '<tool|>'
      '<|tool_call>' '<tool_call|>' '<|tool_response>' '<tool_response|>' '<|"|>' '<|image|>' '<|audio|>' '<|video|>')
    BOS='<bos>' EOS='<turn|>' EOT='<turn|>' ADD_BOS=true ;;
  google-gemma-* | *gemma-2* | *gemma-3*)
    FAM=gemma S=('<pad>' '<eos>' '<bos>' '<start_of_turn>' '<end_of_turn>')
    BOS='<bos>' EOS='<end_of_turn>' EOT='<end_of_turn>' ADD_BOS=true ;;
  microsoft-Phi-*)
    # llama.cpp sets Phi-3 token attributes when general.name says phi-3 (it does: the
    # name carries the stem) and then needs <unk>, <s>, </s> and <|endoftext|>
    FAM=phi3 S=('<unk>' '<s>' '</s>' '<|endoftext|>' '<|system|>' '<|user|>' '<|assistant|>' '<|end|>' '<|tool|>' '<|/tool|>'
      '<|tool_call|>' '<|/tool_call|>' '<|tool_response|>')
    BOS='<s>' EOS='<|endoftext|>' EOT='<|end|>' ADD_BOS=false ;;
  ibm-granite-*) # granite 4's <tool_call> is printed as text
    FAM=granite S=('<|end_of_text|>' '<|start_of_role|>' '<|end_of_role|>' '<|tool_call|>' '<|start_of_cite|>'
      '<|end_of_cite|>' '<|start_of_plugin|>' '<|end_of_plugin|>')
    BOS='<|end_of_text|>' EOS='<|end_of_text|>' ADD_BOS=false ;;
  CohereForAI-c4ai-command-r7b-* | CohereForAI-c4ai-command-a-* | Cohere2*)
    FAM=command-r7b S=("${COHERE2[@]}") BOS='<BOS_TOKEN>' EOS='<|END_OF_TURN_TOKEN|>' ADD_BOS=true ;;
  CohereForAI-c4ai-command-r*)
    FAM=command-r S=("${COHERE[@]}") BOS='<BOS_TOKEN>' EOS='<|END_OF_TURN_TOKEN|>' ADD_BOS=true ;;
  moonshotai-Kimi-K2* | Kimi-K2*)
    FAM=kimi-k2 S=("${KIMI[@]}" '<think>' '</think>') BOS='[BOS]' EOS='<|im_end|>' ADD_BOS=false ;;
  GLM-4* | zai-org-GLM-4* | THUDM-GLM-4*)
    FAM=glm4.5 S=("${GLM[@]}") BOS='[gMASK]' EOS='<|endoftext|>' EOT='<|user|>' ADD_BOS=false ;;
  LFM2*)
    FAM=lfm2 S=('<|startoftext|>' '<|im_start|>' '<|im_end|>' '<|tool_list_start|>' '<|tool_list_end|>'
      '<|tool_call_start|>' '<|tool_call_end|>' '<|tool_response_start|>' '<|tool_response_end|>' '<think>' '</think>')
    BOS='<|startoftext|>' EOS='<|im_end|>' ADD_BOS=true ;;
  ByteDance-Seed-OSS*)
    FAM=seed-oss S=('<seed:bos>' '<seed:eos>' '<seed:pad>' '<seed:think>' '</seed:think>' '<seed:tool_call>'
      '</seed:tool_call>' '<seed:cot_budget_reflect>' '</seed:cot_budget_reflect>')
    BOS='<seed:bos>' EOS='<seed:eos>' ADD_BOS=false ;;
  MiniMax-M1*) # from the template
    FAM=minimax-m1 S=('<beginning_of_sentence>' '<end_of_sentence>' '<begin_of_document>')
    BOS='<beginning_of_sentence>' EOS='<end_of_sentence>' ;;
  MiniMax-M*) # M2, M3: from the templates
    FAM=minimax-m2 S=(']~!b[' ']~b]' '[e~[' '<think>' '</think>' '<minimax:tool_call>' '</minimax:tool_call>'
      '<mm:think>' '</mm:think>' ']<]image[>[' ']<]video[>[')
    BOS=']~!b[' EOS='[e~[' ;;
  NVIDIA-Nemotron-Nano-v2*) # <SPECIAL_10> system, <SPECIAL_11> role, <SPECIAL_12> end of turn
    FAM=nemotron-h S=('<s>' '</s>' '<SPECIAL_10>' '<SPECIAL_11>' '<SPECIAL_12>' '<think>' '</think>'
      '<TOOLCALL>' '</TOOLCALL>' '<TOOL_RESPONSE>' '</TOOL_RESPONSE>' '<AVAILABLE_TOOLS>' '</AVAILABLE_TOOLS>')
    BOS='<s>' EOS='<SPECIAL_12>' ;;
  NVIDIA-Nemotron-*) # from the template
    FAM=nemotron3 S=('<s>' '</s>' "${CHATML_TOOLS[@]}") BOS='<s>' EOS='<|im_end|>' ;;
  Apertus-*) # from the template
    FAM=apertus S=('<s>' '</s>' '<|system_start|>' '<|system_end|>' '<|developer_start|>' '<|developer_end|>'
      '<|user_start|>' '<|user_end|>' '<|assistant_start|>' '<|assistant_end|>' '<|inner_prefix|>'
      '<|inner_suffix|>' '<|tools_prefix|>' '<|tools_suffix|>')
    BOS='<s>' EOS='<|assistant_end|>' ADD_BOS=false ;;
  unsloth-Apriel-1.5*) # from the template
    FAM=apriel1.5 S=('<s>' '</s>' '<|system|>' '<|user|>' '<|assistant|>' '<|content|>' '<|tool_result|>' '<|end|>' '[IMG]')
    BOS='<s>' EOS='</s>' ADD_BOS=false ;;
  Apriel-*) # from the template
    FAM=apriel1.6 S=('<s>' '</s>' '<|begin_system|>' '<|begin_user|>' '<|begin_assistant|>' '<|begin_content|>'
      '<|begin_tool_result|>' '<|end|>' '[IMG]')
    BOS='<s>' EOS='</s>' ADD_BOS=false ;;
  Bielik-*) # from the template
    FAM=bielik S=('<s>' '</s>' "${CHATML_TOOLS[@]}" '<|function_list|>' '<|function_output|>')
    BOS='<s>' EOS='<|im_end|>' ADD_BOS=false ;;
  GigaChat3*) # from the template
    FAM=gigachat3 S=('<s>' '</s>' '<|role_sep|>' '<|message_sep|>' '<|function_call|>') BOS='<s>' EOS='</s>' ADD_BOS=false ;;
  Kimi-K3*) # from the template
    FAM=kimi-k3 S=('[BOS]' '<|end_of_msg|>' '<|open|>' '<|close|>' '<|sep|>' '<|kimi_image_placeholder|>')
    BOS='[BOS]' EOS='<|end_of_msg|>' ADD_BOS=false ;;
  Reka-*) # from the template
    FAM=reka S=('<sep>' '<think>' '</think>' '<tool_call>' '</tool_call>' '<tool_response>' '</tool_response>'
      '<REKA_IMG_TOKEN>' '<image>' '</image>' '<video>' '</video>')
    EOS='<sep>' ;;
  Spark2*) # from the template
    FAM=spark S=('<｜start▁of▁sentence｜>' '<｜end▁of▁sentence｜>' '<|System|>' '<|User|>' '<|Bot|>' '<|Tool|>'
      '<think>' '</think>' '<tool_call>' '</tool_call>' '<tool_response>' '</tool_response>' '<arg_key>'
      '</arg_key>' '<arg_value>' '</arg_value>')
    BOS='<｜start▁of▁sentence｜>' EOS='<｜end▁of▁sentence｜>' ;;
  StepFun*) # from the template
    FAM=stepfun S=('<s>' "${CHATML_TOOLS[@]}" '<im_patch>') BOS='<s>' EOS='<|im_end|>' ADD_BOS=false ;;
  openbmb-MiniCPM*) # from the template
    FAM=minicpm S=('<s>' "${CHATML_TOOLS[@]}" '<tool_sep>' '<tool_def_sep>') BOS='<s>' EOS='<|im_end|>' ADD_BOS=false ;;
  inclusionai-ling-*) # from the template
    FAM=ling S=('<|startoftext|>' '<role>' '</role>' '<|role_end|>' '<think>' '</think>' '<tool_call>' '</tool_call>'
      '<tool_response>' '</tool_response>' '<arg_key>' '</arg_key>' '<arg_value>' '</arg_value>')
    BOS='<|startoftext|>' EOS='<|role_end|>' ;;
  poolside-Laguna-*) # from the template
    FAM=laguna S=('<system>' '</system>' '<user>' '</user>' '<assistant>' '</assistant>' '<think>' '</think>'
      '<tool_call>' '</tool_call>' '<tool_response>' '</tool_response>' '<arg_key>' '</arg_key>' '<arg_value>'
      '</arg_value>' '<available_tools>' '</available_tools>')
    EOS='</assistant>' ;;
  tencent-Hy*) # from the template, which spells its markers with '{}'.format(':opensource')
    local t
    FAM=hunyuan S=()
    for t in '<｜hy_begin_of_sentence:opensource｜>' '<｜hy_eos:opensource｜>' '<｜hy_pad:opensource｜>' \
      '<｜hy_User:opensource｜>' '<｜hy_Assistant:opensource｜>' '<｜reasoning_mode:opensource｜>'; do S+=("$t"); done
    for t in think tool_calls tool_call arg_key arg_value tool_responses tool_response; do
      S+=("<$t:opensource>" "</$t:opensource>")
    done
    S+=('<tool_sep:opensource>')
    BOS='<｜hy_begin_of_sentence:opensource｜>' EOS='<｜hy_eos:opensource｜>' ;;
  muse-glimmer*) # from the template
    FAM=muse S=('<|begin_of_text|>' '<|start|>' '<|message|>' '<|eot|>' '<|eom|>' '<|video|>' '<|patch|>')
    BOS='<|begin_of_text|>' EOS='<|eot|>' ADD_BOS=false ;;
  upstage-Solar-Open-*) # from the template
    FAM=solar-open S=('<|begin|>' '<|end|>' '<|think|>' '<|content|>' '<|tool_calls|>' '<|calls|>'
      '<|tools:begin|>' '<|tools:end|>' '<|tool:begin|>' '<|tool:end|>' '<|tool_call:begin|>' '<|tool_call:end|>'
      '<|tool_call:name|>' '<|tool_call:args|>' '<|tool_response|>' '<|tool_response:begin|>'
      '<|tool_response:end|>' '<|tool_response:name|>' '<|tool_response:result|>' '<|tool_response:id|>')
    EOS='<|end|>' ;;
  *) return 1 ;;
  esac
}

# ---- generate ---------------------------------------------------------------
t_start=$(date +%s.%N)
par="$(nproc 2>/dev/null || echo 2)"
failed="$out/.failed"
rm -f "$failed"
written=0 current=0 unknown=0
tok_json=""
cleanup() { [ -z "$tok_json" ] || rm -rf "$(dirname "$tok_json")"; }
trap cleanup EXIT
shopt -s nullglob
for t in "$tdir"/*.jinja; do
  stem="$(basename "$t" .jinja)"
  if ! family "$stem"; then
    echo "skip $stem.jinja: no family in the table"
    unknown=$((unknown + 1))
    continue
  fi
  o="$out/$stem.gguf"
  if [ "$o" -nt "$t" ] && [ "$o" -nt "$0" ] && [ "$o" -nt "$gen" ]; then
    current=$((current + 1))
    continue
  fi
  if [ -z "$tok_json" ]; then # read the source's tokenizer once
    tok_json="$(mktemp -d)/tokenizer.json"
    "$py" "$gen" tokenizer "$src" "$tok_json" >/dev/null
  fi
  args=(chat --src "$tok_json" --template "$t" --out "$o")
  case "$stem" in *-tool_use) args+=(--template-variant "tool_use=$t") ;; esac
  for x in ${S[@]+"${S[@]}"}; do args+=("--special=$x"); done
  for x in ${U[@]+"${U[@]}"}; do args+=("--user-defined=$x"); done
  [ -z "$BOS" ] || args+=("--bos=$BOS")
  [ -z "$EOS" ] || args+=("--eos=$EOS")
  [ -z "$EOT" ] || args+=("--eot=$EOT")
  [ -z "$ADD_BOS" ] || args+=(--add-bos "$ADD_BOS")
  # One file per core at a time (each is CPU-bound numpy work).
  while [ "$(jobs -rp | wc -l)" -ge "$par" ]; do wait -n || true; done
  (line="$("$py" "$gen" "${args[@]}")" && echo "$FAM: $line" || { echo "FAILED: $stem" >&2; touch "$failed"; }) &
  written=$((written + 1))
done
wait
[ ! -e "$failed" ] || { rm -f "$failed"; echo "some template GGUFs failed (above)" >&2; exit 1; }
echo "$written written, $current up to date, $unknown skipped (unknown) in $out," \
  "$(awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
