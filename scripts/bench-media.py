#!/usr/bin/env python3
"""Images beside decoding streams, Steward against llama-server, one run.

Three servers on the same model and projector, measured in interleaved rounds:
  steward        the encoder on its own thread (the default)
  steward-inline --encoder-on-owner: the encoder holds the owner's step lock,
                 as a loop that encodes inline does
  llama-server   (--llama-server PATH; it encodes in its loop)

Figures (each round, every server):
  stall   8 streaming text requests decode; once each has 4 tokens, one
          request with a picture is sent. The worst gap between two chunks of
          any stream while the picture's request runs, and that request's TTFT.
  encode  Steward's encoder time per picture size (its /metrics counter's
          delta over one request with a new picture).
  repeat  TTFT of a picture seen before in another conversation (its prefix
          is not cached, the encoder's cache holds it) against the same with
          --encoder-cache-mb 0.

Stdlib only (and scripts/checklib.py: PNGs, a gradient per seed; free ports).
"""
import argparse
import base64
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

from checklib import free_port, wait_ready, png




def data_uri(w, h, seed):
    return "data:image/png;base64," + base64.b64encode(png(w, h, seed)).decode()




def post(url, body, stream=False, timeout=600):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


def stream_chat(base, messages, max_tokens, times, started):
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "ignore_eos": True}
    with post(base + "/v1/chat/completions", body) as r:
        for line in r:
            if line.startswith(b"data: ") and b"[DONE]" not in line:
                times.append(time.monotonic())
                if len(times) == 4:
                    started.release()


def picture_request(base, uri, text="Describe the picture.", before=None):
    content = ([{"type": "text", "text": before}] if before else []) + [
        {"type": "image_url", "image_url": {"url": uri}}, {"type": "text", "text": text}]
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 1, "temperature": 0,
            "stream": True}
    t0 = time.monotonic()
    ttft = None
    with post(base + "/v1/chat/completions", body) as r:
        for line in r:
            if line.startswith(b"data: ") and ttft is None:
                ttft = time.monotonic() - t0
    return t0, time.monotonic(), ttft


def stall(base, uri, streams=8):
    times = [[] for _ in range(streams)]
    started = threading.Semaphore(0)
    threads = []
    for i in range(streams):
        m = [{"role": "user", "content": f"Tell a long story about ship number {i}."}]
        t = threading.Thread(target=stream_chat, args=(base, m, 160, times[i], started))
        t.start()
        threads.append(t)
    for _ in range(streams):
        started.acquire(timeout=600)
    a, b, ttft = picture_request(base, uri)
    for t in threads:
        t.join()
    worst = 0.0
    for ts in times:
        for x, y in zip(ts, ts[1:]):
            if y >= a and x <= b:
                worst = max(worst, y - x)
    return worst, ttft


def metric(base, name):
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steward", default="target/release/steward")
    ap.add_argument("--llama-server")
    ap.add_argument("--model", required=True)
    ap.add_argument("--mmproj", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=896, help="the stall test's picture side")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="target/bench/media")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    servers = {}
    common = ["serve", "--model", a.model, "--mmproj", a.mmproj, "--threads", str(a.threads),
              "--max-seqs", "10", "--ctx-per-seq", "1024"]
    for name, extra in [("steward", []), ("steward-inline", ["--encoder-on-owner"]),
                        ("steward-nocache", ["--encoder-cache-mb", "0"])]:
        port = free_port()
        log = open(f"{a.out}/{name}.log", "w")
        p = subprocess.Popen([a.steward, *common, "--port", str(port), *extra], stdout=log, stderr=log)
        servers[name] = (f"http://127.0.0.1:{port}", p, "/ready")
    if a.llama_server:
        port = free_port()
        log = open(f"{a.out}/llama-server.log", "w")
        p = subprocess.Popen([a.llama_server, "-m", a.model, "--mmproj", a.mmproj, "--port", str(port),
                              "-t", str(a.threads), "-tb", str(a.threads), "-np", "10", "-c", "10240",
                              "--no-mmproj-offload"], stdout=log, stderr=log)
        servers["llama-server"] = (f"http://127.0.0.1:{port}", p, "/health")
    try:
        for name, (base, p, ready) in servers.items():
            wait_ready(base + ready, p, name)
        res = {"stall": {}, "encode": {}, "repeat": {}}
        seed = 100
        for r in range(a.rounds):
            for name in ["steward", "steward-inline", "llama-server"]:
                if name not in servers:
                    continue
                seed += 1
                worst, ttft = stall(servers[name][0], data_uri(a.size, a.size, seed))
                res["stall"].setdefault(name, []).append({"worst_gap_s": worst, "image_ttft_s": ttft})
                print(f"round {r} {name}: worst gap {worst * 1e3:.0f} ms, picture TTFT {ttft:.2f} s",
                      flush=True)
            base = servers["steward"][0]
            for side in [64, 256, 512, 1024, 2048]:
                seed += 1
                before = metric(base, "steward_media_encode_seconds_total") or 0.0
                _, _, ttft = picture_request(base, data_uri(side, side, seed))
                after = metric(base, "steward_media_encode_seconds_total") or 0.0
                res["encode"].setdefault(str(side), []).append({"encode_s": after - before, "ttft_s": ttft})
                print(f"round {r} encode {side}x{side}: {(after - before) * 1e3:.0f} ms, TTFT {ttft:.2f} s",
                      flush=True)
            for name in ["steward", "steward-nocache"]:
                seed += 1
                uri = data_uri(a.size, a.size, seed)
                base = servers[name][0]
                _, _, first = picture_request(base, uri, before="First conversation.")
                _, _, again = picture_request(base, uri, before="Another conversation, other words.")
                res["repeat"].setdefault(name, []).append({"first_ttft_s": first, "repeat_ttft_s": again})
                print(f"round {r} repeat {name}: first {first:.2f} s, repeated {again:.2f} s", flush=True)
        json.dump(res, open(f"{a.out}/media.json", "w"), indent=1)
        print("\nmedians over rounds:")
        for name, rows in res["stall"].items():
            g = statistics.median(x["worst_gap_s"] for x in rows)
            t = statistics.median(x["image_ttft_s"] for x in rows)
            print(f"  stall {name}: worst gap {g * 1e3:.0f} ms (max {max(x['worst_gap_s'] for x in rows) * 1e3:.0f}), picture TTFT {t:.2f} s")
        for side, rows in res["encode"].items():
            print(f"  encode {side}px: {statistics.median(x['encode_s'] for x in rows) * 1e3:.0f} ms")
        for name, rows in res["repeat"].items():
            print(f"  repeat {name}: first {statistics.median(x['first_ttft_s'] for x in rows):.2f} s, "
                  f"repeated {statistics.median(x['repeat_ttft_s'] for x in rows):.2f} s")
    finally:
        for _, p, _ in servers.values():
            p.terminate()
        for _, p, _ in servers.values():
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
