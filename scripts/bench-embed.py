#!/usr/bin/env python3
"""[5/8] Embeddings throughput: Steward beside llama-server --embeddings, same GGUF.

All servers are started first and held for the whole run; one not being measured gets no
requests and idles. Shapes, for ~16- and ~128-token inputs: batch 1 with 1 client, batch 1
with 4 concurrent clients, batch 32 with 1 client (POST /v1/embeddings, keep-alive). Per
shape the servers run alternately (A B, next round B A). Inputs: seeded sentence-like text,
never repeated in a run. Before each round (and before re-measuring a contended pair, up to
--retries times) the script waits up to --max-wait s until no compiler runs and foreign CPU
(all CPU time minus the servers' and this script's, from /proc) is < 0.25 core; a
measurement is "contended" if a compiler ran at its start or end or foreign CPU averaged
> 0.25 core. Tables use the pairs (all servers, one shape and round) with none contended.
Before timing, outputs are compared (cosine >= 0.999 against the first server) on 8 inputs.

Usage: scripts/bench-embed.py [--servers steward,llama] [--rounds 3] [--json FILE]
Env: STEWARD (binary), LLAMA_SERVER, MODEL (GGUF). Logs under target/bench/embed/.
"""
import argparse, http.client, json, math, os, random, signal, statistics, subprocess, sys, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEWARD = os.environ.get("STEWARD", "/tmp/steward-bench/steward")
LLAMA = os.environ.get("LLAMA_SERVER",
                       "/work/peers/src/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server")
MODEL = os.environ.get("MODEL", os.path.join(ROOT, "target/embed-ggufs/minilm.gguf"))
LOGS = os.path.join(ROOT, "target/bench/embed")
COMPILERS = ("rustc", "cargo", "cc1", "cc1plus", "ld", "lld", "cmake", "make")

# name -> argv (the port is appended)
ST = lambda *x: [STEWARD, "serve", "--model", f"minilm={MODEL}", "--max-seqs", "32", "--threads",
                 "2", *x, "--host", "127.0.0.1", "--port"]
LL = lambda *x: [LLAMA, "-m", MODEL, "--embeddings", "-t", "2", "-np", "32", "-c", "16384", *x,
                 "--host", "127.0.0.1", "--port"]
SERVERS = {"steward": lambda: ST(), "steward-pb2048": lambda: ST("--prompt-budget", "2048"),
           "llama": lambda: LL("-b", "2048", "-ub", "2048"), "llama-ub512": lambda: LL()}
# (batch, clients, requests for ~16-token inputs, requests for ~128-token inputs)
SHAPES = [(1, 1, 96, 48), (1, 4, 192, 96), (32, 1, 16, 8)]

SUBJ = ("The committee|Our new intern|A local bakery|The city council|My neighbour|"
        "The support team|A small startup|The museum curator|Her grandfather|"
        "The delivery driver|Our database|The research group|A retired teacher|"
        "The football club|The hotel manager|An old friend of mine").split("|")
VERB = ("announced|reviewed|postponed|quietly rewrote|could not explain|finally approved|"
        "complained about|spent the weekend fixing|asked about|published|rejected|"
        "was surprised by|started planning|carefully measured").split("|")
OBJ = ("the quarterly budget|a new recipe for sourdough bread|the broken heating system|"
        "the schedule for next month|an unusual invoice|the results of the survey|"
        "a proposal to extend the bike lanes|the backup policy|the summer festival|"
        "a complaint from a customer|the train timetable|the price of coffee beans|"
        "the migration to the new servers|a map of the old harbour").split("|")
TAIL = ("after a long meeting on Tuesday|despite the heavy rain|before the deadline|"
        "without telling anyone|in front of the whole office|for the third time this year|"
        "while the power was out|just after lunch|to everyone's relief|"
        "during the storm last night|on the way to the airport|with help from two volunteers").split("|")

def texts(rng, size, n, seen):
    """n distinct texts: one sentence (~16 tokens) or six longer ones (~128 tokens)."""
    out = []
    while len(out) < n:
        one = lambda: f"{rng.choice(SUBJ)} {rng.choice(VERB)} {rng.choice(OBJ)} {rng.choice(TAIL)}"
        t = (one() + "." if size == 16 else
             " ".join(f"{one()}, around {rng.randint(2, 11)} o'clock." for _ in range(6)))
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out

def post(conn, inputs):
    conn.request("POST", "/v1/embeddings", json.dumps({"model": "minilm", "input": inputs}),
                 {"content-type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {data[:300]!r}")
    return json.loads(data)

def cpu_ticks(pids):
    """(all busy CPU ticks, ticks of pids), from /proc."""
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    total, mine = sum(v) - v[3] - v[4], 0
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                st = f.read().rsplit(")", 1)[1].split()
            mine += int(st[11]) + int(st[12])
        except (OSError, IndexError):
            pass
    return total, mine

def compiler_running():
    return any(subprocess.run(["pgrep", "-x", n], stdout=subprocess.DEVNULL).returncode == 0
               for n in COMPILERS)

def foreign(a, b, secs):
    """Cores used by processes other than pids between two cpu_ticks samples."""
    return ((b[0] - a[0]) - (b[1] - a[1])) / os.sysconf("SC_CLK_TCK") / secs

def busy(pids):
    a = cpu_ticks(pids)
    time.sleep(2.0)
    return compiler_running() or foreign(a, cpu_ticks(pids), 2.0) > 0.25

def wait_quiet(pids, max_wait):
    t0 = time.monotonic()
    while busy(pids):
        if time.monotonic() - t0 > max_wait:
            print("  (gave up waiting for quiet: measuring anyway)", flush=True)
            return False
        time.sleep(3.0)
    if time.monotonic() - t0 > 3:
        print(f"  (waited {time.monotonic() - t0:.0f} s for quiet)", flush=True)
    return True

def measure(port, batch, clients, nreq, inputs, pids):
    """nreq requests of `batch` inputs each from `clients` threads; wall time over all."""
    per, lats, errs = nreq // clients, [], []
    conns = [http.client.HTTPConnection("127.0.0.1", port, timeout=600) for _ in range(clients)]
    def client(ci):
        try:
            for r in range(per):
                i = (ci * per + r) * batch
                t = time.perf_counter()
                out = post(conns[ci], inputs[i:i + batch])
                lats.append(time.perf_counter() - t)
                assert len(out["data"]) == batch
        except Exception as e:  # noqa: BLE001
            errs.append(repr(e))
    comp0, c0, w0 = compiler_running(), cpu_ticks(pids), time.perf_counter()
    ths = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    wall = time.perf_counter() - w0
    c1, comp1 = cpu_ticks(pids), compiler_running()
    if errs:
        raise RuntimeError(errs[0])
    f, lats = foreign(c0, c1, wall), sorted(lats)
    q = lambda p: lats[min(len(lats) - 1, math.ceil(p * len(lats)) - 1)] * 1e3
    return {"eps": per * clients * batch / wall, "p50_ms": q(0.50), "p99_ms": q(0.99),
            "wall_s": wall, "requests": per * clients, "foreign_cores": f,
            "contended": comp0 or comp1 or f > 0.25}

def start(name, port):
    os.makedirs(LOGS, exist_ok=True)
    log, argv = open(os.path.join(LOGS, f"{name}.log"), "w"), SERVERS[name]() + [str(port)]
    print(f"start {name}: {' '.join(argv)}", flush=True)
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if p.poll() is not None:
            sys.exit(f"{name} exited, see {log.name}")
        try:
            post(http.client.HTTPConnection("127.0.0.1", port, timeout=5), ["warm up"])
            return p
        except (OSError, RuntimeError):
            time.sleep(0.5)
    sys.exit(f"{name} did not come up")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", default="steward,llama")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--base-port", type=int, default=8590)
    ap.add_argument("--max-wait", type=float, default=300)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the request counts")
    ap.add_argument("--retries", type=int, default=2)
    ap.add_argument("--json")
    names = (a := ap.parse_args()).servers.split(",")
    procs, ports, runs, agree, toks = {}, {}, [], {}, {}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # servers stop in finally
    try:
        for i, n in enumerate(names):
            ports[n] = a.base_port + i
            procs[n] = start(n, ports[n])
        pids = [p.pid for p in procs.values()] + [os.getpid()]
        rng, seen = random.Random(a.seed), set()
        probe = texts(rng, 16, 4, seen) + texts(rng, 128, 4, seen)
        outs = {n: post(http.client.HTTPConnection("127.0.0.1", ports[n], timeout=60), probe)
                for n in names}
        vec = lambda o: [d["embedding"] for d in sorted(o["data"], key=lambda d: d["index"])]
        cos = lambda a, b: sum(x * y for x, y in zip(a, b)) / math.sqrt(
            sum(x * x for x in a) * sum(y * y for y in b))
        agree = {n: min(cos(x, y) for x, y in zip(vec(outs[names[0]]), vec(outs[n])))
                 for n in names[1:]}
        c = http.client.HTTPConnection("127.0.0.1", ports[names[0]], timeout=60)
        toks = {size: sum(post(c, [t])["usage"]["prompt_tokens"] for t in probe[sl]) / 4
                for size, sl in ((16, slice(0, 4)), (128, slice(4, 8)))}
        print(f"agreement (min cosine vs {names[0]}, 8 inputs): {agree}; "
              f"mean tokens per input: {toks}", flush=True)
        if any(v < 0.999 for v in agree.values()):
            sys.exit("outputs disagree")
        for rnd in range(a.rounds):
            quiet = wait_quiet(pids, a.max_wait)
            print(f"round {rnd + 1} ({time.strftime('%H:%M:%S', time.gmtime())} UTC, "
                  f"load {open('/proc/loadavg').read().split()[0]}, quiet {quiet})", flush=True)
            for size, (batch, clients, n16, n128) in [(z, sh) for z in (16, 128) for sh in SHAPES]:
                nreq = max(clients, int((n16 if size == 16 else n128) * a.scale))
                for attempt in range(1 + a.retries):  # a contended pair is measured again
                    if attempt:
                        wait_quiet(pids, a.max_wait)
                    pair = []
                    for n in (names if rnd % 2 == 0 else names[::-1]):
                        inputs = texts(rng, size, nreq * batch, seen)
                        m = measure(ports[n], batch, clients, nreq, inputs, pids)
                        m.update(server=n, round=rnd + 1, size=size, batch=batch,
                                 clients=clients, attempt=attempt)
                        pair.append(m)
                        print(f"  {n:15} ~{size:3} tok b{batch:<2} c{clients}: {m['eps']:8.1f} emb/s"
                              f"  p50 {m['p50_ms']:7.1f}  p99 {m['p99_ms']:7.1f} ms"
                              f"{'  CONTENDED' if m['contended'] else ''}", flush=True)
                    clean = not any(x["contended"] for x in pair)
                    runs += [dict(m, pair_clean=clean) for m in pair]  # tables: clean pairs only
                    if clean:
                        break
    finally:
        for p in procs.values():  # one after the other: SIGTERM, then its exit
            p.terminate(), p.wait(timeout=30)
        if a.json:  # also what a stopped run measured
            with open(a.json, "w") as f:
                json.dump({"servers": {n: SERVERS[n]() + [str(ports[n])] for n in names},
                           "agreement": agree, "tokens_per_input": toks, "runs": runs}, f, indent=1)
    report(runs, names, toks)

def report(runs, names, toks):
    print("\n| inputs | batch × clients | " + " | ".join(
        f"{n}: emb/s median (min–max), p50 / p99 ms" for n in names) + " | Steward / llama |")
    print("|---|---|" + "---|" * (len(names) + 1))
    for size in (16, 128):
        for batch, clients, _, _ in SHAPES:
            if not any((r["size"], r["batch"], r["clients"]) == (size, batch, clients) for r in runs):
                continue  # a stopped run
            cells, med = [], {}
            for n in names:
                rs = [r for r in runs if (r["server"], r["size"], r["batch"], r["clients"]) ==
                      (n, size, batch, clients)]
                ok = [r for r in rs if r["pair_clean"]]
                flag = f" ({len(rs) - len(ok)} flagged out)" if ok and len(ok) < len(rs) else ""
                ok, flag = (ok, flag) if ok else (rs, " (all contended)")
                e = [r["eps"] for r in ok]
                med[n] = statistics.median(e)
                cells.append(f"{med[n]:.1f} ({min(e):.1f}–{max(e):.1f}), "
                             f"{statistics.median(r['p50_ms'] for r in ok):.1f} / "
                             f"{statistics.median(r['p99_ms'] for r in ok):.1f}{flag}")
            st, ll = ([n for n in names if n.startswith(k)] for k in ("steward", "llama"))
            ratio = f"{med[st[0]] / med[ll[0]]:.2f}×" if st and ll else ""
            print(f"| ~{size} ({toks[size]:.0f} tok) | {batch} × {clients} | " + " | ".join(cells)
                  + f" | {ratio} |")

if __name__ == "__main__":
    main()
