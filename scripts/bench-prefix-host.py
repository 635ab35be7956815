"""[6/8] host tier of the prefix cache: a returning conversation whose KV state
was evicted from the slots, with the host tier on and off.

Against one `steward serve` (pass its base URL): K conversations, each with
its own ~1,500-token history, more than the server has slots; each round asks
every conversation one more short question, round-robin, so every turn finds
its own history evicted from the slots by the others. Prints the TTFT and the
prompt tokens computed (prompt - cached) per turn after the first round.
Usage: bench-prefix-host.py URL [K] [ROUNDS]
"""
import json
import statistics
import sys
import time
import urllib.request

url = sys.argv[1].rstrip("/")
K = int(sys.argv[2]) if len(sys.argv) > 2 else 4
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3

TOPICS = ["the harbour", "the mountain railway", "the old observatory", "the river mill",
          "the desert caravan", "the glacier station", "the forest school", "the island ferry"]


def history(i):
    t = TOPICS[i % len(TOPICS)]
    para = (f"This is the log of {t}, number {i}. Every day the keeper of {t} writes down the weather, "
            f"the visitors, the repairs and the small events that make up life at {t}. ")
    return para * 30


def ask(messages):
    body = json.dumps({"messages": messages, "max_tokens": 8, "temperature": 0, "timings": True}).encode()
    req = urllib.request.Request(url + "/v1/chat/completions", body, {"content-type": "application/json"})
    t0 = time.perf_counter()
    v = json.load(urllib.request.urlopen(req, timeout=600))
    wall = (time.perf_counter() - t0) * 1e3
    u = v["usage"]
    return v["choices"][0]["message"]["content"], v["timings"]["first_token_ms"], \
        u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"], wall


convs = [[{"role": "system", "content": history(i)}] for i in range(K)]
ttft, computed = [], []
for r in range(ROUNDS):
    for i, c in enumerate(convs):
        c.append({"role": "user", "content": f"Question {r}: what happened on day {r + 1}?"})
        text, first_ms, prompt, cached, _ = ask(c)
        c.append({"role": "assistant", "content": text})
        if r > 0:
            ttft.append(first_ms)
            computed.append(prompt - cached)
        print(f"round {r} conv {i}: prompt {prompt} cached {cached} ttft {first_ms:.0f} ms", file=sys.stderr)
print(json.dumps({
    "turns": len(ttft),
    "ttft_ms_mean": statistics.mean(ttft), "ttft_ms_p50": statistics.median(ttft),
    "prompt_tokens_computed_mean": statistics.mean(computed),
}))
