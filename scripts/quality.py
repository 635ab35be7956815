"""Weight-format quality on record ([9/9]), through Steward's own API.

For each server URL given (one per format), measures
  1. the mean token log-probability of a fixed text of >= 2,000 tokens
     (the first 12,000 characters of /usr/share/common-licenses/GPL-3, a
     Debian base file) via /v1/completions echo + logprobs, max_tokens 0;
  2. greedy continuations (32 tokens) of 50 fixed chat prompts.
Then reports, for every format after the first (the reference), the mean
logprob and the greedy agreement with the reference: prompts whose whole
continuation is identical, and the mean share of leading tokens that agree.

usage: quality.py NAME=URL [NAME=URL ...]   (stdlib only)
"""
import json
import sys
import urllib.request

TOPICS = [
    "the moon", "bread", "rivers", "volcanoes", "chess", "bees", "the ocean", "trains",
    "coffee", "winter", "libraries", "gardens", "bicycles", "clouds", "music", "bridges",
    "deserts", "owls", "glass", "maps", "tea", "forests", "lighthouses", "salt", "kites",
    "islands", "clocks", "paper", "snow", "wolves", "cheese", "stars", "rain", "horses",
    "cities", "mountains", "rice", "whales", "candles", "photography", "the alphabet",
    "honey", "autumn", "castles", "typewriters", "penguins", "thunder", "markets", "tides",
    "mathematics",
]


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def measure(base):
    text = open("/usr/share/common-licenses/GPL-3", encoding="utf-8").read()[:12000]
    r = post(f"{base}/v1/completions", {"prompt": text, "max_tokens": 0, "echo": True, "logprobs": 0})
    lps = [x for x in r["choices"][0]["logprobs"]["token_logprobs"] if x is not None]
    greedy = []
    for t in TOPICS:
        g = post(f"{base}/v1/chat/completions", {
            "messages": [{"role": "user", "content": f"Write two sentences about {t}."}],
            "max_tokens": 32, "temperature": 0, "logprobs": True,
        })
        greedy.append([c["token"] for c in g["choices"][0]["logprobs"]["content"]])
    return {"scored_tokens": len(lps), "mean_logprob": sum(lps) / len(lps), "greedy": greedy}


def main():
    runs = [a.split("=", 1) for a in sys.argv[1:]]
    results = {name: measure(url) for name, url in runs}
    ref_name = runs[0][0]
    ref = results[ref_name]
    out = {}
    for name, r in results.items():
        same = sum(1 for a, b in zip(r["greedy"], ref["greedy"]) if a == b)
        prefix = []
        for a, b in zip(r["greedy"], ref["greedy"]):
            n = 0
            while n < min(len(a), len(b)) and a[n] == b[n]:
                n += 1
            prefix.append(n / max(len(b), 1))
        out[name] = {
            "scored_tokens": r["scored_tokens"],
            "mean_logprob": round(r["mean_logprob"], 4),
            "greedy_identical_prompts": f"{same}/{len(TOPICS)}",
            "greedy_leading_agreement": round(sum(prefix) / len(prefix), 3),
        }
        print(f"{name:10} mean logprob {r['mean_logprob']:.4f} over {r['scored_tokens']} tokens | "
              f"greedy identical to {ref_name}: {same}/{len(TOPICS)} | leading-token agreement {sum(prefix)/len(prefix):.3f}")
    json.dump(out, sys.stdout if False else open("/dev/null", "w"))
    return out


if __name__ == "__main__":
    main()
