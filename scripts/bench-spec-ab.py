#!/usr/bin/env python3
"""Speculation at one stream, measured per request on the server's side:
edit prompts (replace one word in ~200 tokens of prose; the answer copies
its input), each sent to every (server, mode) arm in turn, the order
reversed on every other prompt (A B C D, D C B A: a drift in the host's
speed lands on every arm alike). Prints each arm's decode tokens/s
(`timings.decode_tokens_per_s`: TTFT left out), request time and drafts.

    bench-spec-ab.py PORTS REPS [SEED] [TEMPERATURE]
    # e.g. two Steward binaries on 8441 and 8442 (--served-model-name m):
    bench-spec-ab.py 8441,8442 10
"""
import json
import random
import statistics as st
import sys
import urllib.request

ports = [int(p) for p in sys.argv[1].split(",")]
reps = int(sys.argv[2])
random.seed(int(sys.argv[3]) if len(sys.argv) > 3 else 7)
temp = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
nouns = ("river garden window market teacher engine bridge island letter forest doctor "
         "station library harbor kitchen village").split()
adjs = "old quiet bright small large warm cold green busy narrow".split()
verbs = "opens closes waits changes grows moves stands returns".split()
places = ["near the road", "after the rain", "in the morning", "by the old wall", "before noon"]


def prose(n):
    return " ".join(
        f"The {random.choice(adjs)} {random.choice(nouns)} {random.choice(verbs)} {random.choice(places)}."
        for _ in range(n))


arms = [(p, m) for p in ports for m in ("off", "ngram")]
res = {a: [] for a in arms}
for i in range(reps):
    prompt = (f"Replace the word \"{random.choice(nouns)}\" with \"{random.choice(nouns)}\" everywhere in "
              f"the text below and change nothing else. Answer with the whole text.\n\n{prose(22)}")
    for port, mode in arms if i % 2 == 0 else arms[::-1]:
        body = {"model": "m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 128,
                "temperature": temp, "seed": i, "ignore_eos": True, "timings": True,
                "speculative": {"mode": mode}}
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                     data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
        t = json.load(urllib.request.urlopen(req, timeout=600))["timings"]
        res[(port, mode)].append((t["decode_tokens_per_s"], t["retired_ms"], t["draft_tokens"],
                                  t["draft_accepted"]))
for (port, mode), v in res.items():
    col = lambda k: [x[k] for x in v]  # noqa: E731
    print(f"{port} {mode}: decode tok/s mean {st.mean(col(0)):.1f} median {st.median(col(0)):.1f} | "
          f"request ms {st.mean(col(1)):.0f} | drafted {st.mean(col(2)):.1f} accepted {st.mean(col(3)):.1f}")
