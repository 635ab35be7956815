"""The Batch API through the official OpenAI Python SDK against a real
`steward serve` (the binary, the default model, an API key, a state
directory in a temp dir): files.create / batches.create /
batches.retrieve / files.content with 200 lines completing and their
answers parsed (every custom_id once); a cancel midway (the counts add up
to what the output and error files hold); then a SIGKILL of the server
mid-batch and a restart on the same --state-dir: the batch resumes and
completes with each line answered exactly once (a line that was running
at the kill runs again; its partial answer never appears). Answers of 4
tokens to short prompts: fast on 2 cores.

Usage: python batch_check.py STEWARD_BINARY
Prints a line per check; exits non-zero if any fails.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import openai

from checklib import failures, free_port, http, ok

KEY = "batch-check-key"
LINES = 200
# A guard against a hang, never a claim about speed.
HANG_GUARD = 900


def start(binary, port, state, log):
    proc = subprocess.Popen(
        [binary, "serve", "--host", "127.0.0.1", "--port", str(port), "--max-seqs", "4",
         "--ctx-per-seq", "512", "--served-model-name", "smol", "--api-key", KEY,
         "--state-dir", state, "--batch-concurrency", "4"],
        stdout=log, stderr=subprocess.STDOUT)
    for _ in range(1500):
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {proc.returncode} (log: {log.name})")
        if http(f"http://127.0.0.1:{port}/ready", timeout=5)[0] == 200:
            return proc
        time.sleep(0.2)
    raise SystemExit("the server never got ready")


def input_file(d, name, n):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({
                "custom_id": f"{name}-{i}", "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "smol", "messages": [{"role": "user", "content": f"Say {i}."}],
                         "max_tokens": 4, "temperature": 0},
            }) + "\n")
    return path


def submit(client, path):
    with open(path, "rb") as f:
        up = client.files.create(file=f, purpose="batch")
    return client.batches.create(input_file_id=up.id, endpoint="/v1/chat/completions",
                                 completion_window="24h", metadata={"check": "batch_check"})


def poll(client, bid, done):
    deadline = time.time() + HANG_GUARD
    while True:
        b = client.batches.retrieve(bid)
        if done(b):
            return b
        if time.time() > deadline:
            raise SystemExit(f"batch {bid} never got there: {b}")
        time.sleep(0.2)


def ended(b):
    return b.status in ("completed", "failed", "expired", "cancelled")


def answers(client, file_id):
    """The file's lines, parsed (none for no file)."""
    if not file_id:
        return []
    text = client.files.content(file_id).text
    return [json.loads(line) for line in text.splitlines() if line]


def once(lines):
    """custom_id -> line, and the ids answered more than once."""
    seen, twice = {}, []
    for line in lines:
        if line["custom_id"] in seen:
            twice.append(line["custom_id"])
        seen[line["custom_id"]] = line
    return seen, twice


def complete_batch(client, d):
    b = submit(client, input_file(d, "full", LINES))
    ok(b.status == "in_progress" and b.request_counts.total == LINES,
       f"batches.create: {b.status}, {b.request_counts.total} lines")
    b = poll(client, b.id, ended)
    ok(b.status == "completed", f"batches.retrieve: {b.status} {b.request_counts}")
    ok(b.request_counts.completed == LINES and b.request_counts.failed == 0, "every line answered 200")
    out = answers(client, b.output_file_id)
    seen, twice = once(out)
    ok(len(out) == LINES and not twice and set(seen) == {f"full-{i}" for i in range(LINES)},
       f"files.content: {len(out)} lines, each custom_id once")
    bodies = [line["response"]["body"] for line in out]
    ok(all(line["response"]["status_code"] == 200 and line["error"] is None
           and line["id"].startswith("batch_req_") for line in out)
       and all(b["choices"][0]["message"]["role"] == "assistant"
               and b["usage"]["completion_tokens"] <= 4 for b in bodies),
       "each line in OpenAI's shape, its body a chat completion")
    f = client.files.retrieve(b.output_file_id)
    ok(f.purpose == "batch_output" and f.bytes > 0, f"files.retrieve: the output file ({f.bytes} bytes)")
    ok(any(x.id == b.id for x in client.batches.list(limit=10).data), "batches.list holds it")


def cancel_midway(client, d):
    b = submit(client, input_file(d, "cancel", LINES))
    poll(client, b.id, lambda b: b.request_counts.completed >= 1)
    c = client.batches.cancel(b.id)
    ok(c.status in ("cancelling", "cancelled"), f"batches.cancel: {c.status}")
    b = poll(client, b.id, ended)
    n = b.request_counts
    out, err = answers(client, b.output_file_id), answers(client, b.error_file_id)
    _, twice = once(out + err)
    ok(b.status == "cancelled" and n.completed + n.failed < LINES and not twice
       and len(out) == n.completed and len(err) == n.failed,
       f"cancelled midway: {n.completed} answered, {n.failed} failed of {n.total}; the files agree")


def kill_and_resume(binary, client_for, d, state):
    port = free_port()
    log = open(os.path.join(d, "server-2.log"), "w")
    proc = start(binary, port, state, log)
    client = client_for(port)
    b = submit(client, input_file(d, "killed", LINES))
    mid = poll(client, b.id, lambda b: b.request_counts.completed >= 20 or ended(b))
    ok(mid.status == "in_progress", f"mid-batch at the kill: {mid.request_counts.completed} of {LINES}")
    proc.kill()
    proc.wait()
    port = free_port()
    log = open(os.path.join(d, "server-3.log"), "w")
    proc = start(binary, port, state, log)
    try:
        client = client_for(port)
        b = poll(client, b.id, ended)
        ok(b.status == "completed" and b.request_counts.completed == LINES,
           f"after the restart: {b.status} {b.request_counts}")
        out = answers(client, b.output_file_id)
        seen, twice = once(out)
        ok(len(out) == LINES and not twice and set(seen) == {f"killed-{i}" for i in range(LINES)},
           f"each line answered exactly once across the kill ({len(out)} lines, repeated: {twice[:5]})")
        ids = [line["id"] for line in out]
        ok(len(set(ids)) == LINES, "batch_req ids unique")
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main():
    binary = sys.argv[1]
    d = tempfile.mkdtemp(prefix="steward-batch-")
    state = os.path.join(d, "state")

    def client_for(port):
        return openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)

    port = free_port()
    log = open(os.path.join(d, "server-1.log"), "w")
    proc = start(binary, port, state, log)
    try:
        client = client_for(port)
        complete_batch(client, d)
        cancel_midway(client, d)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    kill_and_resume(binary, client_for, d, state)
    print(f"batch: {'all passed' if not failures else f'{len(failures)} failed'} (logs in {d})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
