#!/usr/bin/env python3
"""[7/8] Two Steward replicas behind the vLLM Router (PyPI `vllm-router`, its
Rust binary), on 127.0.0.2 and 127.0.0.3 (loopback addresses, no root needed).

For each policy (cache_aware, power_of_two, round_robin), in one window each:
conversations of several turns, each turn sent through the router with
`x-request-id: <policy>-c<conv>-t<turn>`; the replica that served a turn is
read from its own log (every request's id is logged there). Checked:
  - cache_aware: every turn of a conversation lands on one replica;
  - cache_aware's prefix-cache hit ratio (reused prompt tokens over prompt
    tokens, summed over both replicas' /metrics in the window) beats
    round_robin's;
  - power_of_two and round_robin use both replicas;
  - a replica killed (SIGKILL) mid-run under power_of_two: at most the
    requests in flight on it fail, the rest and all later ones succeed;
  - a drain (SIGTERM) of a replica: its /ready turns 503 and the requests
    through the router keep succeeding.

Usage: router_check.py STEWARD_BINARY [ROUTER_BINARY]
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

from checklib import failures, free_port, http, ok

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def metric_sum(base, name):
    st, text = http(base + "/metrics")
    if st != 200:
        return 0.0
    v = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            v += float(line.rsplit(" ", 1)[1])
    return v


class Replica:
    def __init__(self, steward, host, d):
        self.host, self.port = host, free_port(host)
        self.base = f"http://{host}:{self.port}"
        self.log = os.path.join(d, f"replica-{host}.log")
        self.proc = subprocess.Popen(
            [steward, "serve", "--host", host, "--port", str(self.port), "--served-model-name", "smol",
             "--max-seqs", "4", "--ctx-per-seq", "1024", "--threads", "1", "--drain-timeout-s", "20"],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"),
            # The admission line carries each request's id.
            env={**os.environ, "RUST_LOG": "info,steward_engine::owner::admit=debug"})

    def ready(self):
        return http(self.base + "/ready", timeout=2)[0] == 200

    def ids(self):
        text = ANSI.sub("", open(self.log, errors="replace").read())
        return set(re.findall(r"request_id=([A-Za-z0-9_.-]+)", text))


def start_router(router, policy, replicas, d):
    port = free_port("127.0.0.1")
    log = open(os.path.join(d, f"router-{policy}.log"), "w")
    p = subprocess.Popen(
        [router, "--host", "127.0.0.1", "--port", str(port), "--policy", policy,
         "--worker-urls", *[r.base for r in replicas],
         "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
         "--log-level", "warning"],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        if http(base + "/v1/models", timeout=2)[0] == 200:
            return p, base
        time.sleep(0.1)
    p.kill()
    raise SystemExit(f"router ({policy}) did not start; see {log.name}")


# A system prompt per conversation: long enough (~300 tokens) that reusing
# it shows in the prefix cache, distinct per conversation.
# The policy is in it too, so that each window starts with cold caches.
def system_prompt(policy, c):
    facts = " ".join(f"Rule {i} of team {c}: answer briefly and name team {c}." for i in range(24))
    return f"You are the {policy} assistant of team {c}. {facts}"


def chat(base, rid, messages, max_tokens=6):
    body = {"model": "smol", "messages": messages, "max_tokens": max_tokens, "temperature": 0}
    st, text = http(base + "/v1/chat/completions", body, {"x-request-id": rid})
    if st != 200:
        return st, None
    return st, json.loads(text)["choices"][0]["message"]["content"]


def conversations(base, policy, n_conv, turns):
    """Run n_conv conversations, their turns interleaved; return failures."""
    hist = {c: [{"role": "system", "content": system_prompt(policy, c)}] for c in range(n_conv)}
    bad = 0
    for t in range(turns):
        for c in range(n_conv):
            hist[c].append({"role": "user", "content": f"Question {t} for team {c}?"})
            st, answer = chat(base, f"{policy}-c{c}-t{t}", hist[c])
            if st != 200:
                bad += 1
                answer = ""
            hist[c].append({"role": "assistant", "content": answer})
    return bad


def main():
    steward = sys.argv[1]
    router = sys.argv[2] if len(sys.argv) > 2 else "vllm-router"
    d = tempfile.mkdtemp(prefix="steward-router-")
    reps = [Replica(steward, "127.0.0.2", d), Replica(steward, "127.0.0.3", d)]
    procs = [r.proc for r in reps]
    try:
        t0 = time.time()
        while not all(r.ready() for r in reps):
            if time.time() - t0 > 120:
                raise SystemExit("replicas not ready")
            time.sleep(0.2)
        hit = {}
        for policy in ["cache_aware", "round_robin", "power_of_two"]:
            rp, base = start_router(router, policy, reps, d)
            procs.append(rp)
            before = [(metric_sum(r.base, "steward_prefix_cache_reused_tokens_total"),
                       metric_sum(r.base, "steward_prompt_tokens_total")) for r in reps]
            # An odd count: round_robin then moves each conversation between
            # replicas turn by turn (an even count would pin each by chance).
            n_conv, turns = 5, 3
            bad = conversations(base, policy, n_conv, turns)
            after = [(metric_sum(r.base, "steward_prefix_cache_reused_tokens_total"),
                      metric_sum(r.base, "steward_prompt_tokens_total")) for r in reps]
            reused = sum(a[0] - b[0] for a, b in zip(after, before))
            computed = sum(a[1] - b[1] for a, b in zip(after, before))
            hit[policy] = reused / max(1.0, reused + computed)
            ok(bad == 0, f"{policy}: {n_conv * turns} turns through the router, {bad} failed")
            where = [r.ids() for r in reps]
            placed = {}
            for c in range(n_conv):
                for t in range(turns):
                    rid = f"{policy}-c{c}-t{t}"
                    placed.setdefault(c, set()).update(i for i, w in enumerate(where) if rid in w)
            used = set().union(*placed.values())
            print(f"     {policy}: replicas per conversation {[sorted(v) for v in placed.values()]}, "
                  f"prefix-cache hit ratio {hit[policy]:.3f}", flush=True)
            if policy == "cache_aware":
                ok(all(len(v) == 1 for v in placed.values()),
                   "cache_aware: every turn of a conversation lands on one replica")
            else:
                ok(used == {0, 1}, f"{policy}: both replicas serve")
            if policy != "power_of_two":
                rp.terminate()
                rp.wait()
        ok(hit["cache_aware"] > hit["round_robin"],
           f"cache_aware's hit ratio {hit['cache_aware']:.3f} beats round_robin's {hit['round_robin']:.3f}")

        # A drain under power_of_two: replica 1 gets SIGTERM; its /ready turns
        # 503 and requests through the router keep succeeding.
        results = []

        def load(tag, n, parallel):
            def one(i):
                st, _ = chat(base, f"{tag}-{i}", [{"role": "user", "content": f"Say {i}."}], max_tokens=48)
                results.append((tag, st))
            ts = []
            for i in range(n):
                th = threading.Thread(target=one, args=(i,))
                th.start()
                ts.append(th)
                if len(ts) >= parallel:
                    ts.pop(0).join()
            for th in ts:
                th.join()

        bg = threading.Thread(target=load, args=("drain", 24, 4))
        bg.start()
        # One long request straight to replica 1, so that its drain has
        # something to finish whatever the router sent it.
        longest = []
        lt = threading.Thread(target=lambda: longest.append(chat(
            reps[1].base, "drain-long", [{"role": "user", "content": "Tell a story."}], max_tokens=160)[0]))
        lt.start()
        time.sleep(1.0)
        reps[1].proc.send_signal(signal.SIGTERM)
        saw_503 = False
        for _ in range(500):
            if http(reps[1].base + "/ready", timeout=1)[0] == 503:
                saw_503 = True
                break
            time.sleep(0.01)
        bg.join()
        lt.join()
        drain_bad = [s for t, s in results if t == "drain" and s != 200]
        ok(saw_503, "drain: the draining replica's /ready answers 503")
        ok(longest == [200], f"drain: the request in flight on it finishes ({longest})")
        ok(len(drain_bad) <= 4, f"drain: {len(drain_bad)} of 24 requests failed through the router (at most the 4 in flight)")
        reps[1].proc.wait(timeout=60)
        reps[1] = Replica(steward, "127.0.0.3", d)
        procs.append(reps[1].proc)
        # (The router was started with the old port; restart it on both.)
        rp.terminate()
        rp.wait()
        t0 = time.time()
        while not reps[1].ready() and time.time() - t0 < 120:
            time.sleep(0.2)
        rp, base = start_router(router, "power_of_two", reps, d)
        procs.append(rp)

        # A replica killed mid-run: at most its in-flight requests fail.
        results.clear()
        bg = threading.Thread(target=load, args=("kill", 32, 4))
        bg.start()
        time.sleep(1.5)
        reps[0].proc.kill()
        bg.join()
        kill_bad = [s for t, s in results if s != 200]
        ok(len(results) == 32 and len(kill_bad) <= 4,
           f"kill: {len(kill_bad)} of 32 requests failed (at most the 4 in flight on the killed replica)")
        st, _ = chat(base, "after-kill", [{"role": "user", "content": "Hi"}])
        ok(st == 200, "after the kill, requests succeed on the replica left")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    print(f"router check: {'FAIL' if failures else 'PASS'} ({len(failures)} failed; logs in {d})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
