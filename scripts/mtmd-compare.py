#!/usr/bin/env python3
"""Image chat through Steward and through llama.cpp's llama-server: the same greedy tokens?

Usage: scripts/mtmd-compare.py --steward URL --llama URL IMG.png [IMG ...]
           [--prompt TEXT] [--max-tokens 8] [--top 5] [--tie 0.05] [--max-dlogprob 0.05] [--exact]

Both servers must run the same text model and the same mmproj (llama-server:
`llama-server -m MODEL --mmproj PROJ --port P`, built outside this repository). Each image
goes as one OpenAI chat request, the same body to both:
  messages=[{"role":"user","content":[{"type":"text","text":PROMPT},
             {"type":"image_url","image_url":{"url":"data:image/png;base64,..."}}]}],
  temperature 0, max_tokens 8, logprobs true, top_logprobs 5
(llama-server also gets "cache_prompt": false, its own field, so it computes afresh).
Both apply the model's chat template to the same messages, so the prompts should match;
usage.prompt_tokens (text + image tokens) must be equal on both sides.

The verdict follows the project's rule for runs computed in different shapes
(crates/engine/src/compare.rs, docs/TESTING.md): llama-server is the reference; the runs may
part only at a token where the reference's top two were within --tie nats (0.05, TIE_NATS)
and Steward took the reference's runner-up; nothing after a parting is compared. Before it,
each chosen token's logprob and every top-logprob entry that both rows list must agree
within --max-dlogprob (0.05: the cross-state bound scripts/test.sh gives swa-check.py;
crates/server/tests/it/http.rs allows 0.25 between prompt-scoring and decode kernels).
--exact demands identical tokens and logprobs (the same server twice, or one build against
itself). Prints one verdict line per image; exits 1 on any mismatch, 2 on a request error.
Standard library only.
"""
import argparse
import base64
import json
import sys
import urllib.error
import urllib.request

TIE_NATS = 0.05        # crates/engine/src/compare.rs
MAX_DLOGPROB = 0.05    # scripts/test.sh: swa-check.py --max-dlogprob 0.05


def post(base, body, timeout):
    req = urllib.request.Request(base.rstrip("/") + "/v1/chat/completions",
                                 json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{base}: HTTP {e.code}: {e.read()[:500]!r}") from None


def scored(resp):
    """(tokens, chosen logprobs, top rows as [(token, logprob)], prompt_tokens, text) of a response."""
    ch = resp["choices"][0]
    content = ((ch.get("logprobs") or {}).get("content")) or []

    entries = content + [t for e in content for t in e.get("top_logprobs") or []]
    # tokens are told apart by their bytes (exact for a partial UTF-8 character) where the
    # server lists them for every entry (llama-server and Steward both do), else by their text
    use_bytes = all(t.get("bytes") is not None for t in entries)

    def key(e):
        return "bytes:" + bytes(e["bytes"]).hex() if use_bytes else e["token"]

    toks = [key(e) for e in content]
    lps = [e["logprob"] for e in content]
    tops = [[(key(t), t["logprob"]) for t in e.get("top_logprobs") or []] for e in content]
    shown = [e["token"] for e in content]
    return toks, lps, tops, shown, (resp.get("usage") or {}).get("prompt_tokens"), ch["message"].get("content")


def gap(row):
    v = sorted((lp for _, lp in row), reverse=True)
    return v[0] - v[1] if len(v) >= 2 else float("inf")


def compare(got, want, tie, tol, exact):
    """(ok, detail): Steward's `got` against llama-server's `want` (both from scored())."""
    gt, gl, gtop, gshow, gpt, _ = got
    wt, wl, wtop, wshow, wpt, _ = want
    if gpt != wpt:
        return False, f"prompt_tokens differ: steward {gpt}, llama-server {wpt} (not the same prompt)"
    if not wt or not gt:
        return False, f"no logprobs in a response (steward {len(gt)}, llama-server {len(wt)} entries)"
    if any(t.startswith("bytes:") for t in gt) != any(t.startswith("bytes:") for t in wt):
        return False, "one server lists token bytes and the other does not: tokens cannot be matched"
    part = next((i for i, (a, b) in enumerate(zip(gt, wt)) if a != b), None)
    if part is None and len(gt) != len(wt):
        part = min(len(gt), len(wt))
    # logprobs over the common prefix
    dmax, where = 0.0, None
    for i in range(part if part is not None else len(wt)):
        pairs = [(gl[i], wl[i])]
        wrow = dict(wtop[i])
        pairs += [(lp, wrow[t]) for t, lp in gtop[i] if t in wrow]
        for a, b in pairs:
            if abs(a - b) > dmax:
                dmax, where = abs(a - b), i
    if exact:
        same = (gt, gl, gtop) == (wt, wl, wtop)
        return same, ("identical" if same else f"not identical (first token difference at {part}, max |dlogprob| {dmax:.2e} at {where})")
    if dmax > tol:
        return False, f"logprobs differ by {dmax:.3e} > {tol} at token {where} ({wshow[where]!r})"
    if part is None:
        return True, f"same {len(wt)} tokens, max |dlogprob| {dmax:.2e}"
    if part >= len(gt) or part >= len(wt):
        return False, f"lengths differ ({len(gt)} vs {len(wt)} tokens) with no choice to explain it"
    ranked = sorted(wtop[part], key=lambda t: -t[1])
    g = gap(wtop[part])
    runner_up = len(ranked) > 1 and ranked[1][0] == gt[part]
    if g < tie and runner_up:
        return True, f"parted at token {part} at a near-tie (top-2 gap {g:.2e}), max |dlogprob| before it {dmax:.2e}"
    return False, (f"parted at token {part}: steward took {gshow[part]!r}, llama-server {wshow[part]!r}; "
                   f"reference top-2 gap {g:.3f} (tie width {tie}), runner-up {'yes' if runner_up else 'no'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steward", required=True, help="Steward's base URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--llama", required=True, help="llama-server's base URL (the reference)")
    ap.add_argument("images", nargs="+")
    ap.add_argument("--prompt", default="Describe this image.")
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--top", type=int, default=5)
    ap.add_argument("--tie", type=float, default=TIE_NATS)
    ap.add_argument("--max-dlogprob", type=float, default=MAX_DLOGPROB)
    ap.add_argument("--exact", action="store_true", help="demand identical tokens and logprobs")
    ap.add_argument("--model", default=None, help="the request's model field (default: none sent)")
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    bad = 0
    for path in a.images:
        mime = "image/jpeg" if path.lower().endswith((".jpg", ".jpeg")) else "image/png"
        url = f"data:{mime};base64," + base64.b64encode(open(path, "rb").read()).decode()
        body = {
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": a.prompt},
                {"type": "image_url", "image_url": {"url": url}}]}],
            "temperature": 0, "max_tokens": a.max_tokens, "logprobs": True, "top_logprobs": a.top,
        }
        if a.model:
            body["model"] = a.model
        try:
            s = scored(post(a.steward, body, a.timeout))
            r = scored(post(a.llama, dict(body, cache_prompt=False), a.timeout))
        except (RuntimeError, OSError, KeyError, ValueError) as e:
            print(f"ERROR     {path}: {e}")
            sys.exit(2)
        ok, detail = compare(s, r, a.tie, a.max_dlogprob, a.exact)
        bad += not ok
        print(f"{'AGREE   ' if ok else 'MISMATCH'}  {path}: prompt_tokens {r[4]}, {detail}")
        print(f"          llama-server: {r[5]!r}")
        if not ok or s[5] != r[5]:
            print(f"          steward:      {s[5]!r}")
    print(f"{len(a.images) - bad} of {len(a.images)} images agree")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
