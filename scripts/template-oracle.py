#!/usr/bin/env python3
"""Chat-template oracle: what Hugging Face transformers renders.

For every *.jinja file in the templates directory (scripts/fetch-templates.sh
fetches llama.cpp's models/templates/ from the llama-cpp-python 0.3.36 sdist;
they are other projects' files and are never committed here) and every
conversation in CASES below, this calls transformers'
`PreTrainedTokenizerBase.apply_chat_template(..., tokenize=False)` on a
tokenizer whose `chat_template` is that file's text, and records the rendered
text or the exception. That is transformers' own code path end to end: null
keys dropped from messages (`_normalize_chat_messages`), the
continue_final_message / add_generation_prompt check, special tokens merged
into the template kwargs, then `render_jinja_template` (its sandboxed
environment with trim_blocks and lstrip_blocks, the `tojson`, `raise_exception`,
`strftime_now`, `dict` and `namespace` globals, the `{% generation %}` tag, the
reasoning-field aliasing and the continue_final_message cut). The tokenizer
carries no special tokens of its own, so the template sees exactly `kwargs`.
Every file is a template of its own: a `*-tool_use.jinja` file is a variant
that transformers would pick for requests with tools (`get_chat_template`), and
here it simply gets every case.

Usage: template-oracle.py --templates DIR [OUT.json]   (default target/template-cases.json)
Normally run through scripts/template-oracle.sh, which makes the venv.

Output: a JSON array (UTF-8, object keys in the order given here and in the
inputs: tool schemas' key order matters to templates that print them with
tojson), one object per template file x case, sorted by template then suite
order:

  {
    "template": "Qwen-Qwen3-0.6B.jinja",   # file name in the templates directory
    "case": "tool_call_result",            # name from CASES
    "messages": [...],                     # as passed; null values are kept here,
                                           # transformers drops those keys first
    "tools": [...] | null,                 # OpenAI-style {"type":"function","function":{...}}
    "documents": null | [...],
    "add_generation_prompt": bool,
    "continue_final_message": bool,
    "kwargs": {"bos_token": "...", "eos_token": "...", ...},  # every extra template
                                           # variable; always bos_token and eos_token
    "expected": "<rendered text>" | null,  # null when transformers raised
    "error": "<str(exception)>" | null,    # null when it rendered
    "error_type": "TemplateError" | ... | null,  # the exception's class name
    "uses_strftime_now": bool,             # the template calls strftime_now
    "rendered_on": "YYYY-MM-DD"            # local date of the run
  }

Clock: templates that call strftime_now (in 0.3.36: Apertus, Mistral Small
3.2, Granite 3.3, Llama 3.2, muse-glimmer, gpt-oss, Solar Open; Llama 3.1/3.3
hard-code "26 Jul 2024") see transformers' `datetime.now()`, the real local clock, so
`expected` holds the date of the run; a comparison must render with the same
local date (`rendered_on`) or regenerate the file.
"""

import argparse
import datetime
import json
import os
import sys
import time
import warnings

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
warnings.filterwarnings("ignore")

import jinja2  # noqa: E402
import transformers  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from template_oracle_lib import make_tokenizer, render  # noqa: E402

transformers.logging.set_verbosity_error()

# ---------------------------------------------------------------------------
# bos/eos per template family, as the models' tokenizer_config.json have them
# (as far as known; a family whose values are not known, or whose template
# never reads them, gets the "<s>"/"</s>" default). First matching prefix wins.
# Qwen's tokenizers have no bos token at all (bos_token null): "" renders the
# same as the undefined variable a real Qwen tokenizer leaves.
TOKENS = [
    ("SmolLM2", "<|im_start|>", "<|im_end|>"),
    ("meta-llama-Llama-3", "<|begin_of_text|>", "<|eot_id|>"),
    ("fireworks-ai-llama-3-firefunction", "<|begin_of_text|>", "<|eot_id|>"),
    ("meetkai-functionary-medium-v3", "<|begin_of_text|>", "<|eot_id|>"),
    ("NousResearch-Hermes-", "<|begin_of_text|>", "<|im_end|>"),
    ("deepseek-ai-", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("llama-cpp-deepseek-r1", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("Qwen", "", "<|im_end|>"),
    ("HuggingFaceTB-SmolLM3", "", "<|im_end|>"),
    ("google-gemma-", "<bos>", "<eos>"),
    ("mistralai-", "<s>", "</s>"),
    ("Mistral-", "<s>", "</s>"),
    ("unsloth-mistral-", "<s>", "</s>"),
    ("microsoft-Phi-3.5", "<s>", "<|endoftext|>"),
    ("CohereForAI-", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    ("Cohere2MoE", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"),
    ("ibm-granite-", "<|end_of_text|>", "<|end_of_text|>"),
    ("LFM2", "<|startoftext|>", "<|im_end|>"),
    ("openai-gpt-oss", "<|startoftext|>", "<|return|>"),
    ("GLM-4", "", "<|endoftext|>"),
    ("MiniMax-", "]~!b[", "[e~["),
    ("ByteDance-Seed-OSS", "<seed:bos>", "<seed:eos>"),
]
DEFAULT_TOKENS = ("<s>", "</s>")


def tokens_for(template_name):
    for prefix, bos, eos in TOKENS:
        if template_name.startswith(prefix):
            return bos, eos
    return DEFAULT_TOKENS


# ---------------------------------------------------------------------------
# The conversation suite. Call ids are 9 alphanumerics: Mistral's templates
# raise on any other shape.
CALL_A = "a1B2c3D4e"
CALL_B = "Z9y8X7w6v"

# Keys deliberately out of alphabetical order at every level; non-ASCII and
# HTML characters in descriptions (the tojson filter must not escape them).
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather (température, 東京) for a place; returns <b>&</b> markup-free text.",
            "parameters": {
                "type": "object",
                "required": ["location"],
                "properties": {
                    "unit": {
                        "type": "string",
                        "enum": ["celsius", "fahrenheit"],
                        "description": "Temperature unit",
                    },
                    "location": {
                        "type": "object",
                        "description": "Where to look, e.g. {\"city\": \"東京\"}",
                        "properties": {
                            "city": {"type": "string", "description": "City name"},
                            "country": {"type": "string", "description": "ISO 3166-1 alpha-2 code"},
                        },
                        "required": ["city"],
                    },
                    "days": {"type": "integer", "minimum": 1, "maximum": 7, "description": "Forecast days"},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_docs",
            "description": "Search the documentation index.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "Free text"},
                    "filters": {
                        "type": "object",
                        "properties": {
                            "tags": {"type": "array", "items": {"type": "string"}},
                            "since": {"type": "string", "format": "date"},
                        },
                    },
                    "limit": {"type": "integer", "default": 5},
                },
                "required": ["query"],
            },
        },
    },
]

WEATHER_ARGS = {"location": {"city": "東京", "country": "JP"}, "unit": "celsius"}
SEARCH_ARGS = {"query": "température <b>&</b>", "limit": 3}
WEATHER_RESULT = '{"temperature": 21.5, "condition": "晴れ"}'
SEARCH_RESULT = '[{"title": "Units & conversions", "url": "/docs/units"}]'


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def case(name, messages, tools=None, add_generation_prompt=True, continue_final_message=False, kwargs=None):
    return {
        "case": name,
        "messages": messages,
        "tools": tools,
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
        "continue_final_message": continue_final_message,
        "kwargs": kwargs or {},
    }


USER = {"role": "user", "content": "What is the capital of France?"}
CASES = [
    case("user", [USER]),
    case("system_user", [{"role": "system", "content": "You are a concise assistant."}, USER]),
    case(
        "multi_turn",
        [
            USER,
            {"role": "assistant", "content": "Paris."},
            {"role": "user", "content": "And of Japan?"},
        ],
    ),
    case("tools", [{"role": "user", "content": "What's the weather in Tokyo?"}], tools=TOOLS),
    case(
        "tool_call_result",
        [
            {"role": "user", "content": "What's the weather in Tokyo?"},
            {"role": "assistant", "content": None, "tool_calls": [call(CALL_A, "get_weather", WEATHER_ARGS)]},
            {"role": "tool", "tool_call_id": CALL_A, "name": "get_weather", "content": WEATHER_RESULT},
            {"role": "user", "content": "Thanks! Should I take an umbrella?"},
        ],
        tools=TOOLS,
    ),
    case(
        "tool_call_content_text",
        [
            {"role": "user", "content": "What's the weather in Tokyo?"},
            {
                "role": "assistant",
                "content": "Let me check.",
                "tool_calls": [call(CALL_A, "get_weather", WEATHER_ARGS)],
            },
            {"role": "tool", "tool_call_id": CALL_A, "name": "get_weather", "content": WEATHER_RESULT},
        ],
        tools=TOOLS,
    ),
    case(
        # OpenAI's wire form: arguments as a JSON string, content "" instead of null
        "tool_call_string_args",
        [
            {"role": "user", "content": "What's the weather in Tokyo?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [call(CALL_A, "get_weather", json.dumps(WEATHER_ARGS, ensure_ascii=False))],
            },
            {"role": "tool", "tool_call_id": CALL_A, "name": "get_weather", "content": WEATHER_RESULT},
        ],
        tools=TOOLS,
    ),
    case(
        "parallel_tool_calls",
        [
            {"role": "user", "content": "Weather in Tokyo, and find the docs on units."},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [call(CALL_A, "get_weather", WEATHER_ARGS), call(CALL_B, "search_docs", SEARCH_ARGS)],
            },
            {"role": "tool", "tool_call_id": CALL_A, "name": "get_weather", "content": WEATHER_RESULT},
            {"role": "tool", "tool_call_id": CALL_B, "name": "search_docs", "content": SEARCH_RESULT},
        ],
        tools=TOOLS,
    ),
    case(
        "reasoning_history",
        [
            {"role": "user", "content": "What is 17 * 3?"},
            {
                "role": "assistant",
                "reasoning_content": "17 * 3 = 51, since 17 * 3 = 30 + 21.",
                "content": "51",
            },
            {"role": "user", "content": "And 51 * 2?"},
        ],
    ),
    case(
        "prefill",
        [USER, {"role": "assistant", "content": "The capital of France is"}],
        add_generation_prompt=False,
        continue_final_message=True,
    ),
    case(
        "no_generation_prompt",
        [USER, {"role": "assistant", "content": "Paris."}],
        add_generation_prompt=False,
    ),
    case("enable_thinking_false", [USER], kwargs={"enable_thinking": False}),
    case("reasoning_effort_high", [USER], kwargs={"reasoning_effort": "high"}),
    case("developer_role", [{"role": "developer", "content": "Answer in French."}, USER]),
    case(
        "whitespace",
        [
            {"role": "system", "content": "  Be brief.  \n"},
            {"role": "user", "content": "Hello there.   \n\n"},
            {"role": "assistant", "content": "\n Hi! \n\n"},
            {"role": "user", "content": "Tabs\tand\nnewlines \n \n"},
        ],
    ),
]


# Template variables some templates require that no OpenAI request carries.
# Firefunction v2 reads `functions` (a JSON string of the tools' function
# objects) and `datetime` unconditionally, as its model card passes them; both
# land in the case's kwargs, so the comparing side passes them the same way.
def firefunction_kwargs(c):
    functions = [t["function"] for t in (c["tools"] or [])]
    return {"functions": json.dumps(functions, ensure_ascii=False, indent=4), "datetime": "2025-01-02 03:04:05"}


EXTRA_KWARGS = {"fireworks-ai-llama-3-firefunction-v2.jinja": firefunction_kwargs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--templates", required=True, help="directory holding the .jinja files")
    ap.add_argument("out", nargs="?", default="target/template-cases.json")
    a = ap.parse_args()

    names = sorted(f for f in os.listdir(a.templates) if f.endswith(".jinja"))
    if not names:
        sys.exit(f"template-oracle: no .jinja files in {a.templates}")
    tok = make_tokenizer()
    today = datetime.date.today().isoformat()
    t0 = time.monotonic()
    results = []
    per_template = {}
    for name in names:
        # The way transformers reads a chat_template.jinja file
        with open(os.path.join(a.templates, name), encoding="utf-8") as fh:
            text = fh.read()
        bos, eos = tokens_for(name)
        uses_clock = "strftime_now" in text
        for c in CASES:
            extra = EXTRA_KWARGS[name](c) if name in EXTRA_KWARGS else {}
            kwargs = {"bos_token": bos, "eos_token": eos, **extra, **c["kwargs"]}
            entry = {"template": name, **c, "kwargs": kwargs}
            expected, error, error_type = render(tok, text, entry)
            entry.update(
                expected=expected,
                error=error,
                error_type=error_type,
                uses_strftime_now=uses_clock,
                rendered_on=today,
            )
            results.append(entry)
            ok, bad = per_template.get(name, (0, 0))
            per_template[name] = (ok + (error is None), bad + (error is not None))
    elapsed = time.monotonic() - t0

    tmp = a.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(results, fh, ensure_ascii=False, indent=1)
        fh.write("\n")
    os.replace(tmp, a.out)

    rendered = sum(ok for ok, _ in per_template.values())
    raised = sum(bad for _, bad in per_template.values())
    width = max(len(n) for n in names)
    print(f"template-oracle: transformers {transformers.__version__}, jinja2 {jinja2.__version__}")
    print(f"{'template':<{width}}  rendered  raised")
    for name in names:
        ok, bad = per_template[name]
        print(f"{name:<{width}}  {ok:>8}  {bad:>6}")
    print(
        f"template-oracle: {len(names)} templates x {len(CASES)} cases = {len(results)}: "
        f"{rendered} rendered, {raised} raised, in {elapsed:.1f} s; "
        f"wrote {a.out} ({os.path.getsize(a.out)} bytes)"
    )
    if rendered == 0:
        sys.exit("template-oracle: nothing rendered: the environment is broken")


if __name__ == "__main__":
    main()
