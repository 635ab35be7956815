#!/usr/bin/env python3
"""[7/8] One model across machines: llama.cpp's RPC backend behind
`steward rpc-worker` and `steward serve --rpc`.

Two workers on loopback ports (each its own process, as on two machines),
one server with `--rpc A,B`; beside it, in the same run, the same model
served locally. Checked:
  - the layers are on the workers (each worker's resident memory grows by a
    share of the weights);
  - greedy output over RPC equals the local run token for token (chat with
    logprobs: the token strings), on several prompts;
  - a worker SIGKILLed mid-stream: the stream ends with an error event and
    a concurrent non-streaming request with an error status, both within
    seconds (never a hang); /health answers 503 while the server exits, and
    it exits with status 70;
  - a worker that is not running: `serve --rpc` fails at start with one
    line naming it.
Prints decode tokens/s for local and RPC (a single stream; for
docs/BENCHMARKS.md, never asserted).

Usage: rpc_check.py STEWARD_BINARY
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from checklib import failures, free_port, http, ok

PROMPTS = [
    "Write one sentence about rivers.",
    "List three colours.",
    "What is 2 + 2? Explain.",
]
TOKENS = 24


def rss_mib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def wait_ready(base, proc, what, secs=180):
    for _ in range(secs * 10):
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode} before it was ready")
        if http(base + "/ready", timeout=2)[0] == 200:
            return
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{what} not ready after {secs} s")


def start_worker(steward, d, name):
    port = free_port()
    log = open(os.path.join(d, f"worker-{name}.log"), "w")
    p = subprocess.Popen([steward, "rpc-worker", "--port", str(port), "--threads", "1"],
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return p, f"127.0.0.1:{port}"
        except OSError:
            if p.poll() is not None:
                raise SystemExit(f"worker {name} exited with {p.returncode}")
            time.sleep(0.1)
    raise SystemExit(f"worker {name} did not listen")


def start_server(steward, d, name, extra):
    port = free_port()
    log = os.path.join(d, f"serve-{name}.log")
    p = subprocess.Popen(
        [steward, "serve", "--port", str(port), "--served-model-name", "smol", "--max-seqs", "2",
         "--ctx-per-seq", "1024", "--threads", "2", *extra],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    base = f"http://127.0.0.1:{port}"
    wait_ready(base, p, f"serve ({name}); see {log}")
    return p, base, log


def greedy(base, prompt):
    body = {"model": "smol", "messages": [{"role": "user", "content": prompt}], "max_tokens": TOKENS,
            "temperature": 0, "logprobs": True}
    st, text = http(base + "/v1/chat/completions", body, timeout=120)
    if st != 200:
        return None
    c = json.loads(text)["choices"][0]
    return [t["token"] for t in c["logprobs"]["content"]]


def decode_rate(base, tokens=64):
    body = {"model": "smol", "messages": [{"role": "user", "content": "Tell a long story."}],
            "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    t = time.monotonic()
    st, text = http(base + "/v1/chat/completions", body)
    dt = time.monotonic() - t
    if st != 200:
        return 0.0
    return json.loads(text)["usage"]["completion_tokens"] / dt


def stream_events(base, out):
    """A long greedy stream; appends ('data', obj) / ('error', obj) / ('end', why)."""
    body = {"model": "smol", "messages": [{"role": "user", "content": "Count to a thousand."}],
            "max_tokens": 900, "temperature": 0, "ignore_eos": True, "stream": True}
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            for raw in r:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    out.append(("end", "done"))
                    return
                obj = json.loads(payload)
                out.append(("error" if "error" in obj else "data", obj))
        out.append(("end", "eof"))
    except Exception as e:  # a reset connection is an end too
        out.append(("end", f"exception: {e}"))


def main():
    steward = sys.argv[1]
    d = tempfile.mkdtemp(prefix="steward-rpc-")
    procs = []
    try:
        # A worker that is not there: one line, at start.
        dead = f"127.0.0.1:{free_port()}"
        r = subprocess.run([steward, "serve", "--port", "0", "--rpc", dead], capture_output=True, text=True,
                           timeout=120)
        lines = [l for l in r.stderr.splitlines() if l.strip() and "INFO" not in l]
        ok(r.returncode != 0 and any(dead in l and "not reachable" in l for l in lines),
           f"serve --rpc to no worker fails at start naming it (rc {r.returncode}: {lines[-1:] if lines else ''})")

        local, lbase, _ = start_server(steward, d, "local", [])
        procs.append(local)
        want = [greedy(lbase, p) for p in PROMPTS]
        ok(all(w for w in want), "local greedy answers")
        local_rate = decode_rate(lbase)
        local.terminate()
        local.wait(timeout=60)

        wa, ea = start_worker(steward, d, "a")
        wb, eb = start_worker(steward, d, "b")
        procs += [wa, wb]
        base_rss = (rss_mib(wa.pid), rss_mib(wb.pid))
        srv, base, slog = start_server(steward, d, "rpc", ["--rpc", f"{ea},{eb}"])
        procs.append(srv)
        grown = (rss_mib(wa.pid) - base_rss[0], rss_mib(wb.pid) - base_rss[1])
        # SmolLM2-135M Q8_0 is ~140 MiB of weights: each worker holds a share.
        ok(all(g > 20 for g in grown), f"both workers hold layers (RSS grew {grown[0]:.0f} / {grown[1]:.0f} MiB)")
        got = [greedy(base, p) for p in PROMPTS]
        for i, (w, g) in enumerate(zip(want, got)):
            ok(g == w, f"prompt {i}: RPC greedy equals local token for token ({len(g or [])} tokens)")
        rpc_rate = decode_rate(base)
        print(f"decode, one stream, 64 tokens: local {local_rate:.1f} tok/s, "
              f"rpc (2 workers, 1 thread each) {rpc_rate:.1f} tok/s", flush=True)

        # Kill a worker mid-stream.
        events = []
        st = threading.Thread(target=stream_events, args=(base, events))
        st.start()
        for _ in range(600):
            if sum(1 for k, _ in events if k == "data") >= 5:
                break
            time.sleep(0.05)
        ok(sum(1 for k, _ in events if k == "data") >= 5, "the stream is decoding over RPC")
        plain = {}

        def non_stream():
            plain["r"] = http(base + "/v1/chat/completions",
                              {"model": "smol", "messages": [{"role": "user", "content": "Hi"}],
                               "max_tokens": 400, "ignore_eos": True, "temperature": 0}, timeout=60)

        nt = threading.Thread(target=non_stream)
        nt.start()
        time.sleep(0.3)
        killed = time.monotonic()
        wb.send_signal(signal.SIGKILL)
        health = []
        for _ in range(100):
            h = http(base + "/health", timeout=1)
            health.append(h[0])
            if h[0] == 503 or srv.poll() is not None:
                break
            time.sleep(0.05)
        st.join(timeout=30)
        nt.join(timeout=30)
        ended_in = time.monotonic() - killed
        ok(not st.is_alive() and not nt.is_alive(), f"both requests ended ({ended_in:.1f} s after the kill)")
        errs = [o for k, o in events if k == "error"]
        ok(bool(errs) and "runtime was lost" in json.dumps(errs[0]),
           f"the stream ended with an error event ({json.dumps(errs[0])[:160] if errs else events[-1:]})")
        code = plain.get("r", (None, ""))[0]
        ok(code is not None and code != 200, f"the non-streaming request got an error (status {code})")
        ok(503 in health or srv.poll() is not None, f"/health answered 503 or the server was gone ({health[-3:]})")
        try:
            rc = srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            rc = None
        ok(rc == 70, f"the server exited with status 70 (got {rc})")
        log = open(slog, errors="replace").read()
        ok("runtime aborted" in log, "the server logged why it exits")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    if failures:
        print(f"rpc_check: {len(failures)} failed; logs in {d}")
        sys.exit(1)
    print("rpc_check: all passed")


if __name__ == "__main__":
    main()
