#!/usr/bin/env python3
"""Two tenants on one server, and what a preemption costs.

tenants  A heavy key opens --heavy streaming requests at once, each followed
         by the next as soon as it ends (64 tokens out); a light key sends one
         request at a time (its next after the answer). Measured over
         --seconds per arm, arms interleaved over --rounds:
           steward-fcfs   --max-seqs S, two keys, arrival order (the default)
           steward-fair   the same with --fair-share (weights 1 and 1)
           llama-server   -np S, the same load (it knows no keys)
         The light key's TTFT p50/p99 (client side: request sent to first
         content chunk) and each key's output tokens/s; the light key alone
         first, for its baseline.
batch    The Batch API (--batch-lines chat lines, 64 tokens out): its throughput
         on an idle server against the same lines sent as ordinary requests
         (as many at once as the server has slots), and one interactive
         stream's TTFT p50 alone against the same while a batch runs.
preempt  --max-seqs 1 --scheduling-policy priority: a priority-5 request with
         a prompt of N tokens decodes; a priority-0 request arrives and
         preempts it. Steward's own counters give the swap (save + restore)
         time; the recompute it avoided is the victim's prefill time (its
         `timings.prefill_done_ms` less `admitted_ms`), measured on the same
         server. Per prompt length.

Usage (peers built outside the repo; see docs/BENCHMARKS.md [4/7]):
  python3 scripts/bench-tenants.py --steward target/release/steward \\
      --llama-server /tmp/peers/llama-server --model SMOLLM2.gguf [--rounds 2]

Stdlib only (and scripts/checklib.py for free ports).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from checklib import free_port, wait_ready

HEAVY_KEY, LIGHT_KEY = "sk-heavy-bench", "sk-light-bench"


def post(url, body, key=None, timeout=600):
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, json.dumps(body).encode(), h)
    return urllib.request.urlopen(req, timeout=timeout)


def stream(base, key, i, max_tokens=64):
    """One streamed chat request: (ttft s, content chunks)."""
    body = {"messages": [{"role": "user", "content": f"Tell me a long story about ship {i}."}],
            "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": True}
    t0 = time.monotonic()
    ttft, n = None, 0
    with post(base + "/v1/chat/completions", body, key) as r:
        for line in r:
            if line.startswith(b"data: ") and b"[DONE]" not in line:
                if b'"content"' in line:
                    n += 1
                    if ttft is None:
                        ttft = time.monotonic() - t0
    return ttft, n


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p * (len(xs) - 1)))))] if xs else float("nan")


def tenants_round(base, heavy, seconds):
    stop = time.monotonic() + seconds
    tokens = {"heavy": 0, "light": 0}
    lock = threading.Lock()

    def heavy_loop(j):
        i = 0
        while time.monotonic() < stop:
            _, n = stream(base, HEAVY_KEY, 1000 * j + i)
            i += 1
            with lock:
                tokens["heavy"] += n

    threads = [threading.Thread(target=heavy_loop, args=(j,)) for j in range(heavy)]
    for t in threads:
        t.start()
    time.sleep(2)  # the heavy key fills the slots first
    ttfts = []
    i = 0
    t_start = time.monotonic()
    while time.monotonic() < stop:
        ttft, n = stream(base, LIGHT_KEY, 9000 + i, max_tokens=16)
        i += 1
        ttfts.append(ttft)
        tokens["light"] += n
    light_s = time.monotonic() - t_start
    for t in threads:
        t.join()
    return {"light_ttft": ttfts, "heavy_tok_s": tokens["heavy"] / seconds,
            "light_tok_s": tokens["light"] / light_s}


def light_alone(base, n=20):
    return [stream(base, LIGHT_KEY, 8000 + i, max_tokens=16)[0] for i in range(n)]


def start(cmd, what, logdir):
    log = open(os.path.join(logdir, what + ".log"), "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=log)
    return p


def metric(base, name, key=None):
    req = urllib.request.Request(base + "/metrics")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    text = urllib.request.urlopen(req, timeout=10).read().decode()
    m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def preempt_cost(a, logdir, lengths):
    rows = []
    for n in lengths:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        p = start([a.steward, "serve", "--model", a.model, "--port", str(port), "--threads",
                   str(a.threads), "--max-seqs", "1", "--ctx-per-seq", str(max(2048, 2 * n)),
                   "--scheduling-policy", "priority", "--no-web"], f"preempt-{n}", logdir)
        try:
            wait_ready(base + "/ready", p, "steward")
            # ~3 tokens a word: a prompt of about n tokens (usage says).
            prompt = " ".join(f"w{i % 97}" for i in range(n // 3))
            out = {}

            def victim():
                body = {"prompt": prompt, "max_tokens": 48, "temperature": 0, "ignore_eos": True,
                        "priority": 5, "timings": True}
                try:
                    with post(base + "/v1/completions", body) as r:
                        out["victim"] = json.loads(r.read())
                except urllib.error.HTTPError as e:
                    out["error"] = e.read().decode(errors="replace")

            t = threading.Thread(target=victim)
            t.start()
            # Once it decodes (its prompt done), the urgent one arrives.
            while metric(base, "steward_generation_tokens_total") < 4:
                if "error" in out:
                    sys.exit(f"the victim request failed: {out['error']}")
                time.sleep(0.01)
            body = {"prompt": "Hi", "max_tokens": 4, "temperature": 0, "priority": 0}
            with post(base + "/v1/completions", body) as r:
                r.read()
            t.join()
            swap = metric(base, "steward_preempt_seconds_total") * 1e3
            swaps = metric(base, "steward_preemptions_total")
            tm = out["victim"].get("timings") or {}
            prefill = tm.get("prefill_done_ms", 0) - tm.get("admitted_ms", 0)
            n_tok = out["victim"]["usage"]["prompt_tokens"]
            rows.append({"prompt": n_tok, "swaps": swaps, "swap_ms": swap, "recompute_ms": prefill})
        finally:
            p.terminate()
            p.wait()
    return rows


def multipart(fields, files):
    b = "----steward-bench-boundary"
    out = bytearray()
    for k, v in fields.items():
        out += f"--{b}\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n".encode()
    for k, (name, data) in files.items():
        out += (f"--{b}\r\nContent-Disposition: form-data; name=\"{k}\"; filename=\"{name}\"\r\n"
                "Content-Type: application/jsonl\r\n\r\n").encode() + data + b"\r\n"
    out += f"--{b}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={b}"


def get(url):
    return json.loads(urllib.request.urlopen(url, timeout=60).read())


def chat_body(i, max_tokens=64):
    return {"messages": [{"role": "user", "content": f"Write a short note about harbour {i}."}],
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}


def run_batch(base, n):
    """Upload n lines, run them as a batch; (seconds from create to done, batch)."""
    lines = "".join(json.dumps({"custom_id": f"l{i}", "method": "POST", "url": "/v1/chat/completions",
                                "body": chat_body(i)}) + "\n" for i in range(n)).encode()
    data, ctype = multipart({"purpose": "batch"}, {"file": ("lines.jsonl", lines)})
    req = urllib.request.Request(base + "/v1/files", data, {"Content-Type": ctype})
    fid = json.loads(urllib.request.urlopen(req, timeout=60).read())["id"]
    t0 = time.monotonic()
    with post(base + "/v1/batches", {"input_file_id": fid, "endpoint": "/v1/chat/completions",
                                     "completion_window": "24h"}) as r:
        bid = json.loads(r.read())["id"]
    while True:
        b = get(f"{base}/v1/batches/{bid}")
        if b["status"] in ("completed", "failed", "expired", "cancelled"):
            return time.monotonic() - t0, b
        time.sleep(0.2)


def run_plain(base, n, concurrency):
    """The same n lines as ordinary requests, `concurrency` at once: seconds."""
    todo = list(range(n))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            with post(base + "/v1/chat/completions", chat_body(i)) as r:
                r.read()

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.monotonic() - t0


def interactive(base, seconds, stop_when=None):
    ttfts = []
    end = time.monotonic() + seconds
    i = 0
    while time.monotonic() < end and not (stop_when and stop_when()):
        ttfts.append(stream(base, None, 7000 + i, max_tokens=16)[0])
        i += 1
    return ttfts


def batch_bench(a, logdir):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    state = tempfile.mkdtemp(prefix="steward-bench-state-")
    p = start([a.steward, "serve", "--model", a.model, "--port", str(port), "--threads",
               str(a.threads), "--max-seqs", str(a.slots), "--ctx-per-seq", "1024", "--no-web",
               "--state-dir", state], "batch", logdir)
    out = {}
    try:
        wait_ready(base + "/ready", p, "steward")
        run_plain(base, 4, 4)  # warm-up
        out["batch_s"], b = run_batch(base, a.batch_lines)
        out["batch_status"] = b["status"]
        out["batch_counts"] = b.get("request_counts")
        out["plain_s"] = run_plain(base, a.batch_lines, a.slots)
        out["ttft_idle"] = interactive(base, a.seconds / 2)
        done = {"v": False}

        def bg():
            run_batch(base, a.batch_lines)
            done["v"] = True

        t = threading.Thread(target=bg)
        t.start()
        time.sleep(2)
        out["ttft_batch"] = interactive(base, a.seconds, lambda: done["v"])
        t.join()
        out["interrupted"] = metric(base, "steward_steps_interrupted_total")
    finally:
        p.terminate()
        p.wait()
    n = a.batch_lines
    print(f"\n| {n} lines, 64 tokens each | seconds | lines/s | output tok/s |")
    print("|---|---|---|---|")
    for k, label in (("batch_s", "Batch API"), ("plain_s", f"ordinary requests, {a.slots} at once")):
        print(f"| {label} | {out[k]:.1f} | {n / out[k]:.2f} | {64 * n / out[k]:.1f} |")
    i50, b50 = q(out["ttft_idle"], .5), q(out["ttft_batch"], .5)
    print(f"\ninteractive TTFT p50: {i50 * 1e3:.0f} ms idle, {b50 * 1e3:.0f} ms with a batch running "
          f"({b50 / i50:.2f}x; {len(out['ttft_batch'])} requests; {out['interrupted']:.0f} batch steps "
          f"interrupted); batch {out['batch_status']} {out['batch_counts']}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steward", default="target/release/steward")
    ap.add_argument("--llama-server")
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--heavy", type=int, default=24)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--lengths", default="256,1024,3072")
    ap.add_argument("--batch-lines", type=int, default=200)
    ap.add_argument("--skip", default="", help="any of tenants, preempt, batch")
    ap.add_argument("--out", default="target/bench/tenants")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    results = {"tenants": {}, "preempt": [], "batch": {}}
    if "batch" not in a.skip:
        results["batch"] = batch_bench(a, a.out)
    if "preempt" not in a.skip:
        results["preempt"] = preempt_cost(a, a.out, [int(x) for x in a.lengths.split(",")])
        print("\n| prompt tokens | preemptions | swap out + in (ms) | recompute avoided (ms) |")
        print("|---|---|---|---|")
        for r in results["preempt"]:
            print(f"| {r['prompt']} | {r['swaps']:.0f} | {r['swap_ms']:.1f} | {r['recompute_ms']:.0f} |")
    if "tenants" not in a.skip:
        keyfile = tempfile.NamedTemporaryFile("w", suffix=".keys", delete=False)
        keyfile.write(f"{HEAVY_KEY} name=heavy weight=1\n{LIGHT_KEY} name=light weight=1\n")
        keyfile.close()
        arms = {
            "steward-fcfs": [],
            "steward-fair": ["--fair-share"],
        }
        if a.llama_server:
            arms["llama-server"] = None
        for r in range(a.rounds):
            names = list(arms)
            names = names[r % len(names):] + names[:r % len(names)]
            for name in names:
                port = free_port()
                base = f"http://127.0.0.1:{port}"
                if arms[name] is None:
                    cmd = [a.llama_server, "-m", a.model, "--host", "127.0.0.1", "--port", str(port),
                           "-t", str(a.threads), "-tb", str(a.threads), "-np", str(a.slots),
                           "-c", str(1024 * a.slots)]
                    ready = "/health"
                else:
                    cmd = [a.steward, "serve", "--model", a.model, "--port", str(port), "--threads",
                           str(a.threads), "--max-seqs", str(a.slots), "--ctx-per-seq", "1024",
                           "--api-key-file", keyfile.name, "--no-web", *arms[name]]
                    ready = "/ready"
                p = start(cmd, f"{name}-{r}", a.out)
                try:
                    wait_ready(base + ready, p, name)
                    alone = light_alone(base)
                    res = tenants_round(base, a.heavy, a.seconds)
                    res["alone_ttft"] = alone
                    if arms[name] is not None:
                        res["interrupted"] = metric(base, "steward_steps_interrupted_total", HEAVY_KEY)
                        res["interrupted_s"] = metric(base, "steward_steps_interrupted_seconds_total",
                                                      HEAVY_KEY)
                    results["tenants"].setdefault(name, []).append(res)
                    print(f"round {r} {name}: light TTFT p50 {q(res['light_ttft'], .5) * 1e3:.0f} ms "
                          f"p99 {q(res['light_ttft'], .99) * 1e3:.0f} ms (alone p50 "
                          f"{q(alone, .5) * 1e3:.0f}), heavy {res['heavy_tok_s']:.1f} tok/s, "
                          f"light {res['light_tok_s']:.1f} tok/s", flush=True)
                finally:
                    p.terminate()
                    p.wait()
        print("\n| server | light alone TTFT p50 / p99 (ms) | light TTFT p50 (ms) | light TTFT p99 (ms) "
              "| heavy key tok/s | light key tok/s | steps interrupted (compute lost, s) |")
        print("|---|---|---|---|---|---|---|")
        for name, runs in results["tenants"].items():
            lt = [x for r in runs for x in r["light_ttft"]]
            al = [x for r in runs for x in r["alone_ttft"]]
            hv = statistics.median(r["heavy_tok_s"] for r in runs)
            li = statistics.median(r["light_tok_s"] for r in runs)
            intr = sum(r.get("interrupted", 0) for r in runs)
            intr_s = sum(r.get("interrupted_s", 0) for r in runs)
            print(f"| {name} | {q(al, .5) * 1e3:.0f} / {q(al, .99) * 1e3:.0f} | {q(lt, .5) * 1e3:.0f} "
                  f"| {q(lt, .99) * 1e3:.0f} | {hv:.1f} | {li:.1f} | {intr:.0f} ({intr_s:.1f}) |")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
