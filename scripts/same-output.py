#!/usr/bin/env python3
"""Greedy outputs of two Steward binaries, byte for byte: the check that a
change meant to keep behaviour (a refactor, a move) kept it.

Usage: scripts/same-output.py OLD_BINARY NEW_BINARY [--model PATH]

Each binary serves the default model (or --model) on a free loopback port,
one at a time, with one slot, so every request runs alone and the
computation is the same on both sides (no batch shapes to differ: exact
equality is the right test here, not the near-tie rule). The fixed request
set covers chat (the template), raw completions, stop strings, logprobs,
prompt logprobs (`echo`), a JSON schema grammar, `n` = 2 with a seed
(temperature 1, seeded: the sampler's arithmetic), and a prefix-cache hit
(the same long prompt twice). Prints one line per request and exits 1 on
the first difference (both texts shown).
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

LONG = " ".join(f"Item {i}: the quick brown fox jumps over the lazy dog." for i in range(40))

REQUESTS = [
    ("chat", "/v1/chat/completions", {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 24}),
    ("chat-system", "/v1/chat/completions", {"messages": [{"role": "system", "content": "You answer in one short sentence."}, {"role": "user", "content": "Why is the sky blue?"}], "max_tokens": 32}),
    ("completion", "/v1/completions", {"prompt": "Once upon a time, in a small village,", "max_tokens": 32}),
    ("stop", "/v1/completions", {"prompt": "1, 2, 3, 4,", "max_tokens": 32, "stop": [" 9"]}),
    ("logprobs", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8, "logprobs": True, "top_logprobs": 3}),
    ("echo", "/v1/completions", {"prompt": "The rain in Spain", "max_tokens": 4, "echo": True, "logprobs": 2}),
    ("schema", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Give a person as JSON."}], "max_tokens": 48,
        "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}}}}),
    ("seeded-n2", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Tell me a fact."}], "max_tokens": 16, "n": 2, "seed": 7, "temperature": 1.0}),
    ("long", "/v1/completions", {"prompt": LONG, "max_tokens": 16}),
    ("long-again (prefix cache)", "/v1/completions", {"prompt": LONG + " And then", "max_tokens": 16}),
]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def post(base, path, body):
    body = dict(body, temperature=body.get("temperature", 0.0))
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    # What the model computed, without ids, timestamps and timings.
    return [{k: c.get(k) for k in ("text", "message", "logprobs", "finish_reason")} for c in out["choices"]], out.get("usage")


def run(binary, model):
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix=f"same-output-{os.getpid()}-", suffix=".log", delete=False)
    args = [binary, "serve", "--host", "127.0.0.1", "--port", str(port), "--max-seqs", "1", "--ctx-per-seq", "2048"]
    if model:
        args += ["--model", model]
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while True:
            try:
                urllib.request.urlopen(base + "/ready", timeout=5)
                break
            except Exception:
                if p.poll() is not None or time.time() > deadline:
                    sys.exit(f"{binary} did not start: see {log.name}")
                time.sleep(0.2)
        return [post(base, path, body) for _, path, body in REQUESTS]
    finally:
        p.terminate()
        p.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--model")
    a = ap.parse_args()
    old, new = run(a.old, a.model), run(a.new, a.model)
    for (name, _, _), o, n in zip(REQUESTS, old, new):
        same = json.dumps(o, sort_keys=True) == json.dumps(n, sort_keys=True)
        print(f"{'same' if same else 'DIFFERENT'}  {name}")
        if not same:
            print("old:", json.dumps(o)[:2000])
            print("new:", json.dumps(n)[:2000])
            sys.exit(1)
    print(f"all {len(REQUESTS)} requests byte-identical")


if __name__ == "__main__":
    main()
