#!/usr/bin/env python3
"""[7/8] KV-cache events: a subscriber of our own (pyzmq + msgpack, nothing
of Steward's) reads `--kv-events` as llm-d's KV indexer does and checks
them against the server's cell map.

  - every message is three frames: topic `kv@<pod>@<model>`, an 8-byte
    big-endian sequence number counting up by one, a msgpack batch
    `[ts, [event, ...]]` with vLLM's array-like events (BlockStored with 7
    fields, BlockRemoved with 3, AllBlocksCleared with 1);
  - the set of blocks the events describe equals the set recomputed from
    /debug/cells (each slot's tokens, cut into 64-token blocks, hashed as
    docs/DEPLOY.md says), after every request of a run that fills the
    cache and evicts from it, with prompts sharing a prefix;
  - each BlockStored's parent is a block already stored, its token_ids are
    the block's tokens, block_size 64;
  - the disk tier's blocks (idle slots' conversations written between
    requests) arrive as medium DISK, each a block the cells held;
  - unloading the model (POST /admin/models/NAME/unload) ends with
    AllBlocksCleared.

Usage: kv_events_check.py STEWARD_BINARY
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time

import msgpack
import zmq

from checklib import failures, free_port, ok
from checklib import http as _http

B = 64
KEY = "kv-events-check-key"


def http(url, body=None, timeout=120, method=None):
    return _http(url, body, {"authorization": f"Bearer {KEY}"}, timeout, method)


class Subscriber:
    """The indexer's view: block hash -> (parent, tokens)."""

    def __init__(self, endpoint):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"kv@")
        self.sock.connect(endpoint)
        self.blocks = {}
        self.disk = {}  # medium DISK: the disk tier's blocks
        self.seqs = []
        self.topics = set()
        self.kinds = {}
        self.errors = []
        self.lock = threading.Lock()
        self.stop = False
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not self.stop:
            if not poller.poll(100):
                continue
            parts = self.sock.recv_multipart()
            with self.lock:
                self.handle(parts)

    def handle(self, parts):
        if len(parts) != 3 or len(parts[1]) != 8:
            self.errors.append(f"frames: {[len(p) for p in parts]}")
            return
        topic, seq, payload = parts
        self.topics.add(topic.decode())
        self.seqs.append(struct.unpack(">Q", seq)[0])
        if topic != b"kv@replica-a@smol":
            return
        batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        if not (isinstance(batch, list) and len(batch) in (2, 3) and isinstance(batch[0], float)):
            self.errors.append(f"batch layout: {str(batch)[:80]}")
            return
        for ev in batch[1]:
            kind = ev[0]
            self.kinds[kind] = self.kinds.get(kind, 0) + 1
            if kind == "BlockStored":
                if len(ev) != 7:
                    self.errors.append(f"BlockStored has {len(ev)} fields")
                    continue
                _, hashes, parent, tokens, block_size, lora_id, medium = ev
                if block_size != B or len(tokens) != B * len(hashes) or medium not in ("CPU", "GPU", "DISK"):
                    self.errors.append(f"BlockStored fields: size {block_size}, {len(tokens)} tokens, medium {medium}")
                blocks = self.disk if medium == "DISK" else self.blocks
                if parent is not None and parent not in blocks:
                    self.errors.append(f"parent {parent} not stored ({medium})")
                p = parent
                for i, h in enumerate(hashes):
                    if h in blocks:
                        self.errors.append(f"block {h} stored twice ({medium})")
                    blocks[h] = (p, tokens[i * B:(i + 1) * B])
                    p = h
            elif kind == "BlockRemoved":
                if len(ev) != 3:
                    self.errors.append(f"BlockRemoved has {len(ev)} fields")
                blocks = self.disk if ev[2] == "DISK" else self.blocks
                for h in ev[1]:
                    if blocks.pop(h, None) is None:
                        self.errors.append(f"block {h} removed, never stored ({ev[2]})")
            elif kind == "AllBlocksCleared":
                self.blocks.clear()
                self.disk.clear()
            else:
                self.errors.append(f"unknown event {kind}")

    def view(self):
        with self.lock:
            return dict(self.blocks)


def block_hash(parent, key, tokens):
    """docs/DEPLOY.md: the first 8 bytes (little-endian) of SHA-256 over the
    parent's hash, the prefix identity (3 x u64) and the token IDs (i32),
    all little-endian."""
    h = hashlib.sha256()
    h.update(struct.pack("<Q", parent))
    h.update(struct.pack("<3Q", *key))
    h.update(struct.pack(f"<{len(tokens)}i", *tokens))
    return struct.unpack("<Q", h.digest()[:8])[0]


def cell_blocks(base):
    """Each slot's (identity, its full blocks), from /debug/cells."""
    st, text = http(base + "/debug/cells")
    assert st == 200, text
    m = json.loads(text)
    assert m["block_tokens"] == B
    out = []
    for slot in m["models"]["smol"]["slots"]:
        t = slot["tokens"]
        out.append((slot["key"], [t[i:i + B] for i in range(0, len(t) - len(t) % B, B)]))
    return out


def expected(chains):
    want = {}
    for key, chain in chains:
        parent = 0
        for toks in chain:
            h = block_hash(parent, key, toks)
            want[h] = (None if parent == 0 else parent, toks)
            parent = h
    return want


def settle(sub, want_keys, secs=5.0):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if set(sub.view()) == want_keys:
            return True
        time.sleep(0.05)
    return set(sub.view()) == want_keys


def main():
    steward = sys.argv[1]
    d = tempfile.mkdtemp(prefix="steward-kv-")
    port, kport = free_port(), free_port()
    ep = f"tcp://127.0.0.1:{kport}"
    log = os.path.join(d, "serve.log")
    # Two slots, so a third conversation evicts; the prefix cache on. A
    # second model, so that the first can be unloaded.
    path = subprocess.run([steward, "fetch-model"], capture_output=True, text=True, check=True).stdout.strip()
    srv = subprocess.Popen(
        [steward, "serve", "--port", str(port), "--model", f"smol={path}", "--model", f"other={path}",
         "--max-seqs", "2",
         "--ctx-per-seq", "1024", "--threads", "2", "--kv-events", ep, "--kv-events-topic", "kv@replica-a@{model}",
         "--api-key", KEY, "--state-dir", os.path.join(d, "state")],
        stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1800):
            if srv.poll() is not None:
                raise SystemExit(f"serve exited {srv.returncode}; see {log}")
            if http(base + "/ready", timeout=2)[0] == 200:
                break
            time.sleep(0.1)
        sub = Subscriber(ep)
        time.sleep(0.5)  # ZeroMQ's slow joiner: subscribe before the traffic
        system = "You are a careful assistant. " + " ".join(f"Fact {i}: the sky is blue." for i in range(30))
        prompts = [
            [{"role": "system", "content": system}, {"role": "user", "content": "Question one?"}],
            [{"role": "system", "content": system}, {"role": "user", "content": "Question two?"}],
            [{"role": "user", "content": "Another topic entirely. " * 20}],
            [{"role": "system", "content": system}, {"role": "user", "content": "Question one?"}],
            [{"role": "user", "content": "A third topic, long enough for blocks. " * 16}],
        ]
        cpu_seen = set()
        for i, msgs in enumerate(prompts):
            st, text = http(base + "/v1/chat/completions",
                            {"model": "smol", "messages": msgs, "max_tokens": 8, "temperature": 0})
            ok(st == 200, f"request {i} answered")
            chains = cell_blocks(base)
            want = expected(chains)
            same = settle(sub, set(want))
            view = sub.view()
            cpu_seen.update(view)
            ok(same, f"after request {i}: the events' blocks equal the cell map's "
                     f"({len(view)} vs {len(want)} blocks, {sum(len(c) for _, c in chains)} in slots)")
            ok(all(view[h][1] == want[h][1] and view[h][0] == want[h][0] for h in want if h in view),
               f"after request {i}: each block's tokens and parent match")
        with sub.lock:
            kinds, errors, seqs, topics = dict(sub.kinds), list(sub.errors), list(sub.seqs), set(sub.topics)
        ok(kinds.get("BlockStored", 0) > 0 and kinds.get("BlockRemoved", 0) > 0,
           f"both kinds seen under eviction ({kinds})")
        ok(not errors, f"no malformed or inconsistent event ({errors[:3]})")
        # The idle slots' conversations went to the disk tier between
        # requests: their blocks, medium DISK, each within a chain the
        # cells held (the same hashes).
        end = time.monotonic() + 60
        while time.monotonic() < end and not sub.disk:
            time.sleep(0.05)
        with sub.lock:
            disk = dict(sub.disk)
        ok(disk and all(h in cpu_seen for h in disk),
           f"the disk tier's blocks reported as medium DISK ({len(disk)}), each one the cells held")
        ok(seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else False,
           f"sequence numbers count up by one ({seqs[:3]}…{seqs[-1:]})")
        ok("kv@replica-a@smol" in topics and all(t.startswith("kv@replica-a@") for t in topics),
           f"topic kv@<pod>@<model>, one per loaded model ({topics})")
        # Unloading: everything cleared.
        before = sub.kinds.get("AllBlocksCleared", 0)
        st, text = http(base + "/admin/models/smol/unload", {}, method="POST")
        end = time.monotonic() + 10
        while time.monotonic() < end and sub.kinds.get("AllBlocksCleared", 0) == before:
            time.sleep(0.05)
        ok(sub.kinds.get("AllBlocksCleared", 0) > before and not sub.view(),
           f"unload (status {st}) ends with AllBlocksCleared and an empty view")
        sub.stop = True
    finally:
        srv.terminate()
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()
    if failures:
        print(f"kv_events_check: {len(failures)} failed; log in {log}")
        sys.exit(1)
    print("kv_events_check: all passed")


if __name__ == "__main__":
    main()
