#!/usr/bin/env python3
"""[6/7] What tracing costs (docs/BENCHMARKS.md): three servers on the
default model, alike but for tracing (off; on, --otlp-sample-ratio 1.0; on,
0.01), each exporting over gRPC to a receiver of our own (otlp_check.py's,
which parses every request), and `steward-bench compare` running the same
workload against the three, interleaved level by level (one server loaded
at a time; the idle ones only hold memory). Prints the bench's table and
the spans each server built, exported and dropped.

Usage: target/pyenv/bin/python scripts/bench-trace.py [--levels 1,32]
         [--workload uniform-128] [--per-client 2] [--threads 2]
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from otlp_check import Receiver, start_grpc  # noqa: E402

from checklib import free_port, wait_ready  # noqa: E402
from checklib import http as _http  # noqa: E402


def metric(base, name):
    _, text = _http(base + "/metrics")
    return sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith(name + " "))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steward", default="target/release/steward")
    ap.add_argument("--bench", default="target/release/steward-bench")
    ap.add_argument("--levels", default="1,32")
    ap.add_argument("--workload", default="uniform-128")
    ap.add_argument("--per-client", default="2")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--extra-body", default=None, help="e.g. '{\"temperature\": 1}'")
    ap.add_argument("--out", default="target/bench/trace/result.json")
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    d = tempfile.mkdtemp(prefix="bench-trace-")
    model = subprocess.run([a.steward, "fetch-model"], capture_output=True, text=True, check=True).stdout.strip()
    rx = Receiver()
    gsrv, gport = start_grpc(rx)  # kept: a collected server stops
    arms = [("off", []),
            ("on-1.0", ["--otlp-endpoint", f"http://127.0.0.1:{gport}", "--otlp-sample-ratio", "1.0"]),
            ("on-0.01", ["--otlp-endpoint", f"http://127.0.0.1:{gport}", "--otlp-sample-ratio", "0.01"])]
    procs, urls = [], []
    try:
        for name, extra in arms:
            port = free_port()
            p = subprocess.Popen([a.steward, "serve", "--model", model, "--port", str(port), "--threads", a.threads,
                                  "--max-seqs", "32", "--ctx-per-seq", "512", "--no-web", "--state-dir", "none",
                                  "--no-access-log", *extra],
                                 stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, f"{name}.log"), "w"))
            procs.append(p)
            urls.append(f"http://127.0.0.1:{port}")
            wait_ready(urls[-1] + "/ready", p, name)
        cmd = [a.bench, "compare", "--workload", a.workload, "--levels", a.levels, "--per-client", a.per_client,
               "--out", a.out]
        for (name, _), u in zip(arms, urls):
            cmd += ["--url", u, "--name", name]
        if a.extra_body:
            cmd += ["--extra-body", a.extra_body]
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        for (name, _), u in zip(arms, urls):
            print(f"{name}: spans built {metric(u, 'steward_trace_spans_total'):.0f}, exported "
                  f"{metric(u, 'steward_trace_spans_exported_total'):.0f}, dropped "
                  f"{metric(u, 'steward_trace_spans_dropped_total'):.0f}, traces kept "
                  f"{metric(u, 'steward_traces_kept_total'):.0f}")
        print(f"receiver: {sum(len(v) for v in rx.spans.values())} spans in {rx.requests} exports; logs in {d}")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(60)


if __name__ == "__main__":
    main()
