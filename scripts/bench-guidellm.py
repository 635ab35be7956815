#!/usr/bin/env python3
"""Steward against llama-server under guidellm (0.8 CLI, `guidellm run`):
fixed-concurrency load of synthetic prompts (128 prompt tokens, 64 output
tokens forced with ignore_eos, raw /v1/completions), per level of
concurrency. Each round runs every level; each level runs every arm in turn,
the order of arms rotated each round. Every (round, level, arm) gets a fresh
server process (no prefix cache or warm slots carried over between levels),
a few unmeasured warm-up requests (prompts unlike the measured ones), then
one guidellm run. Measured prompts use guidellm seed 42+round, so every arm
of a round sees the same prompts.

Prints per level a table of medians over rounds: output tok/s (guidellm's
output_tokens_per_second mean = output tokens / benchmark duration), TTFT
p50/p99, ITL p50/p99 (guidellm's inter_token_latency_ms: a per-request mean
gap, (last token - first token) / (tokens - 1), weighted by tokens; its p99
is over requests, not over single gaps), request latency p50, errors.
With --quiet-wait S, each run first waits (up to S s) for the host to be
idle. Also records the host's load around each run (loadavg, and the CPU the
rest of the machine used besides the server and guidellm: another build on
the same cores shows up as `other_cores` > ~0.1).

    scripts/bench-guidellm.py --guidellm /tmp/peers/venv/bin/guidellm \\
        --tokenizer /tmp/peers/smollm2-tokenizer --model /tmp/peers/smollm2.gguf \\
        --steward /tmp/bench/steward-a --llama-server /tmp/peers/llama-server \\
        --arm 'steward=' --arm 'itl60=--itl-target-ms 60' \\
        --arm 'itl100=--itl-target-ms 100' --arm 'step60=--target-step-ms 60' \\
        --levels sync,4,16,32 --requests 64 --sync-requests 12 --rounds 2 \\
        --quiet-wait 120 --out target/bench/guidellm/result.json
    scripts/bench-guidellm.py --report --out target/bench/guidellm/result.json  # tables again

Arms: `--arm LABEL=FLAGS` (repeatable) is Steward (--steward BIN) started as
`BIN serve --model GGUF --host 127.0.0.1 --port P --threads T --max-seqs 32
--ctx-per-seq 1024 --state-dir none --served-model-name smollm2 FLAGS`;
`--llama-server BIN` adds the arm `llama-server`: `BIN -m GGUF --host
127.0.0.1 --port P -t T -np 32 -c 32768 --cont-batching` (1,024 cells per
slot, as Steward's --ctx-per-seq). Logs and guidellm's JSON per run go
beside --out (runs/).
"""
import argparse
import json
import os
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checklib import free_port  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "smollm2"
COLS = [("output tok/s", "out_tok_s", "{:.1f}"), ("TTFT p50 ms", "ttft_p50", "{:.0f}"),
        ("TTFT p99 ms", "ttft_p99", "{:.0f}"), ("ITL p50 ms", "itl_p50", "{:.1f}"),
        ("ITL p99 ms", "itl_p99", "{:.1f}"), ("latency p50 s", "lat_p50", "{:.2f}")]


def cpu_busy():
    """Busy seconds of the whole host so far (/proc/stat, all cpus)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def proc_cpu(pid):
    """CPU seconds of a process and its reaped children (its threads included)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in v[11:15]) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def wait_quiet(limit, max_cores=0.3, sample=2.0):
    """Wait (up to `limit` s) until the host's CPU use, with none of this
    script's processes running, is below `max_cores`; returns (seconds
    waited, last cores busy)."""
    t0 = time.monotonic()
    while True:
        b0 = cpu_busy()
        time.sleep(sample)
        cores = (cpu_busy() - b0) / sample
        if cores < max_cores or time.monotonic() - t0 >= limit:
            return time.monotonic() - t0, cores
        time.sleep(3)


def wait_ready(url, proc, limit=300):
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except Exception:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{url}: not ready after {limit} s")


def warm_up(url, n=4, parallel=2):
    """A few short requests, not measured: prompts unlike guidellm's."""
    def one(i):
        body = {"model": NAME, "prompt": f"Warm-up {i}: count slowly from one to twenty. " * 6,
                "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                     {"content-type": "application/json"})
        urllib.request.urlopen(req, timeout=120).read()
    for k in range(0, n, parallel):
        ts = [threading.Thread(target=one, args=(i,)) for i in range(k, min(n, k + parallel))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


def server_cmd(arm, args, port):
    if arm["kind"] == "llama":
        return [arm["bin"], "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
                "-t", str(args.threads), "-np", "32", "-c", "32768", "--cont-batching"] + arm["flags"]
    return [arm["bin"], "serve", "--model", args.model, "--host", "127.0.0.1", "--port", str(port),
            "--threads", str(args.threads), "--max-seqs", "32", "--ctx-per-seq", "1024",
            "--state-dir", "none", "--served-model-name", NAME] + arm["flags"]


def pick(dist, key):
    s = (dist or {}).get("successful") or {}
    if key in ("mean", "median"):
        return s.get(key)
    return (s.get("percentiles") or {}).get(key)


def summarize(path):
    with open(path) as f:
        d = json.load(f)
    b = d["benchmarks"][0]
    m = b["metrics"]
    tot = m["request_totals"]
    return {
        "out_tok_s": pick(m["output_tokens_per_second"], "mean"),
        "ttft_p50": pick(m["time_to_first_token_ms"], "p50"),
        "ttft_p99": pick(m["time_to_first_token_ms"], "p99"),
        "ttft_mean": pick(m["time_to_first_token_ms"], "mean"),
        "itl_p50": pick(m["inter_token_latency_ms"], "p50"),
        "itl_p99": pick(m["inter_token_latency_ms"], "p99"),
        "itl_mean": pick(m["inter_token_latency_ms"], "mean"),
        "tpot_p50": pick(m["time_per_output_token_ms"], "p50"),
        "tpot_p99": pick(m["time_per_output_token_ms"], "p99"),
        "lat_p50": pick(m["request_latency"], "p50"),
        "lat_p99": pick(m["request_latency"], "p99"),
        "prompt_tokens_p50": pick(m["prompt_token_count"], "p50"),
        "output_tokens_p50": pick(m["output_token_count"], "p50"),
        "completed": tot["successful"], "errored": tot["errored"],
        "incomplete": tot["incomplete"], "duration_s": b["duration"],
        "warnings": b.get("warnings"),
        "first_error": next((r["info"].get("error") for r in b["requests"].get("errored") or []), None),
    }


def run_one(arm, level, count, seed, args, rundir):
    quiet = wait_quiet(args.quiet_wait) if args.quiet_wait > 0 else (0.0, None)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    tag = f"r{seed - 42}-{level}-{arm['label']}"
    log = open(os.path.join(rundir, tag + ".server.log"), "w")
    cmd = server_cmd(arm, args, port)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    rec = {"arm": arm["label"], "level": level, "round": seed - 42, "requests": count, "seed": seed,
           "server_cmd": cmd, "quiet_wait_s": quiet[0], "idle_cores_before": quiet[1]}
    try:
        rec["startup_s"] = wait_ready(url, proc)
        warm_up(url)
        out = os.path.join(rundir, tag + ".guidellm.json")
        profile = "kind=synchronous" if level == "sync" else f"kind=concurrent,streams={level}"
        if args.warmup:
            # guidellm's own warm-up phase: its first requests (one wave)
            # are sent and left out of its statistics.
            profile += f",warmup={1 if level == 'sync' else int(level)}"
        gcmd = [args.guidellm, "run",
                "--backend", f"kind=openai_http,target={url},model={NAME},request_format=/v1/completions",
                "--profile", profile, "--constraint", f"kind=max_requests,count={count}",
                "--data", f"kind=synthetic_text,prompt_tokens={args.prompt_tokens},"
                          f"output_tokens={args.output_tokens}",
                "--tokenizer", f"kind=huggingface_auto,model={args.tokenizer}",
                "--seed", f"kind=static,value={seed}",
                "--output", f"kind=json,path={out}", "--disable-progress"]
        rec["guidellm_cmd"] = gcmd
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        rec["load_before"] = os.getloadavg()
        busy0, srv0, ch0, t0 = cpu_busy(), proc_cpu(proc.pid), resource.getrusage(
            resource.RUSAGE_CHILDREN), time.monotonic()
        with open(os.path.join(rundir, tag + ".guidellm.log"), "w") as glog:
            # its own session: guidellm forks workers, stopped with it
            g = subprocess.Popen(gcmd, stdout=glog, stderr=subprocess.STDOUT, env=env,
                                 start_new_session=True)
            try:
                g.wait(timeout=1800)
            finally:
                if g.poll() is None:
                    os.killpg(g.pid, signal.SIGKILL)
                    g.wait()
        wall = time.monotonic() - t0
        busy, srv = cpu_busy() - busy0, proc_cpu(proc.pid) - srv0
        ch1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        gl = (ch1.ru_utime + ch1.ru_stime) - (ch0.ru_utime + ch0.ru_stime)
        rec["load_after"] = os.getloadavg()
        rec.update(wall_s=wall, server_cores=srv / wall, guidellm_cores=gl / wall,
                   other_cores=max(0.0, busy - srv - gl) / wall, guidellm_rc=g.returncode)
        if g.returncode != 0:
            raise RuntimeError(f"guidellm exited {g.returncode}: see {glog.name}")
        rec["raw"] = out
        rec.update(summarize(out))
    except Exception as e:  # record it and go on with the next arm
        rec["failed"] = str(e)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=35)  # steward drains in-flight requests for up to 30 s
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    return rec


def med(rows, key):
    v = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(v) if v else None


def table(level, arms, results):
    print(f"\n### level {level}" + (" (synchronous)" if level == "sync" else " concurrent streams"))
    print()
    print("| arm | " + " | ".join(c[0] for c in COLS) + " | errors | rounds | other cores (max) |")
    print("|---|" + "---|" * (len(COLS) + 3))
    for arm in arms:
        rows = [r for r in results if r["level"] == level and r["arm"] == arm["label"] and "failed" not in r]
        failed = sum(1 for r in results if r["level"] == level and r["arm"] == arm["label"] and "failed" in r)
        cells = []
        for _, key, fmt in COLS:
            v = med(rows, key)
            cells.append(fmt.format(v) if v is not None else "n/a")
        errs = sum(r["errored"] + r["incomplete"] for r in rows)
        other = max((r["other_cores"] for r in rows), default=None)
        print(f"| {arm['label']} | " + " | ".join(cells) + f" | {errs}" + (f" (+{failed} failed runs)" if failed else "")
              + f" | {len(rows)} | " + (f"{other:.2f}" if other is not None else "n/a") + " |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--guidellm", default="/tmp/peers/venv/bin/guidellm")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--steward", help="Steward binary the --arm entries run")
    ap.add_argument("--arm", action="append", default=[], metavar="LABEL=FLAGS",
                    help="a Steward arm: extra serve flags (repeatable)")
    ap.add_argument("--llama-server", help="adds the arm `llama-server`")
    ap.add_argument("--llama-flags", default="", help="extra llama-server flags")
    ap.add_argument("--levels", default="sync,4,16,32")
    ap.add_argument("--requests", type=int, default=64, help="requests per concurrent level")
    ap.add_argument("--sync-requests", type=int, default=12, help="requests at the synchronous level")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--out", default=os.path.join(ROOT, "target/bench/guidellm/result.json"))
    ap.add_argument("--quiet-wait", type=float, default=0,
                    help="before each run wait up to this many s for the host to be idle (< 0.3 cores busy)")
    ap.add_argument("--warmup", action="store_true",
                    help="leave guidellm's first wave (one request synchronous, N at concurrency N) out of its "
                         "statistics (guidellm's warmup phase): they carry guidellm's own start-up")
    ap.add_argument("--report", action="store_true", help="only print the tables of an existing --out")
    args = ap.parse_args()
    if args.report:
        with open(args.out) as f:
            d = json.load(f)
        print(f"medians over the rounds in {args.out}; ITL = guidellm inter_token_latency_ms "
              f"(per-request mean gap; p99 over requests)")
        for level in d["meta"]["levels"]:
            table(level, d["meta"]["arms"], d["results"])
        return

    arms = []
    if args.llama_server:
        arms.append({"label": "llama-server", "kind": "llama", "bin": args.llama_server,
                     "flags": shlex.split(args.llama_flags)})
    for a in args.arm:
        label, _, flags = a.partition("=")
        if not args.steward:
            ap.error("--arm needs --steward")
        arms.append({"label": label, "kind": "steward", "bin": args.steward, "flags": shlex.split(flags)})
    if not arms:
        ap.error("no arms: give --llama-server and/or --arm")
    levels = args.levels.split(",")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    rundir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "runs")
    os.makedirs(rundir, exist_ok=True)

    results = []
    meta = {"argv": sys.argv, "arms": arms, "levels": levels, "started": time.time(), "rounds": []}

    def save():
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "results": results}, f, indent=1)

    try:
        for rnd in range(args.rounds):
            order = arms[rnd % len(arms):] + arms[:rnd % len(arms)]
            t_round = time.monotonic()
            for level in levels:
                count = args.sync_requests if level == "sync" else args.requests
                t_level = time.monotonic()
                for arm in order:
                    rec = run_one(arm, level, count, 42 + rnd, args, rundir)
                    results.append(rec)
                    save()
                    if "failed" in rec:
                        print(f"round {rnd} {level:>4} {arm['label']:14s} FAILED: {rec['failed']}", flush=True)
                    else:
                        print(f"round {rnd} {level:>4} {arm['label']:14s} out {rec['out_tok_s']:6.1f} tok/s  "
                              f"TTFT p50/p99 {rec['ttft_p50']:6.0f}/{rec['ttft_p99']:6.0f} ms  "
                              f"ITL p50/p99 {rec['itl_p50']:5.1f}/{rec['itl_p99']:5.1f} ms  "
                              f"ok {rec['completed']} err {rec['errored']}  "
                              f"load {rec['load_before'][0]:.2f}->{rec['load_after'][0]:.2f}  "
                              f"cores srv/gl/other {rec['server_cores']:.2f}/{rec['guidellm_cores']:.2f}/"
                              f"{rec['other_cores']:.2f}  {rec['wall_s']:.0f} s"
                              f"  (waited {rec['quiet_wait_s']:.0f} s for idle)", flush=True)
                print(f"# round {rnd} level {level}: {time.monotonic() - t_level:.0f} s", flush=True)
            meta["rounds"].append({"round": rnd, "order": [a["label"] for a in order],
                                   "seconds": time.monotonic() - t_round})
            print(f"# round {rnd}: {time.monotonic() - t_round:.0f} s", flush=True)
    finally:
        save()
    print(f"\nmedians over {args.rounds} round(s); {args.prompt_tokens} prompt / {args.output_tokens} "
          f"output tokens; ITL = guidellm inter_token_latency_ms (per-request mean gap; p99 over requests)")
    for level in levels:
        table(level, arms, results)
    print(f"\nraw: {args.out}")


if __name__ == "__main__":
    main()
