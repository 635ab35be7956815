#!/usr/bin/env python3
"""[3/8] Second-turn TTFT of a conversation on a sliding-window model.

Gemma 3 270M (sliding window 512), raw /v1/completions (the same text goes to
every server): turn 1 sends ~3,000 tokens of history plus a question (16
tokens generated), turn 2 sends the history, the answer and a new question.
Turn 2 extends turn 1's tokens, so the slot's state is reusable as it stands.
A third request, "regen", then sends turn 1's prompt again (a regenerated
answer): the slot has moved ~30 tokens past it, so its sliding-window state
must be rewound (possible while the window cells it needs are still held,
otherwise only from a checkpoint or with a full-size SWA cache). TTFT = time
from sending the request to the first streamed text. Fresh history per round
(no cross-round reuse); rounds interleaved over servers, the order rotated
each round.

Starts the servers itself, one after the other, all held for the whole run
(one slot, 8,192 cells, 2 threads each, ports BASE..BASE+4), and stops them
at the end. Servers:
  steward            defaults: prefix cache on, SWA cache window+ubatch, checkpoints
  steward-nocache    --prefix-cache false
  steward-swa-full   --swa-full
  llama-server       defaults (context checkpoints for SWA models)
  llama-swa-full     --swa-full
Reports per server: median turn-1 / turn-2 TTFT and their ratio, the cached
prompt tokens the servers report, the process RSS after the run, steward's
/metrics memory and checkpoint figures, and each server's KV-cache startup
lines. Logs and JSON: target/bench/swa/ (swa-long/ with --long-turn2).

--long-turn2: turn 2 adds ~780 tokens of new log lines before its question,
so the slot moves past the 1,024 SWA cells (window 512 + ubatch 512) it
holds and the regen of turn 1 can reuse its prefix only from a checkpoint.

Usage: scripts/bench-swa.py [--rounds 5] [--base-port 8441] [--only NAME,...] [--long-turn2]
Env: STEWARD (default target/release/steward), LLAMA_SERVER, MODEL.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEWARD = os.environ.get("STEWARD", os.path.join(ROOT, "target/release/steward"))
LLAMA = os.environ.get(
    "LLAMA_SERVER", "/work/peers/src/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server")
MODEL = os.environ.get("MODEL", os.path.expanduser("~/.cache/steward/models/gemma-3-270m-q4_k_m.gguf"))
OUT = os.path.join(ROOT, "target/bench/swa")

METRICS = ["steward_checkpoint_bytes", "steward_checkpoints", "steward_window_cells_held",
           "steward_checkpoint_restores_total", "steward_prefix_hits_total"]
# extra counters printed when present (steward_prefix_hits_total is named
# steward_prefix_cache_hits_total in this tree's /metrics)
METRICS_EXTRA = ["steward_checkpoints_taken_total", "steward_prefix_cache_hits_total",
                 "steward_prefix_cache_lookups_total", "steward_prefix_cache_reused_tokens_total",
                 "steward_prefix_host_restores_total", "steward_prefix_host_bytes"]
LOG_RE = re.compile(r"KV cache|KV buffer|n_swa |swa_full|full-size SWA|model memory|n_ctx_seq  |n_slots", re.I)


def servers(base):
    st = [STEWARD, "serve", "--model", MODEL, "--host", "127.0.0.1", "--max-seqs", "1",
          "--ctx-per-seq", "8192", "--threads", "2"]
    ll = [LLAMA, "-m", MODEL, "--host", "127.0.0.1", "-c", "8192", "-np", "1", "-t", "2", "--metrics"]
    return [
        ("steward", "steward", st + ["--port", str(base)]),
        ("steward-nocache", "steward", st + ["--port", str(base + 1), "--prefix-cache", "false"]),
        ("steward-swa-full", "steward", st + ["--port", str(base + 2), "--swa-full"]),
        ("llama-server", "llama", ll + ["--port", str(base + 3)]),
        ("llama-swa-full", "llama", ll + ["--port", str(base + 4), "--swa-full"]),
    ]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode()


def wait_ready(url, kind, proc, limit=300):
    path = "/ready" if kind == "steward" else "/health"
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited with {proc.returncode}")
        try:
            if get(url + path)[0] == 200:
                return
        except Exception:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{url}: not ready after {limit} s")


def turn(url, prompt, max_tokens=16):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}, "cache_prompt": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", body, {"content-type": "application/json"})
    t0 = time.monotonic()
    first = None
    text = ""
    cached = None
    prompt_tokens = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            v = json.loads(line[6:])
            for ch in v.get("choices") or []:
                c = ch.get("text") or ""
                if c and first is None:
                    first = time.monotonic() - t0
                text += c
            u = v.get("usage")
            if u:
                prompt_tokens = u.get("prompt_tokens", prompt_tokens)
                d = u.get("prompt_tokens_details") or {}
                if d.get("cached_tokens") is not None:
                    cached = d["cached_tokens"]
            t = v.get("timings")  # llama-server: cache_n = prompt tokens taken from its cache
            if t and "cache_n" in t and cached is None:
                cached = t["cache_n"]
                prompt_tokens = prompt_tokens or t.get("cache_n", 0) + t.get("prompt_n", 0)
    return (first if first is not None else time.monotonic() - t0), text, prompt_tokens, cached


def history(seed, lines=124):  # ~3,000 tokens on Gemma 3's tokenizer
    return "".join(f"Log {seed}-{i}: vessel {(i * 7 + seed) % 23} left berth {i % 11} at "
                   f"{(i * 13) % 24:02d}:{(i * 17) % 60:02d}.\n" for i in range(lines))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


def metric_lines(text):
    vals, mem = {}, []
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name = line.split("{")[0].split(" ")[0]
        if name.startswith("steward_memory_bytes"):
            mem.append(line)
        elif name in METRICS or name in METRICS_EXTRA:
            vals[name] = float(line.rsplit(" ", 1)[1])
    return vals, mem


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base-port", type=int, default=8441)
    ap.add_argument("--only", default="")
    ap.add_argument("--long-turn2", action="store_true")
    args = ap.parse_args()
    global OUT
    if args.long_turn2:
        OUT += "-long"
    os.makedirs(OUT, exist_ok=True)
    sv = servers(args.base_port)
    if args.only:
        keep = args.only.split(",")
        sv = [s for s in sv if s[0] in keep]
    procs = {}
    ready_at = {}  # log size when the server became ready: startup lines come before it
    env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info"))
    try:
        for name, kind, cmd in sv:
            port = cmd[cmd.index("--port") + 1]
            if kind == "llama":
                # llama-server prints its KV cache sizes only at -lv 4; a first start at that
                # verbosity records them, the measured server then runs at the default one
                with open(os.path.join(OUT, name + ".startup.log"), "w") as plog:
                    probe = subprocess.Popen(cmd + ["-lv", "4"], stdout=plog, stderr=subprocess.STDOUT,
                                             start_new_session=True)
                    try:
                        wait_ready(f"http://127.0.0.1:{port}", kind, probe)
                    finally:
                        os.killpg(probe.pid, signal.SIGTERM)
                        probe.wait()
            log = open(os.path.join(OUT, name + ".log"), "w")
            procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True)
            print(f"# {name}: {' '.join(cmd)}", flush=True)
            # one at a time: two cores, and every startup's warmup would skew the others
            wait_ready(f"http://127.0.0.1:{port}", kind, procs[name])
            log.flush()
            ready_at[name] = os.path.getsize(log.name)
        urls = {name: f"http://127.0.0.1:{cmd[cmd.index('--port') + 1]}" for name, _, cmd in sv}
        res = {n: {k: [] for k in ("turn1", "turn2", "regen", "prompt1", "prompt2", "promptr",
                                   "cached1", "cached2", "cachedr")} for n, _, _ in sv}
        t_start = time.monotonic()
        for r in range(args.rounds):
            h = history(r)
            q1 = h + "Question: which vessel left berth 3 last?\nAnswer:"
            # rotate the order each round so no server always runs first
            order = sv[r % len(sv):] + sv[:r % len(sv)]
            for name, _, _ in order:
                url = urls[name]
                t1, a, p1, c1 = turn(url, q1)
                extra = history(1000 + r, 32) if args.long_turn2 else ""
                t2, _, p2, c2 = turn(url, q1 + a + "\n" + extra + "Question: and berth 5?\nAnswer:")
                x = res[name]
                x["turn1"].append(t1); x["turn2"].append(t2)
                x["prompt1"].append(p1); x["prompt2"].append(p2)
                x["cached1"].append(c1); x["cached2"].append(c2)
                t3, _, p3, c3 = turn(url, q1)
                x["regen"].append(t3); x["promptr"].append(p3); x["cachedr"].append(c3)
                print(f"round {r} {name:17s} turn1 {t1 * 1e3:6.0f} ms (prompt {p1}, cached {c1})  "
                      f"turn2 {t2 * 1e3:6.0f} ms (prompt {p2}, cached {c2})  "
                      f"regen {t3 * 1e3:6.0f} ms (cached {c3})", flush=True)
        print(f"# {args.rounds} rounds in {time.monotonic() - t_start:.0f} s", flush=True)
        time.sleep(1.5)  # let steward's 1 s gauges settle
        mem = {}
        for name, kind, _ in sv:
            m = {"rss_kib": rss_kib(procs[name].pid)}
            if kind == "steward":
                m["metrics"], m["memory_bytes"] = metric_lines(get(urls[name] + "/metrics")[1])
            mem[name] = m

        print()
        print("| server | turn 1 TTFT (s) | turn 2 TTFT (s) | turn 2 / turn 1 | turn 2 cached tokens | "
              "regen TTFT (s) | regen cached tokens | RSS after the run |")
        print("|---|---|---|---|---|---|---|---|")
        for name, _, _ in sv:
            v = res[name]
            a, b = statistics.median(v["turn1"]), statistics.median(v["turn2"])

            def cached(ck, pk):
                c = [x for x in v[ck] if x is not None]
                p = [x for x in v[pk] if x is not None]
                return f"{statistics.median(c):.0f} of {statistics.median(p):.0f}" if c and p else "n/a"
            print(f"| {name} | {a:.3f} | {b:.3f} | {b / a:.2f} | {cached('cached2', 'prompt2')} | "
                  f"{statistics.median(v['regen']):.3f} | {cached('cachedr', 'promptr')} | "
                  f"{mem[name]['rss_kib'] / 1024:.0f} MiB |")
        print()
        for name, kind, _ in sv:
            if kind != "steward":
                continue
            vals = mem[name]["metrics"]
            print(f"## {name} /metrics")
            for k in METRICS + METRICS_EXTRA:
                print(f"  {k} = {vals[k]:.0f}" if k in vals else f"  {k}: MISSING from /metrics")
            for line in mem[name]["memory_bytes"]:
                print("  " + line)
        print()
        for name, kind, _ in sv:
            print(f"## {name} startup lines (KV cache / SWA)")
            probe = os.path.join(OUT, name + ".startup.log")
            if kind == "llama" and os.path.exists(probe):
                with open(probe, "rb") as f:
                    startup = f.read().decode(errors="replace")
            else:
                with open(os.path.join(OUT, name + ".log"), "rb") as f:
                    startup = f.read(ready_at[name]).decode(errors="replace")
            for line in startup.splitlines(True):
                if LOG_RE.search(line):
                    print("  " + re.sub(r"\x1b\[[0-9;]*m", "", line.rstrip())[:300])
        with open(os.path.join(OUT, "result.json"), "w") as f:
            json.dump({"ttft": res, "memory": mem, "rounds": args.rounds, "long_turn2": args.long_turn2},
                      f, indent=1)
    finally:
        for name, p in procs.items():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for name, p in procs.items():
            try:
                p.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


if __name__ == "__main__":
    main()
