"""transformers' rendering, shared by template-oracle.py and render-oracle.py:
a one-word tokenizer (no special tokens) whose apply_chat_template runs the
template exactly as transformers does for a real model."""
import json

import transformers
from tokenizers import Tokenizer
from tokenizers.models import WordLevel


def make_tokenizer():
    backend = Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=backend)
    assert not tok.special_tokens_map, tok.special_tokens_map
    return tok


def render(tok, template_text, c):
    tok.chat_template = template_text
    args = json.loads(json.dumps({k: c[k] for k in ("messages", "tools", "documents", "kwargs")}))
    try:
        out = tok.apply_chat_template(
            args["messages"],
            tools=args["tools"],
            documents=args["documents"],
            add_generation_prompt=c["add_generation_prompt"],
            continue_final_message=c["continue_final_message"],
            tokenize=False,
            **args["kwargs"],
        )
        return out, None, None
    except Exception as e:  # noqa: BLE001 - whatever transformers raises is the oracle's answer
        return None, str(e), type(e).__name__
