#!/usr/bin/env python3
"""transformers' apply_chat_template as a filter, for tests that render
conversations Steward produced (the round trip of a forced call).

Reads one JSON object per line on stdin:
  {"template": PATH, "messages": [...], "tools": [...]|null, "kwargs": {...},
   "add_generation_prompt": bool, "continue_final_message": bool}
writes one per line on stdout: {"expected": TEXT} or {"error": TEXT}.
Runs in the oracle venv (scripts/template-oracle.sh makes target/oracle-env).
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from template_oracle_lib import make_tokenizer, render  # noqa: E402


def main():
    tok = make_tokenizer()
    for line in sys.stdin:
        if not line.strip():
            continue
        c = json.loads(line)
        with open(c["template"], encoding="utf-8") as f:
            text = f.read()
        c.setdefault("documents", None)
        c.setdefault("tools", None)
        c.setdefault("kwargs", {})
        c.setdefault("add_generation_prompt", True)
        c.setdefault("continue_final_message", False)
        out, err, _ = render(tok, text, c)
        print(json.dumps({"expected": out} if err is None else {"error": err}), flush=True)


if __name__ == "__main__":
    main()
