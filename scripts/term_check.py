#!/usr/bin/env python3
"""The terminal clients, driven as a person would, in tmux, against a real
`steward serve` (the default model):

  (a) `steward top URL` (the key from STEWARD_API_KEY) lists a running
      request: a long streamed request of our own, with our `x-request-id`,
      appears in the pane (`tmux capture-pane`; the snapshot is printed and
      kept in target/term-check-top.txt) with its state; `q` quits and
      leaves the shell's screen (exit status 0);
  (b) `steward chat URL --api-key K`: a question typed (`send-keys`) is
      answered, streamed, and the prompt comes back; a second question is
      sent with the first turn (the server's prompt tokens for it exceed
      the first request's by at least half the first answer's tokens); a
      third asks for a long answer (`/set max_tokens 2000`, `/set ignore_eos
      true`), and C-c while it streams cancels it on the server
      (steward_requests_cancelled_total moves) and brings the prompt back;
      the stopped turn is not kept (`/show`: 2 turns); `/bye` exits 0.

Skips (exit 0) when tmux is missing.

Usage: term_check.py STEWARD_BINARY
"""
import http.client as httpclient
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from checklib import failures, free_port, ok, stop
from checklib import http as _http

KEY = "term-check-key"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def http(url, body=None, timeout=60):
    return _http(url, body, {"authorization": f"Bearer {KEY}"}, timeout)


def metric(base, name):
    """A counter summed over its series (every model's)."""
    st, text = http(base + "/metrics")
    assert st == 200, f"/metrics: {st} {text[:200]}"
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def until(cond, deadline_s, step=0.1):
    """Poll `cond` until it returns something true; that value, or None."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(step)
    return None


class Tmux:
    """A tmux server of this process's own (its socket name carries the
    pid), no user configuration."""

    def __init__(self):
        self.sock = f"steward-term-{os.getpid()}"

    def run(self, *args, check=True):
        return subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null", *args],
                              capture_output=True, text=True, check=check)

    def new(self, name, cmd, w=120, h=45):
        self.run("new-session", "-d", "-s", name, "-x", str(w), "-y", str(h), cmd)

    def pane(self, name, history=False):
        args = ["capture-pane", "-p", "-t", name] + (["-S", "-"] if history else [])
        return self.run(*args).stdout

    def keys(self, name, *keys):
        self.run("send-keys", "-t", name, *keys)

    def type(self, name, text):
        self.run("send-keys", "-t", name, "-l", text)
        self.run("send-keys", "-t", name, "Enter")

    def close(self):
        self.run("kill-server", check=False)


class Stream(threading.Thread):
    """A long streamed chat completion, read until `stop`; then its
    connection closes (the server cancels it)."""

    def __init__(self, port, rid):
        super().__init__(daemon=True)
        self.port, self.rid = port, rid
        self.stop = threading.Event()
        self.chunks = 0
        self.status = None

    def run(self):
        c = httpclient.HTTPConnection("127.0.0.1", self.port, timeout=60)
        body = ('{"model":"smol","messages":[{"role":"user","content":"Tell me a long story."}],'
                '"max_tokens":2000,"ignore_eos":true,"stream":true}')
        c.request("POST", "/v1/chat/completions", body,
                  {"content-type": "application/json", "authorization": f"Bearer {KEY}",
                   "x-request-id": self.rid})
        r = c.getresponse()
        self.status = r.status
        while not self.stop.is_set():
            line = r.fp.readline()
            if not line:
                break
            self.chunks += line.startswith(b"data:")
        c.close()


def check_top(tm, steward, base, port):
    rid = f"term-check-{os.getpid()}"
    s = Stream(port, rid)
    s.start()
    tm.new("top", f"STEWARD_API_KEY={KEY} {steward} top {base}; echo TOP-EXIT=$?; sleep 600", h=32)
    listed = until(lambda: (lambda p: p if rid in p and "decoding" in p else None)(tm.pane("top")), 90)
    pane = listed or tm.pane("top")
    snap = os.path.join(ROOT, "target", "term-check-top.txt")
    os.makedirs(os.path.dirname(snap), exist_ok=True)
    with open(snap, "w") as f:
        f.write(pane)
    print(f"--- steward top, as tmux shows it ({snap}):\n{pane.rstrip()}\n---", flush=True)
    ok(s.status == 200 and s.chunks > 0, f"the long request streams (status {s.status}, {s.chunks} chunks)")
    ok(listed is not None, f"steward top lists the running request {rid}, decoding")
    ok(all(w in pane for w in ("Models", "smol", "Ledger", "weights", "Steps")),
       "the frame shows the models, the ledger and the steps")
    tm.keys("top", "q")
    done = until(lambda: "TOP-EXIT=" in tm.pane("top"), 20)
    ok(done and "TOP-EXIT=0" in tm.pane("top"), "q quits top with status 0, back to the shell's screen")
    s.stop.set()
    s.join(30)
    # Its cancel is counted before the chat's baseline is read.
    ok(until(lambda: metric(base, "steward_requests_cancelled_total") >= 1, 30),
       "the long request, closed, is cancelled")


def lines(pane):
    return [ln.rstrip() for ln in pane.splitlines()]


def answered(tm, text):
    """The pane once the reply to `text` ended (the prompt came back)."""
    def back():
        ls = lines(tm.pane("chat", history=True))
        asked = [i for i, ln in enumerate(ls) if ln == f">>> {text}"]
        if asked and any(ln == ">>>" for ln in ls[asked[-1] + 1:]):
            return ls[asked[-1] + 1:]
        return None
    return until(back, 90)


def streaming(tm, text):
    """The reply to `text` has begun (20 characters of it shown)."""
    def begun():
        ls = lines(tm.pane("chat", history=True))
        asked = [i for i, ln in enumerate(ls) if ln == f">>> {text}"]
        return asked and len("".join(ls[asked[-1] + 1:]).strip()) >= 20
    return until(begun, 90, step=0.05)


def check_chat(tm, steward, base):
    tm.new("chat", f"{steward} chat {base} --api-key {KEY}; echo CHAT-EXIT=$?; sleep 600", h=60)
    ok(until(lambda: any(ln == ">>>" for ln in lines(tm.pane("chat"))), 30), "chat shows its prompt")
    for cmd in ("/set max_tokens 40", "/set temperature 0"):
        tm.type("chat", cmd)
        answered(tm, cmd)
    p0, g0 = metric(base, "vllm:prompt_tokens_total"), metric(base, "steward_generation_tokens_total")
    q1 = "My name is Alice and my favourite colour is green. Say hello to me."
    tm.type("chat", q1)
    a1 = answered(tm, q1)
    reply = "\n".join(a1 or []).replace(">>>", "").strip()
    ok(a1 is not None and reply, f"the first question is answered, streamed: {reply[:80]!r}")
    p1, g1 = metric(base, "vllm:prompt_tokens_total"), metric(base, "steward_generation_tokens_total")
    q2 = "What is my name?"
    tm.type("chat", q2)
    ok(answered(tm, q2) is not None, "the second question is answered")
    p2 = metric(base, "vllm:prompt_tokens_total")
    first, second, gen = p1 - p0, p2 - p1, g1 - g0
    ok(gen > 0 and second > first + gen // 2,
       f"the second request carries the first turn: {second:.0f} prompt tokens against "
       f"{first:.0f} for the first, whose answer was {gen:.0f} tokens")
    for cmd in ("/set max_tokens 2000", "/set ignore_eos true"):
        tm.type("chat", cmd)
        answered(tm, cmd)
    c0 = metric(base, "steward_requests_cancelled_total")
    q3 = "Write a very long story about a lighthouse keeper."
    tm.type("chat", q3)
    ok(streaming(tm, q3), "the long answer streams")
    tm.keys("chat", "C-c")
    moved = until(lambda: metric(base, "steward_requests_cancelled_total") > c0, 30)
    ok(moved, f"C-c during the stream cancels it on the server (cancelled {c0:.0f} -> "
              f"{metric(base, 'steward_requests_cancelled_total'):.0f})")
    after = answered(tm, q3)
    ok(after is not None and any("[stopped" in ln for ln in after), "the prompt comes back, the reply marked stopped")
    tm.type("chat", "/show")
    shown = answered(tm, "/show")
    ok(shown is not None and any("conversation: 2 turns" in ln for ln in shown),
       "the stopped turn is not kept (/show: 2 turns)")
    tm.type("chat", "/bye")
    ok(until(lambda: "CHAT-EXIT=0" in tm.pane("chat", history=True), 20), "/bye exits with status 0")
    print("--- steward chat, as tmux shows it:\n" + tm.pane("chat", history=True).rstrip() + "\n---")


def main():
    if shutil.which("tmux") is None:
        print("term_check: SKIPPED: tmux is missing (Debian: apt-get install tmux)")
        return
    steward = os.path.abspath(sys.argv[1])
    d = tempfile.mkdtemp(prefix="steward-term-")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = os.path.join(d, "serve.log")
    path = subprocess.run([steward, "fetch-model"], capture_output=True, text=True, check=True).stdout.strip()
    srv = subprocess.Popen(
        [steward, "serve", "--port", str(port), "--model", f"smol={path}", "--max-seqs", "2",
         "--ctx-per-seq", "3072", "--threads", "1", "--api-key", KEY, "--state-dir", "none"],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    tm = Tmux()
    try:
        for _ in range(1800):
            if srv.poll() is not None:
                raise SystemExit(f"serve exited {srv.returncode}; see {log}")
            if http(base + "/ready", timeout=2)[0] == 200:
                break
            time.sleep(0.1)
        check_top(tm, steward, base, port)
        check_chat(tm, steward, base)
    finally:
        tm.close()
        stop(srv)
    if failures:
        print(f"term_check: {len(failures)} failed; server log in {log}")
        sys.exit(1)
    print("term_check: all passed")


if __name__ == "__main__":
    main()
