"""The state directory under SIGKILL: a real `steward serve` (the binary,
the default model, a state directory in a temp dir) answers Responses
requests (`store: true`, 4 tokens) from two client threads, some continuing
an earlier response (`previous_response_id`), some deleting one; the server
is killed (SIGKILL) at a random moment (a fixed seed) while they run,
`--kills` times, and started again on the same directory each time. After
each restart: the server comes up, every response whose 200 a client got
before the kill answers GET with the body the client got, and every one
whose DELETE got a 200 answers 404, and the prompt cache's disk tier
(`kv/`: each client's prompts share a ~200-token preamble, written to disk
while the server is idle between requests and when a slot is evicted, no
host tier) found no corrupt entry at its scan. At the end, after a SIGTERM,
SQLite's `integrity_check` of steward.db says ok, and the disk tier held
entries after some restart (the kills landed around real writes).

Usage: python state_kill_check.py STEWARD_BINARY [--kills N] [--seed S]
Prints a line per check; exits non-zero if any fails.
"""
import argparse
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

from checklib import failures, free_port, http, ok

# Guards against a hang, never claims about speed.
READY_GUARD = 300
LOAD_GUARD = 120


class Acked:
    """What the clients were told, shared by their threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.kept = {}       # id -> the response body a 200 carried
        self.deleted = set()  # ids whose DELETE got a 200
        self.unsure = set()   # ids whose DELETE got no answer (a kill)
        self.wrong = []       # answers that broke a rule while the server ran
        self.sent = 0


def client(base, acked, stop, rng, k):
    """Requests in a loop while the server is up (`base[0]` set)."""
    n = 0
    preamble = " ".join(f"Line {i} of client {k}'s log: the pump at station {i % 5} ran."
                        for i in range(12))
    while not stop.is_set():
        url = base[0]
        if url is None:
            time.sleep(0.02)
            continue
        n += 1
        with acked.lock:
            ids = [i for i in acked.kept if i not in acked.deleted and i not in acked.unsure]
            pick = rng.choice(ids) if ids else None
        if pick and n % 9 == 0:
            with acked.lock:
                acked.unsure.add(pick)
            st, _ = http(f"{url}/v1/responses/{pick}", method="DELETE", timeout=30)
            with acked.lock:
                if st == 200:
                    acked.unsure.discard(pick)
                    acked.deleted.add(pick)
                elif st == 404:
                    acked.wrong.append(f"DELETE of kept {pick}: 404")
            continue
        body = {"model": "smol", "input": f"{preamble}\nSay {n}.", "max_output_tokens": 4,
                "temperature": 0, "store": True}
        if pick and n % 4 == 0:
            body["previous_response_id"] = pick
        st, text = http(f"{url}/v1/responses", body, timeout=60)
        with acked.lock:
            acked.sent += 1
        if st == 200:
            v = json.loads(text)
            with acked.lock:
                acked.kept[v["id"]] = v
        elif st == 404 and pick and "previous_response_id" in body:
            with acked.lock:
                # A delete racing this continuation may have won.
                if pick not in acked.deleted and pick not in acked.unsure:
                    acked.wrong.append(f"previous_response_id {pick} of a kept response: 404")
        elif st == 400 and "context_length_exceeded" in text and "previous_response_id" in body:
            pass  # a long chain of continuations past the context: a right answer
        elif st not in (0, 503):
            with acked.lock:
                acked.wrong.append(f"POST /v1/responses: {st} {text[:200]}")


def start(binary, state, logdir, k):
    port = free_port()
    log = open(os.path.join(logdir, f"server-{k}.log"), "w")
    proc = subprocess.Popen(
        [binary, "serve", "--host", "127.0.0.1", "--port", str(port), "--max-seqs", "4",
         "--ctx-per-seq", "2048", "--served-model-name", "smol", "--state-dir", state,
         "--prefix-host-mb", "0", "--prefix-host-min", "64", "--disk-cache-gb", "1"],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + READY_GUARD
    while time.time() < deadline:
        if proc.poll() is not None:
            return None, url
        if http(f"{url}/ready", timeout=5)[0] == 200:
            return proc, url
        time.sleep(0.05)
    proc.kill()
    return None, url


def check_kept(url, acked, after):
    """Every acked response answers GET as it was answered; every deleted
    one 404."""
    with acked.lock:
        kept = {i: v for i, v in acked.kept.items() if i not in acked.deleted and i not in acked.unsure}
        deleted = set(acked.deleted)
    lost, changed, back = [], [], []
    for rid, v in kept.items():
        st, text = http(f"{url}/v1/responses/{rid}", timeout=30)
        if st != 200:
            lost.append(rid)
        elif json.loads(text) != v:
            changed.append(rid)
    for rid in deleted:
        if http(f"{url}/v1/responses/{rid}", timeout=30)[0] != 404:
            back.append(rid)
    ok(not lost and not changed and not back,
       f"{after}: {len(kept)} acked responses there as answered, {len(deleted)} deleted gone"
       + (f" (lost {lost[:3]}, changed {changed[:3]}, deleted but back {back[:3]})"
          if lost or changed or back else ""))


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def check_disk(url, k):
    """The disk tier's scan (polled until it has reported) found no entry
    that failed its checks: a kill leaves whole files or `.tmp` leftovers.
    Returns the entries it holds."""
    deadline = time.time() + READY_GUARD
    text = ""
    while time.time() < deadline:
        st, text = http(f"{url}/metrics", timeout=30)
        if st == 200 and metric(text, "steward_prefix_disk_entries") is not None:
            break
        time.sleep(0.05)
    corrupt = metric(text, "steward_prefix_disk_corrupt_total")
    if corrupt:
        ok(False, f"start {k}: the disk tier found {corrupt:.0f} corrupt entries")
    return metric(text, "steward_prefix_disk_entries") or 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=20261205)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    d = tempfile.mkdtemp(prefix="steward-state-kill-")
    state = os.path.join(d, "state")
    acked, stop, base = Acked(), threading.Event(), [None]
    threads = [threading.Thread(target=client, args=(base, acked, stop, random.Random(a.seed + i), i),
                                daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    t0 = time.time()
    proc, disk_entries = None, 0
    try:
        for k in range(a.kills + 1):
            proc, url = start(a.binary, state, d, k)
            if proc is None:
                ok(False, f"start {k}: the server came up (log: {d}/server-{k}.log)")
                break
            check_kept(url, acked, "first start" if k == 0 else f"restart {k} after a SIGKILL")
            disk_entries = max(disk_entries, check_disk(url, k))
            if k == a.kills:
                break
            with acked.lock:
                before = len(acked.kept)
            base[0] = url
            # Under load: at least one answer of this run, then a random
            # moment.
            deadline = time.time() + LOAD_GUARD
            while time.time() < deadline:
                with acked.lock:
                    if len(acked.kept) > before:
                        break
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.6))
            proc.kill()
            base[0] = None
            proc.wait()
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=90)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
    ok(not acked.wrong, f"every answer while the server ran kept the rules {acked.wrong[:3]}")
    db = sqlite3.connect(os.path.join(state, "steward.db"))
    check = db.execute("PRAGMA integrity_check").fetchone()[0]
    db.close()
    ok(check == "ok", f"steward.db integrity_check after {a.kills} kills: {check}")
    ok(disk_entries > 0, f"the disk tier held entries after a restart (at most {disk_entries})")
    print(f"state kill: {len(acked.kept)} responses acked, {len(acked.deleted)} deleted, "
          f"{acked.sent} sent, {a.kills} kills in {time.time() - t0:.0f} s: "
          f"{'all passed' if not failures else f'{len(failures)} failed'} (logs in {d})")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
