#!/usr/bin/env python3
"""State that survives a restart (docs/BENCHMARKS.md [5/7]).

restart  The next turn of a conversation after a restart, for histories of
         --sizes tokens (default 2000,8000,32000), greedy, 8 tokens out, one
         sequence (Steward --max-seqs 1 --ctx-per-seq C, llama-server -np 1
         -c C, C = --ctx, 34000), --threads for both. Both servers cap a
         sequence's context at the model's training context: for 32k
         tokens of SmolLM2 (8192) give a copy of the GGUF whose
         llama.context_length says more (docs/BENCHMARKS.md [5/7]).
         Per size, in this order:
           steward turn 1   the history (its TTFT: a cold prefill), then
                            SIGTERM at once (the disk tier writes the slot)
           llama turn 1     the same history, POST /slots/0?action=save,
                            SIGTERM
           steward disk     restarted on the same --state-dir: turn 2 =
                            history + turn 1's answer + a short message
           llama restore    restarted, POST /slots/0?action=restore, turn 2
           steward recompute a fresh server, --disk-cache-gb 0: turn 2
           llama recompute  a fresh server, no restore: turn 2
           steward disk, cold  as "steward disk" on a copy of the state
                            directory whose files were dropped from the OS
                            page cache (fsync + POSIX_FADV_DONTNEED)
           llama restore, cold  the slot file dropped the same way
         TTFT is measured by the client (request sent to first content
         chunk, streaming); llama-server's restore call is timed apart and
         reported both excluded and included. cached_tokens is the
         response's usage.prompt_tokens_details.cached_tokens.
itl      The disk tier's writes beside decoding streams: Steward
         --max-seqs 5 --ctx-per-seq 8192 (--itl-ctx) --prefix-host-mb 0.
         A conversation of --itl-history (8000) tokens is computed alone
         (its idle write to disk timed through /metrics: the write
         bandwidth with nothing else running); 4 streams start (ignore_eos, 1024 tokens); the
         conversation's next turn runs beside them (its slot now holds a
         longer entry than the disk); then a new short prompt evicts that
         slot (5 slots, 4 busy): with the disk tier its state is copied on
         the owner thread and written by the disk thread while the 4 streams
         decode. The streams' inter-token gaps (client side) in the
         --window seconds after the new prompt is sent, against the
         --window seconds before it; arms interleaved over --rounds:
           disk   --disk-cache-gb 4
           off    --disk-cache-gb 0
           host   --disk-cache-gb 0 --prefix-host-mb 512 (the same state copy
                  on the owner thread into host memory, no disk write)

The --steward binary is copied once, at the first quiet moment, and that
copy serves every run. Before each size's (and the itl part's) servers
start, the script waits until, for 60 s, no rustc, cargo, cc1plus or cmake
process has been seen and the host's CPU use was under 0.3 cores (at most
--quiet-limit s in all, then it goes on). While it measures it records
(`host`) the build processes seen and the cores the rest of the host used
(all busy CPU less this script's and its servers').

Usage (peers built outside the repo; see docs/BENCHMARKS.md [5/7]):
  python3 scripts/bench-restart.py --steward target/release/steward \\
      --llama-server /tmp/peers/llama-server --model MODEL.gguf \\
      [--parts restart,itl] [--sizes 2000,8000,32000] \\
      [--out target/bench/restart/result.json]

Stdlib only (and scripts/checklib.py for free ports and readiness).
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checklib import free_port, http, wait_ready  # noqa: E402

BUILD_PROCS = ("rustc", "cargo", "cc1plus", "cmake")
WORDS = ("the river harbour ship lantern winter market engine copper garden valley signal "
         "orchard bridge candle thunder meadow silver quiet north letter window station "
         "morning paper mountain island forest bell tower road stone").split()
NEW_MESSAGE = "And what happened next?"


# ---------------------------------------------------------------- host load

def builds_running():
    return [p for p in BUILD_PROCS
            if subprocess.run(["pgrep", "-x", p], stdout=subprocess.DEVNULL).returncode == 0]


def cpu_busy():
    """Busy CPU seconds of the whole host so far."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def own_busy():
    """CPU seconds of this script and every process under it (the servers,
    those reaped included); and those of them found stopped."""
    procs = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # utime, stime and the reaped children's cutime, cstime.
        procs[int(pid)] = (int(st[1]), sum(map(int, st[11:15])) / os.sysconf("SC_CLK_TCK"),
                           st[0])
    mine, todo = set(), [os.getpid()]
    while todo:
        p = todo.pop()
        mine.add(p)
        todo += [c for c, (pp, _, _) in procs.items() if pp == p and c not in mine]
    stopped = [p for p in mine if procs.get(p, (0, 0, ""))[2] == "T"]
    return sum(procs[p][1] for p in mine if p in procs), stopped


def wait_quiet(limit, need=60.0, max_cores=0.3):
    """Wait until, for `need` s, no build process has been seen and the rest
    of the host has used under `max_cores` cores (this script's servers are
    stopped meanwhile); at most `limit` s. (seconds waited, whether it gave
    up)."""
    t0 = last = time.monotonic()
    while True:
        b0 = cpu_busy()
        time.sleep(2)
        now = time.monotonic()
        if builds_running() or (cpu_busy() - b0) / 2 > max_cores:
            last = now
        elif now - last >= need:
            return now - t0, False
        if now - t0 >= limit:
            return now - t0, True


class BuildWatch:
    """While a part runs, every 2 s: build processes seen, the cores the rest
    of the host used (all busy CPU less this script's and its servers'), and
    a server of ours found stopped (SIGSTOP by someone else: void figures)."""

    def __init__(self):
        self.seen, self.other, self.stop = set(), [], threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        b0, o0, t0 = cpu_busy(), own_busy()[0], time.monotonic()
        while not self.stop.wait(2):
            self.seen.update(builds_running())
            b1, (o1, stopped), t1 = cpu_busy(), own_busy(), time.monotonic()
            self.other.append(round(max(0.0, (b1 - b0) - (o1 - o0)) / (t1 - t0), 2))
            b0, o0, t0 = b1, o1, t1
            self.seen.update(f"process {p} stopped (SIGSTOP)" for p in stopped)

    def done(self):
        self.stop.set()
        self.t.join()
        o = self.other
        return {"builds_seen": sorted(self.seen),
                "other_cores_mean": round(sum(o) / len(o), 2) if o else None,
                "other_cores_max": max(o) if o else None,
                "other_cores_over_0.5_s": 2 * sum(1 for x in o if x > 0.5)}


def drop_page_cache(path):
    """Evict these files (a file, or every file under a folder) from the OS
    page cache: fsync, then POSIX_FADV_DONTNEED."""
    files = [path] if os.path.isfile(path) else [
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", *files], capture_output=True,
                         text=True)
    return sum(int(x) for x in out.stdout.split() if x.isdigit()) if out.returncode == 0 else None


# ------------------------------------------------------------------ servers

class Server:
    def __init__(self, kind, cmd, logdir, label):
        self.kind, self.label = kind, label
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(logdir, re.sub(r"[^a-z0-9]+", "-", label) + ".log")
        self.log = open(self.log_path, "w")
        t0 = time.monotonic()
        self.proc = subprocess.Popen([*cmd, "--port", str(self.port)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        wait_ready(self.base + ("/ready" if kind == "steward" else "/health"), self.proc, label)
        self.ready_s = time.monotonic() - t0

    def stop(self):
        """SIGTERM; seconds until the process has exited."""
        t0 = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        return time.monotonic() - t0

    def log_text(self):
        with open(self.log_path, errors="replace") as f:
            return re.sub(r"\x1b\[[0-9;]*m", "", f.read())


def steward(a, logdir, label, state, ctx, seqs, extra=()):
    return Server("steward", [a.steward, "serve", "--model", a.model, "--host", "127.0.0.1",
                              "--threads", str(a.threads), "--max-seqs", str(seqs),
                              "--ctx-per-seq", str(ctx), "--state-dir", state, "--no-web",
                              "--request-timeout-s", "0", *extra], logdir, label)


def llama(a, logdir, label, slots, ctx):
    return Server("llama", [a.llama_server, "-m", a.model, "--host", "127.0.0.1",
                            "-t", str(a.threads), "-np", "1", "-c", str(ctx), "-fa", "on",
                            "--slot-save-path", slots], logdir, label)


def metrics(base):
    text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    out = {}
    for m in re.finditer(r"^(steward_prefix_[a-z_]+)(?:\{[^}]*\})? ([0-9.e+-]+)$", text, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def post_json(base, path, body, timeout=600):
    t0 = time.monotonic()
    st, text = http(base + path, body, timeout=timeout)
    if st != 200:
        raise RuntimeError(f"{path}: {st} {text[:300]}")
    return json.loads(text), time.monotonic() - t0


class Stream:
    """One streamed request, chat (`messages` a list) or plain completion
    (`messages` a string: the prompt, no template); chunk times kept."""

    def __init__(self, base, messages, max_tokens=8, extra=None, stop=None):
        chat = not isinstance(messages, str)
        self.path = "/v1/chat/completions" if chat else "/v1/completions"
        self.body = {("messages" if chat else "prompt"): messages, "max_tokens": max_tokens,
                     "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
                     **(extra or {})}
        self.base, self.stop_ev = base, stop
        self.ttft = self.usage = self.timings = self.error = None
        self.text, self.times, self.t0 = "", [], None

    def run(self):
        req = urllib.request.Request(self.base + self.path, json.dumps(self.body).encode(),
                                     {"content-type": "application/json"})
        self.t0 = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=3600) as r:
                for line in r:
                    if self.stop_ev is not None and self.stop_ev.is_set():
                        break
                    if not line.startswith(b"data: ") or b"[DONE]" in line:
                        continue
                    d = json.loads(line[6:])
                    for c in d.get("choices") or []:
                        piece = (c.get("delta") or {}).get("content") or c.get("text")
                        if piece:
                            now = time.monotonic()
                            self.times.append(now)
                            if self.ttft is None:
                                self.ttft = now - self.t0
                            self.text += piece
                    self.usage = d.get("usage") or self.usage
                    self.timings = d.get("timings") or self.timings
        except Exception as e:  # noqa: BLE001 (reported with the result)
            self.error = str(e)
        return self

    def result(self):
        u = self.usage or {}
        return {"ttft_s": self.ttft, "text": self.text,
                "prompt_tokens": u.get("prompt_tokens"),
                "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens"),
                "timings": self.timings, "error": self.error}


# ------------------------------------------------------------ the history

def history(base, n, seed=7):
    """Messages (system, user/assistant pairs, a last user question) of about
    `n` prompt tokens as the server's chat template and tokenizer count
    them (POST /tokenize with `messages`)."""
    r = random.Random(seed)

    def para(k):
        return " ".join(r.choice(WORDS) for _ in range(k)).capitalize() + "."

    def count(msgs):
        return post_json(base, "/tokenize", {"messages": msgs})[0]["count"]

    msgs = [{"role": "system", "content": "You are a helpful assistant who tells long stories."}]
    question = {"role": "user", "content": "Tell me how the story ends, in one sentence."}
    have = count(msgs + [question])
    while True:
        pair = [{"role": "user", "content": para(160)}, {"role": "assistant", "content": para(160)}]
        k = count(msgs + pair + [question])
        if k > n:
            break
        msgs += pair
        have = k
    # The rest as one more exchange, trimmed word by word to the count.
    words = [r.choice(WORDS) for _ in range(2 * max(0, n - have) + 16)]
    while True:
        m = msgs + [{"role": "user", "content": " ".join(words) + "."},
                    {"role": "assistant", "content": "Noted."}, question]
        got = count(m)
        if got <= n or len(words) <= 1:
            return m, got
        words = words[:-max(1, (got - n) // 2)]


def turn2(hist, answer):
    return hist + [{"role": "assistant", "content": answer},
                   {"role": "user", "content": NEW_MESSAGE}]


# ---------------------------------------------------------- restart part

def restart_size(a, n, work):
    ctx = a.ctx
    d = tempfile.mkdtemp(prefix=f"n{n}-", dir=work)
    logs = os.path.join(d, "logs")
    os.makedirs(logs)
    state, slots = os.path.join(d, "state"), os.path.join(d, "slots")
    os.makedirs(slots)
    rows, out = {}, {"size": n}

    # Steward turn 1, SIGTERM at once.
    s = steward(a, logs, "steward-turn1", state, ctx, 1)
    hist, counted = history(s.base, n)
    out["history_tokens_counted"] = counted
    t1 = Stream(s.base, hist).run()
    t_end = time.monotonic()
    m = metrics(s.base)
    stop_s = s.stop()
    flushed = re.findall(r"disk cache: flushed writes=(\d+) bytes=(\d+) ms=(\d+)", s.log_text())
    rows["steward turn 1"] = {**t1.result(), "ready_s": s.ready_s, "stop_s": stop_s,
                              "end_to_exit_s": time.monotonic() - t_end,
                              "disk_writes_before_sigterm": m.get("steward_prefix_disk_writes_total"),
                              "flushed": flushed[-1] if flushed else None}
    kv_bytes = sum(os.path.getsize(os.path.join(dd, f))
                   for dd, _, fs in os.walk(os.path.join(state, "kv")) for f in fs
                   if f.endswith(".kv"))
    out["steward_kv_file_bytes"] = kv_bytes
    answer_s = t1.text

    # llama-server turn 1, save, SIGTERM.
    s = llama(a, logs, "llama-turn1", slots, ctx)
    l1 = Stream(s.base, hist).run()
    save, save_wall = post_json(s.base, "/slots/0?action=save", {"filename": "conv.bin"})
    rows["llama turn 1"] = {**l1.result(), "ready_s": s.ready_s, "save": save,
                            "save_wall_s": save_wall, "stop_s": s.stop()}
    answer_l = l1.text

    # A copy of Steward's state for the cold-cache run (dropped from the
    # page cache just before that run).
    cold = os.path.join(d, "state-cold")
    shutil.copytree(state, cold)

    def steward_turn2(label, st, extra=()):
        s = steward(a, logs, label, st, ctx, 1, extra)
        r = Stream(s.base, turn2(hist, answer_s)).run()
        m = metrics(s.base)
        scanned = re.findall(r"disk cache: scanned entries=(\d+)", s.log_text())
        res = {**r.result(), "ready_s": s.ready_s,
               "disk_reads": m.get("steward_prefix_disk_reads_total"),
               "host_restores": m.get("steward_prefix_host_restores_total"),
               "host_restore_s": m.get("steward_prefix_host_seconds_total"),
               "scanned_entries": scanned[-1] if scanned else None}
        res["stop_s"] = s.stop()
        rows[label] = res

    def llama_turn2(label, restore, cold_cache=False):
        s = llama(a, logs, label, slots, ctx)
        res = {"ready_s": s.ready_s}
        if cold_cache:
            res["slot_file_resident_bytes"] = drop_page_cache(os.path.join(slots, "conv.bin"))
        if restore:
            res["restore"], res["restore_wall_s"] = post_json(
                s.base, "/slots/0?action=restore", {"filename": "conv.bin"})
        r = Stream(s.base, turn2(hist, answer_l)).run()
        res.update(r.result())
        if restore and r.ttft is not None:
            res["ttft_incl_restore_s"] = r.ttft + res["restore_wall_s"]
        res["stop_s"] = s.stop()
        rows[label] = res

    steward_turn2("steward disk", state)
    llama_turn2("llama restore", True)
    steward_turn2("steward recompute", os.path.join(d, "state-recompute"),
                  ("--disk-cache-gb", "0"))
    llama_turn2("llama recompute", False)
    out["cold_copy_resident_bytes"] = drop_page_cache(os.path.join(cold, "kv"))
    steward_turn2("steward disk, cold", cold)
    llama_turn2("llama restore, cold", True, cold_cache=True)
    out["rows"] = rows
    out["workdir"] = d
    return out


# --------------------------------------------------------------- itl part

def gaps_in(streams, lo, hi):
    g = []
    for s in streams:
        ts = s.times
        g += [b - a for a, b in zip(ts, ts[1:]) if lo <= b < hi]
    return g


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p * (len(xs) - 1)))))] if xs else None


class Poller:
    """/metrics every 50 ms on its own thread: (time, disk writes, disk
    bytes) samples (the same polling in every arm)."""

    def __init__(self, base):
        self.base, self.samples, self.stop = base, [], threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            m = metrics(self.base)
            self.samples.append((time.monotonic(), m.get("steward_prefix_disk_writes_total", 0),
                                 m.get("steward_prefix_disk_bytes", 0)))
            self.stop.wait(0.05)

    def done(self):
        self.stop.set()
        self.t.join()
        return self

    def write_done(self, t0, writes0, bytes0):
        """(seconds from t0 to the first sample with more writes, bytes added)."""
        for t, w, b in self.samples:
            if t >= t0 and w > writes0:
                return t - t0, b - bytes0
        return None, None


def itl_arm(a, arm, rnd, work, conv):
    flags = {"disk": ("--disk-cache-gb", "4", "--prefix-host-mb", "0"),
             "off": ("--disk-cache-gb", "0", "--prefix-host-mb", "0"),
             "host": ("--disk-cache-gb", "0", "--prefix-host-mb", "512")}[arm]
    d = tempfile.mkdtemp(prefix=f"itl-{arm}-{rnd}-", dir=work)
    s = steward(a, d, "steward", os.path.join(d, "state"), a.itl_ctx, 5, flags)
    res = {"arm": arm, "round": rnd, "flags": " ".join(flags)}
    try:
        hist = conv(s.base)
        m0 = metrics(s.base)
        poll = Poller(s.base)
        l1 = Stream(s.base, hist, max_tokens=4).run()
        res["conv_turn1"] = l1.result()
        t_end = time.monotonic()
        # Its idle write (the disk arm): done within 60 s.
        while time.monotonic() - t_end < (60 if arm == "disk" else 2):
            if poll.samples and poll.samples[-1][1] > m0.get("steward_prefix_disk_writes_total", 0):
                break
            time.sleep(0.05)
        res["idle_write_s"], res["idle_write_bytes"] = poll.done().write_done(
            t_end, m0.get("steward_prefix_disk_writes_total", 0),
            m0.get("steward_prefix_disk_bytes", 0))
        stop = threading.Event()
        # Plain completions: no chat template, so no prompt shares a token
        # with the conversation's (a chat prompt shares the template's
        # opening, and a slot cached with a shared prefix is taken before a
        # free one: the conversation's slot would go to a stream).
        streams = [Stream(s.base, f"Once upon a time there was a ship called number {i}.",
                          max_tokens=1024, extra={"ignore_eos": True}, stop=stop)
                   for i in range(4)]
        threads = [threading.Thread(target=x.run) for x in streams]
        for t in threads:
            t.start()
        poll = Poller(s.base)
        time.sleep(3)
        ma = metrics(s.base)
        l2 = Stream(s.base, turn2(hist, l1.text), max_tokens=4).run()
        mb = metrics(s.base)
        res["conv_turn2"] = l2.result()
        # Where its prefix came from: its own slot (neither), or a tier.
        res["conv_turn2"].update({k: mb.get(f"steward_prefix_{k}_total", 0)
                                  - ma.get(f"steward_prefix_{k}_total", 0)
                                  for k in ("host_restores", "disk_reads", "host_spills")})
        time.sleep(a.window)
        m1 = metrics(s.base)
        w1 = m1.get("steward_prefix_disk_writes_total", 0)
        t_x = time.monotonic()
        x = Stream(s.base, "Three colours of the rainbow are", max_tokens=8,
                   extra={"timings": True})
        xt = threading.Thread(target=x.run)
        xt.start()
        time.sleep(a.window)
        stop.set()
        xt.join()
        for t in threads:
            t.join()
        t_end = time.monotonic()
        while arm == "disk" and time.monotonic() - t_end < 60 and not (
                poll.samples and poll.samples[-1][1] > w1):
            time.sleep(0.05)
        poll.done()
        res["evict_write_s"], res["evict_write_bytes"] = poll.write_done(
            t_x, w1, m1.get("steward_prefix_disk_bytes", 0))
        m2 = metrics(s.base)
        res["x"] = x.result()
        res["spills"] = m2.get("steward_prefix_host_spills_total", 0) - m1.get(
            "steward_prefix_host_spills_total", 0)
        res["disk_writes"] = m2.get("steward_prefix_disk_writes_total", 0) - w1
        res["disk_write_drops"] = m2.get("steward_prefix_disk_write_drops_total", 0)
        before = gaps_in(streams, t_x - a.window, t_x)
        after = gaps_in(streams, t_x, t_x + a.window)
        res["gaps_before_ms"] = [round(g * 1e3, 2) for g in before]
        res["gaps_after_ms"] = [round(g * 1e3, 2) for g in after]
        # The gaps over 100 ms after the new prompt: (ms after it was sent
        # that the gap ended, the gap in ms).
        res["long_gaps_after"] = sorted(
            (round((b - t_x) * 1e3), round((b - a0) * 1e3)) for x in streams
            for a0, b in zip(x.times, x.times[1:]) if t_x <= b < t_x + a.window and b - a0 > 0.1)
        res["stream_errors"] = [x.error for x in streams if x.error]
    finally:
        res["stop_s"] = s.stop()
        res["log"] = s.log_path
    # The files left (the budget deletes an entry another covers): the
    # evicted conversation's is the one of most tokens (`KEY-TOKENS.kv`).
    kv = {f: os.path.getsize(os.path.join(dd, f))
          for dd, _, fs in os.walk(os.path.join(d, "state", "kv")) for f in fs if f.endswith(".kv")}
    res["kv_files"] = kv
    if kv and arm == "disk":
        res["evict_write_bytes"] = kv[max(kv, key=lambda f: int(f[:-3].split("-")[-1]))]
    return res


def itl_part(a, work):
    cache = {}

    def conv(base):
        if "h" not in cache:
            cache["h"] = history(base, a.itl_history, seed=11)
        return cache["h"][0]

    order = a.arms.split(",")
    runs = []
    for rnd in range(a.rounds):
        for arm in (order if rnd % 2 == 0 else order[::-1]):
            r = itl_arm(a, arm, rnd, work, conv)
            print(f"  itl {arm} round {rnd}: before p50 {q(r['gaps_before_ms'], .5)} "
                  f"max {max(r['gaps_before_ms'] or [0])}; after p50 {q(r['gaps_after_ms'], .5)} "
                  f"max {max(r['gaps_after_ms'] or [0])}; x ttft {r['x']['ttft_s']}; "
                  f"spills {r['spills']} writes {r['disk_writes']} "
                  f"write {r.get('evict_write_s')} s {r.get('evict_write_bytes')} B", flush=True)
            runs.append(r)
    return {"history_tokens": cache.get("h", (None, None))[1], "runs": runs}


# ------------------------------------------------------------------ report

def fmt_s(x, nd=2):
    return "—" if x is None else f"{x:,.{nd}f}"


def report(res):
    for part in res.get("restart", []):
        n = part["size"]
        print(f"\nhistory {n} (counted {part['history_tokens_counted']}), "
              f"Steward kv file {part['steward_kv_file_bytes']:,} B")
        print("| run | prompt tokens | cached tokens | TTFT (s) | TTFT incl. restore (s) "
              "| restore call (s) | start→ready (s) | stop (s) |")
        print("|---|---|---|---|---|---|---|---|")
        for k, r in part["rows"].items():
            print(f"| {k} | {r.get('prompt_tokens')} | {r.get('cached_tokens')} "
                  f"| {fmt_s(r.get('ttft_s'), 3)} | {fmt_s(r.get('ttft_incl_restore_s'), 3)} "
                  f"| {fmt_s(r.get('restore_wall_s'), 3)} | {fmt_s(r.get('ready_s'))} "
                  f"| {fmt_s(r.get('stop_s'))} |")
    itl = res.get("itl")
    if itl:
        print(f"\nitl: conversation of {itl['history_tokens']} tokens")
        print("| arm | round | gap p50 before (ms) | gap max before (ms) | gap p50 after (ms) "
              "| gap p99 after | gap max after (ms) | new prompt TTFT (s) | write (s) | bytes |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in itl["runs"]:
            b, f = r["gaps_before_ms"], r["gaps_after_ms"]
            print(f"| {r['arm']} | {r['round']} | {q(b, .5)} | {max(b or [0])} | {q(f, .5)} "
                  f"| {q(f, .99)} | {max(f or [0])} | {fmt_s(r['x']['ttft_s'], 3)} "
                  f"| {fmt_s(r.get('evict_write_s'), 3)} | {r.get('evict_write_bytes')} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steward", default="target/release/steward")
    p.add_argument("--llama-server", default="/tmp/peers/llama-server")
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--parts", default="restart,itl")
    p.add_argument("--sizes", default="2000,8000,32000")
    p.add_argument("--ctx", type=int, default=34000)
    p.add_argument("--itl-history", type=int, default=8000)
    p.add_argument("--itl-ctx", type=int, default=8192)
    p.add_argument("--window", type=float, default=4.0)
    p.add_argument("--rounds", type=int, default=2, help="rounds of the itl part")
    p.add_argument("--arms", default="disk,off,host", help="arms of the itl part, in order")
    p.add_argument("--work", default=None,
                   help="folder for the state directories and logs (default: a new one in $TMPDIR)")
    p.add_argument("--quiet-limit", type=float, default=2400,
                   help="most seconds waited for quiet, in all (then runs go on regardless)")
    p.add_argument("--out", default="target/bench/restart/result.json")
    p.add_argument("--report", action="store_true", help="print the tables of --out again")
    a = p.parse_args()
    if a.report:
        with open(a.out) as f:
            report(json.load(f))
        return
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    work = tempfile.mkdtemp(prefix="bench-restart-", dir=a.work)
    res = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
           "argv": sys.argv, "workdir": work, "restart": []}

    def save():
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)

    def pin_binary():
        """At the first quiet moment: a copy of --steward for every run (a
        build elsewhere may replace the file meanwhile)."""
        if "steward_binary" not in res:
            src = a.steward
            a.steward = os.path.join(work, os.path.basename(src))
            shutil.copy2(src, a.steward)
            sha = subprocess.run(["sha256sum", a.steward], capture_output=True, text=True)
            res["steward_binary"] = {"from": src, "mtime": time.strftime(
                "%Y-%m-%d %H:%M:%S UTC", time.gmtime(os.path.getmtime(src))),
                "sha256": sha.stdout.split()[0] if sha.stdout else None}

    quiet_deadline = time.monotonic() + a.quiet_limit

    def quiet():
        return wait_quiet(max(0.0, quiet_deadline - time.monotonic()))

    parts = a.parts.split(",")
    if "restart" in parts:
        for n in [int(x) for x in a.sizes.split(",")]:
            waited, gave_up = quiet()
            print(f"restart {n}: waited {waited:.0f} s for quiet"
                  + (" (gave up: a build overlaps)" if gave_up else ""), flush=True)
            pin_binary()
            w = BuildWatch()
            t0 = time.gmtime()
            r = restart_size(a, n, work)
            r.update(quiet_wait_s=waited, quiet_gave_up=gave_up, host=w.done(),
                     at=time.strftime("%H:%M:%S", t0) + "–" + time.strftime("%H:%M:%S UTC",
                                                                           time.gmtime()))
            res["restart"].append(r)
            save()
            report({"restart": [r]})
    if "itl" in parts:
        waited, gave_up = quiet()
        print(f"itl: waited {waited:.0f} s for quiet" + (" (gave up)" if gave_up else ""),
              flush=True)
        pin_binary()
        w = BuildWatch()
        t0 = time.gmtime()
        res["itl"] = itl_part(a, work)
        res["itl"].update(quiet_wait_s=waited, quiet_gave_up=gave_up, host=w.done(),
                          at=time.strftime("%H:%M:%S", t0) + "–"
                          + time.strftime("%H:%M:%S UTC", time.gmtime()))
        save()
    res["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    save()
    report(res)
    print(f"\nresults: {a.out}; logs and state under {work}")


if __name__ == "__main__":
    main()
