#!/usr/bin/env python3
"""[4/8] Several models and LoRA adapters in one server: load time, streams
during a load, mixed-adapter throughput; Steward beside llama-server.

Parts (--parts, comma-separated; default all):
  load     A. Gemma 3 270M loaded on its first request while SmolLM2 is loaded
           and idle; then unloaded (admin) and requested again, --rounds times.
           Steward reports load_ms in /v1/models; the client times the first
           request (to the first streamed text and to the end) and a second,
           warm one. llama-server's router mode (--models-preset, a child
           process per model; POST /models/unload) is measured the same way.
  gaps     B. 4 streamed completions on SmolLM2 (2 greedy, 2 temperature 1;
           --gap-tokens each, ignore_eos); the client records the arrival
           time of every text chunk. When the streams have received 1/3 of
           their tokens, variant "load" sends a 1-token request to Gemma
           (unloaded: it loads), "warm" the same request with Gemma already
           loaded, "base" nothing. Inter-chunk gaps of the SmolLM2 streams are
           split by the later chunk's arrival into: before (stream start to
           the Gemma request), during (Gemma request sent to its response's
           end; in "base" the same span after the same point, of the median
           "load" duration) and after. Per window p50 / p99 / max over the 4
           streams, median over rounds. Servers: Steward; Steward with
           OMP_WAIT_POLICY=ACTIVE GOMP_SPINCOUNT=300000 (libgomp's barrier
           waits otherwise sleep once two models' OpenMP threads outnumber
           the cores: a loaded, idle Gemma slows SmolLM2's steps); Steward
           (with the same environment) whose loader thread the script renices
           from the registry's own niceness to each --loader-nice value (variants
           load and base only): what a load at that priority does;
           llama-server's router (a process per model). Also printed: when
           Gemma's response ends relative to the SmolLM2 streams' last token.
  adapters C/D. SmolLM2 with two random LoRA adapters a and b (made by
           scripts/gen-random-lora.py, seeds 1 and 2, in target/bench/models/):
           8 streams (4 greedy, 4 temperature 1 with top_p 1, top_k 0,
           min_p 0; --adapter-tokens each, ignore_eos) all on the base model,
           all under a, or 4 under a + 4 under b; and for the cost of a switch
           1 stream under a, 2 under a, 1 under a + 1 under b. Steward with
           --adapter-slice 1, 2, 4 and 8 (slice changes only the runs with two
           sets, so 2, 4 and 8 run only those), llama-server with --lora a
           --lora b.
           The request bodies are identical on both servers: every request
           names both adapters by id, `"lora": [{"id": 0, "scale": 1|0},
           {"id": 1, "scale": 0|1}]` (both 0 = base; llama-server applies
           every loaded adapter at scale 1 to a request without `lora`).
           tokens/s = sum of usage.completion_tokens / wall time from the
           first request sent to the last stream's end; gaps = inter-chunk
           gaps of every stream after its first chunk. Steward runs with
           RUST_LOG=steward_engine::owner=trace: its "step" lines give the step
           times (runtime_ms: llama_decode alone) of every run. A last probe
           runs mix8, a8, mix8 on a llama-server at -lv 4 and keeps its lora
           log lines.

Every server: --threads 2 (-t 2), 8 sequences of 2,048 cells (Steward
--max-seqs 8 --ctx-per-seq 2048; llama-server -np 8 -c 16384), except
"steward-defaults" in part load (32 x 4,096, Steward's defaults). All of a
part's servers are started first and held for the part; the variants are
interleaved (A B A B ...), the order rotated each round. Before each
measured run the script waits until no rustc/cargo process runs (up to
--max-wait s); a sampler thread records whether one ran during a run, or
whether processes outside the script's own tree used more than a quarter of
a core on average (the JSON's `compile` flag; the tables leave flagged runs
out and say how many).

Usage: scripts/bench-models.py [--parts load,gaps,adapters] [--rounds 5]
       [--base-port 8480] [--no-llama] [--gap-tokens 450] [--adapter-tokens 128]
       [--loader-nice 0,10] [--gap-variants load,warm,base]
       [--workloads base8,a8,mix8,1a,2a,1a1b] [--max-wait 1800] [--report JSON...]
Env: STEWARD (default target/release/steward), LLAMA_SERVER, SMOL, GEMMA, PY
(python with numpy and gguf for gen-random-lora.py; default target/pyenv/bin/python).
Output: target/bench/models/{load,gaps,adapters}.json and the servers' logs.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STEWARD = os.environ.get("STEWARD", os.path.join(ROOT, "target/release/steward"))
LLAMA = os.environ.get(
    "LLAMA_SERVER", "/work/peers/src/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server")
MODELS = os.path.expanduser("~/.cache/steward/models")
SMOL = os.environ.get("SMOL", os.path.join(MODELS, "SmolLM2-135M-Instruct.Q8_0.gguf"))
GEMMA = os.environ.get("GEMMA", os.path.join(MODELS, "gemma-3-270m-q4_k_m.gguf"))
PY = os.environ.get("PY", os.path.join(ROOT, "target/pyenv/bin/python"))
OUT = os.path.join(ROOT, "target/bench/models")
LORA = {"a": os.path.join(OUT, "lora-a.gguf"), "b": os.path.join(OUT, "lora-b.gguf")}
# libgomp spins only ~100 rounds at a barrier once a process holds more OpenMP
# threads than CPUs (two models x 2 threads on 2 cores), then sleeps on a futex;
# ACTIVE raises that to 1,000, GOMP_SPINCOUNT keeps the ordinary idle spin at
# libgomp's default (~3 ms) instead of ACTIVE's minutes.
OMP_ACTIVE = {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000"}
KEY = "bench-models"  # Steward's admin routes need --api-key; llama-server ignores the header
AUTH = {"authorization": f"Bearer {KEY}"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")

TOPICS = ["a lighthouse keeper", "a lost robot", "the first snow", "a market in Lisbon",
          "an old violin", "a night train", "a garden on Mars", "a clockmaker", "two rival chefs",
          "a library at midnight", "a whale's song", "a paper boat"]


# ---------------------------------------------------------------- compiles

class CompileWatch:
    """Samples every second whether a `rustc` / `cargo` process runs, and how
    much CPU processes outside this script's own tree (this script, the
    servers it started and their children) used: other work on the machine
    that a run then competes with. A run is flagged when either was seen."""

    FOREIGN_CORES = 0.25  # foreign CPU, in cores averaged over a second, that flags a run

    def __init__(self):
        self.seen = []  # monotonic times a compile process was running
        self.foreign = []  # (monotonic time, cores used by other processes over the last second)
        self.stop = False
        self.me = os.getpid()
        threading.Thread(target=self._run, daemon=True).start()

    @staticmethod
    def running():
        for name in ("rustc", "cargo"):
            if subprocess.run(["pgrep", "-x", name], stdout=subprocess.DEVNULL).returncode == 0:
                return True
        return False

    def _cpu(self):
        """(all processes' CPU ticks, this tree's CPU ticks), from /proc."""
        procs = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    st = f.read().rsplit(")", 1)[1].split()
                procs[int(d)] = (int(st[1]), int(st[11]) + int(st[12]))  # ppid, utime + stime
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
        mine = 0
        for pid, (ppid, ticks) in procs.items():
            p, depth = pid, 0
            while p and p != self.me and depth < 8:
                p, depth = procs.get(p, (0, 0))[0], depth + 1
            if p == self.me:
                mine += ticks
        return sum(t for _, t in procs.values()), mine

    def _run(self):
        hz = os.sysconf("SC_CLK_TCK")
        last = None
        while not self.stop:
            now = time.monotonic()
            if self.running():
                self.seen.append(now)
            try:
                total, mine = self._cpu()
                if last:
                    # processes that exit within the second are missed; this is a lower bound
                    other = ((total - last[1]) - (mine - last[2])) / hz / max(now - last[0], 1e-3)
                    self.foreign.append((now, max(other, 0.0)))
                last = (now, total, mine)
            except OSError:
                pass
            time.sleep(1.0)

    def during(self, t0, t1):
        if any(t0 - 1.0 <= t <= t1 + 1.0 for t in self.seen):
            return True
        xs = [c for t, c in self.foreign if t0 <= t <= t1 + 1.0]
        return bool(xs) and statistics.mean(xs) > self.FOREIGN_CORES

    def quiet(self, max_wait):
        t0 = time.monotonic()
        waited = False
        while self.running():
            if not waited:
                print("  (waiting: a rustc/cargo process is running)", flush=True)
                waited = True
            if time.monotonic() - t0 > max_wait:
                print("  (gave up waiting: measuring during a compile)", flush=True)
                return False
            time.sleep(2.0)
        if waited:
            time.sleep(3.0)
        return True


WATCH = None
ARGS = None


def quiet():
    return WATCH.quiet(ARGS.max_wait)


# ---------------------------------------------------------------- servers

class Server:
    def __init__(self, name, kind, cmd, port, env=None):
        self.name, self.kind, self.cmd, self.port = name, kind, cmd, port
        self.log_path = os.path.join(OUT, f"{name}.log")
        self.env = dict(os.environ, **(env or {}))
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "w")
        cwd = OUT if self.kind == "router" else ROOT
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=self.env,
                                     cwd=cwd, start_new_session=True)

    def wait_ready(self, limit=300):
        path = "/ready" if self.kind == "steward" else ("/models" if self.kind == "router" else "/health")
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name}: exited with {self.proc.returncode} (see {self.log_path})")
            try:
                st, body = get(self.port, path)
                if st == 200 and (self.kind != "router" or router_status(self.port, "smol") == "loaded"):
                    return
            except Exception:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"{self.name}: not ready after {limit} s")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()

    def log_size(self):
        self.log.flush()
        return os.path.getsize(self.log_path)

    def log_since(self, off):
        with open(self.log_path, "rb") as f:
            f.seek(off)
            return ANSI.sub("", f.read().decode(errors="replace"))


class Renice:
    """Sets every `steward-load` thread of a server that sits at nice 19 (the
    registry's loader lowers itself) to `nice`: what a load at another
    priority would do. Needs CAP_SYS_NICE below the current value."""

    def __init__(self, server, nice):
        self.server, self.nice, self.done = server, nice, set()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            p = self.server.proc
            if p is not None and p.poll() is None:
                try:
                    for t in os.listdir(f"/proc/{p.pid}/task"):
                        try:
                            with open(f"/proc/{p.pid}/task/{t}/comm") as f:
                                if f.read().strip() != "steward-load":
                                    continue
                            if os.getpriority(os.PRIO_PROCESS, int(t)) != self.nice:
                                os.setpriority(os.PRIO_PROCESS, int(t), self.nice)
                                self.done.add(t)
                        except (FileNotFoundError, ProcessLookupError, PermissionError):
                            pass
                except FileNotFoundError:
                    pass
            time.sleep(0.01)


def steward(name, port, *extra, env=None):
    cmd = [STEWARD, "serve", "--host", "127.0.0.1", "--port", str(port), "--threads", "2",
           "--api-key", KEY] + list(extra)
    return Server(name, "steward", cmd, port, env)


def llama(name, port, *extra):
    cmd = [LLAMA, "--host", "127.0.0.1", "--port", str(port), "-t", "2", "--metrics"] + list(extra)
    return Server(name, "llama", cmd, port)


def router(name, port):
    preset = os.path.join(OUT, "router-preset.ini")
    with open(preset, "w") as f:
        f.write("version = 1\n[*]\nthreads = 2\nparallel = 8\nctx-size = 16384\n"
                f"[smol]\nmodel = {SMOL}\nload-on-startup = true\n[gemma]\nmodel = {GEMMA}\n")
    cmd = [LLAMA, "--host", "127.0.0.1", "--port", str(port), "--models-preset", preset]
    return Server(name, "router", cmd, port)


def start_all(servers):
    for s in servers:
        s.start()
        s.wait_ready()
        print(f"  {s.name} ready on :{s.port}", flush=True)


def stop_all(servers):
    for s in servers:
        s.stop()


# ---------------------------------------------------------------- HTTP

def get(port, path, timeout=10):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=AUTH)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read().decode()


def post(port, path, body, timeout=120):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 dict(AUTH, **{"content-type": "application/json"}))
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read().decode()


def models(port):
    return {m["id"]: m for m in json.loads(get(port, "/v1/models")[1])["data"]}


def router_status(port, model):
    for m in json.loads(get(port, "/models")[1])["data"]:
        if m["id"] == model:
            return m["status"]["value"]
    return None


def stream(port, body, out, t_ref=None):
    """POST a streamed /v1/completions; fills `out` with the send time, every
    text chunk's arrival time, the text, usage, SSE comment count."""
    out.update(times=[], text="", usage=None, comments=0, error=None, finish=None)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=900)
    data = json.dumps(dict(body, stream=True, stream_options={"include_usage": True})).encode()
    out["t_send"] = time.monotonic()
    try:
        conn.request("POST", "/v1/completions", data, dict(AUTH, **{"content-type": "application/json"}))
        r = conn.getresponse()
        if r.status != 200:
            out["error"] = f"HTTP {r.status}: {r.read()[:300]!r}"
            return out
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if line.startswith(b":"):
                out["comments"] += 1
                continue
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            v = json.loads(line[6:])
            now = time.monotonic()
            for ch in v.get("choices") or []:
                t = ch.get("text") or ""
                if t:
                    out["times"].append(now)
                    out["text"] += t
                if ch.get("finish_reason"):
                    out["finish"] = ch["finish_reason"]
            if v.get("usage"):
                out["usage"] = v["usage"]
            if v.get("error"):
                out["error"] = str(v["error"])[:300]
    except Exception as e:  # noqa: BLE001
        out["error"] = repr(e)
    finally:
        out["t_end"] = time.monotonic()
        conn.close()
    return out


def pct(xs, p):
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def ms(x):
    return None if x is None else round(x * 1e3, 2)


def fmt(x, nd=1):
    return "-" if x is None else f"{x:,.{nd}f}"


# ---------------------------------------------------------------- A: load

def unload_gemma(s):
    if s.kind == "steward":
        post(s.port, "/admin/models/gemma/unload", {})
        assert models(s.port)["gemma"]["status"]["value"] == "unloaded"
    else:
        if router_status(s.port, "gemma") != "unloaded":
            post(s.port, "/models/unload", {"model": "gemma"})
        t0 = time.monotonic()
        while router_status(s.port, "gemma") != "unloaded":
            if time.monotonic() - t0 > 60:
                raise RuntimeError("router: gemma did not unload")
            time.sleep(0.1)


GEMMA_BODY = {"model": "gemma", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}

ROUTER_LOADED = re.compile(r"^\[(\d+)\] (\d+)\.(\d+)\.(\d+)\.(\d+) I srv  llama_server: model loaded", re.M)


def router_child_load_ms(text):
    """The child's own clock (min.sec.ms.us since it started) at its
    'model loaded' line."""
    m = list(ROUTER_LOADED.finditer(text))
    if not m:
        return None
    _, mi, se, mil, us = m[-1].groups()
    return (int(mi) * 60 + int(se)) * 1e3 + int(mil) + int(us) / 1e3


def part_load(servers, rounds):
    res = {s.name: [] for s in servers}
    for s in servers:  # SmolLM2 warm on every server
        stream(s.port, {"model": "smol", "prompt": "Hello", "max_tokens": 4, "temperature": 0}, {})
    for r in range(rounds):
        order = servers[r % len(servers):] + servers[:r % len(servers)]
        for s in order:
            unload_gemma(s)
            time.sleep(2.0)
            quiet()
            off = s.log_size()
            first, warm = {}, {}
            stream(s.port, GEMMA_BODY, first)
            stream(s.port, GEMMA_BODY, warm)
            rec = {
                "round": r,
                "first_ttft_ms": ms(first["times"][0] - first["t_send"]) if first["times"] else None,
                "first_total_ms": ms(first["t_end"] - first["t_send"]),
                "warm_ttft_ms": ms(warm["times"][0] - warm["t_send"]) if warm["times"] else None,
                "warm_total_ms": ms(warm["t_end"] - warm["t_send"]),
                "loading_comments": first["comments"],
                "error": first["error"] or warm["error"],
                "compile": WATCH.during(first["t_send"], warm["t_end"]),
            }
            time.sleep(0.5)
            if s.kind == "steward":
                st = models(s.port)["gemma"]["status"]
                rec.update(load_ms=st["load_ms"], loads=st["loads"], unloads=st["unloads"],
                           footprint_bytes=st["footprint_bytes"])
                log = s.log_since(off)
                m = re.search(r"model loaded load_ms=([0-9.]+) model=gemma", log)
                w = re.findall(r"warmup_ms=([0-9.]+)", log)
                rec["engine_load_ms"] = float(m.group(1)) if m else None
                rec["warmup_ms"] = float(w[-1]) if w else None
            else:
                rec["load_ms"] = router_child_load_ms(s.log_since(off))
            res[s.name].append(rec)
            print(f"  round {r} {s.name}: load_ms {rec.get('load_ms')} first {rec['first_total_ms']} ms "
                  f"(ttft {rec['first_ttft_ms']}) warm {rec['warm_total_ms']} ms"
                  f"{' COMPILE' if rec['compile'] else ''}", flush=True)
    report_load(res)
    return res


def report_load(res):
    print("\nA. Gemma load on first request (median of rounds)")
    print("| server | load_ms (server) | of which model file (Engine::load) / warm-up step | first request, "
          "to first text | first request, total | warm request, total | rounds (load_ms) |")
    print("|---|---|---|---|---|---|---|")
    for name, recs in res.items():
        recs = clean(recs)
        print(f"| {name} | {fmt(med([x.get('load_ms') for x in recs]), 0)} | "
              f"{fmt(med([x.get('engine_load_ms') for x in recs]), 0)} / {fmt(med([x.get('warmup_ms') for x in recs]), 0)} | "
              f"{fmt(med([x['first_ttft_ms'] for x in recs]), 0)} | {fmt(med([x['first_total_ms'] for x in recs]), 0)} | "
              f"{fmt(med([x['warm_total_ms'] for x in recs]), 0)} | "
              f"{len(recs)} ({', '.join(fmt(x.get('load_ms'), 0) for x in recs)}) |")


# ---------------------------------------------------------------- B: gaps

def smol_body(i, r, temperature, max_tokens, lora=None):
    b = {"model": "smol", "prompt": f"Story {r}.{i}: write a long story about {TOPICS[i % len(TOPICS)]}.\n",
         "max_tokens": max_tokens, "ignore_eos": True, "temperature": temperature}
    if temperature > 0:
        b.update(top_p=1.0, top_k=0, min_p=0.0)
    if lora is not None:
        b["lora"] = [{"id": 0, "scale": 1.0 if lora == "a" else 0.0},
                     {"id": 1, "scale": 1.0 if lora == "b" else 0.0}]
    return b


def gap_run(s, variant, r, tokens):
    outs = [{} for _ in range(4)]
    threads = [threading.Thread(target=stream, args=(s.port, smol_body(i, r, 0.0 if i < 2 else 1.0, tokens), outs[i]))
               for i in range(4)]
    g = {}
    t0 = time.monotonic()
    for t in threads:
        t.start()
    fire_at = 4 * tokens // 3
    gt = None
    t_fire = None
    while any(t.is_alive() for t in threads):
        n = sum(len(o.get("times", [])) for o in outs)
        if t_fire is None and n >= fire_at:
            t_fire = time.monotonic()
            if variant in ("load", "warm"):
                gt = threading.Thread(target=stream, args=(s.port, dict(GEMMA_BODY, max_tokens=1), g))
                gt.start()
        time.sleep(0.002)
    for t in threads:
        t.join()
    if gt:
        gt.join()
    t1 = time.monotonic()
    return {
        "variant": variant, "round": r, "t0": t0, "t_fire": t_fire,
        "t_done": g.get("t_end"), "gemma_ms": ms(g["t_end"] - g["t_send"]) if g else None,
        "gemma_comments": g.get("comments"), "gemma_error": g.get("error"),
        "streams": [o["times"] for o in outs], "errors": [o["error"] for o in outs if o["error"]],
        "compile": WATCH.during(t0, t1),
    }


def windows(run, span):
    """Gaps (s) before / during / after: `span` (s) after t_fire when the run
    has no Gemma response of its own."""
    tf = run["t_fire"]
    td = run["t_done"] if run["t_done"] else tf + span
    w = {"before": [], "during": [], "after": []}
    for times in run["streams"]:
        for a, b in zip(times, times[1:]):
            key = "before" if b <= tf else ("during" if b <= td else "after")
            w[key].append(b - a)
    return w


def part_gaps(servers, rounds, tokens):
    runs = {s.name: [] for s in servers}
    for s in servers:  # warm-up, discarded
        unload_gemma(s)
        gap_run(s, "base", -1, 32)
    for r in range(rounds):
        order = servers[r % len(servers):] + servers[:r % len(servers)]
        for s in order:
            seq = ["load", "warm", "base"] if r % 2 == 0 else ["base", "load", "warm"]
            seq = [v for v in seq if v in getattr(s, "variants", seq) and v in ARGS.gap_variants.split(",")]
            for v in seq:
                if v in ("load", "base"):
                    unload_gemma(s)
                    time.sleep(1.0)
                quiet()
                run = gap_run(s, v, r, tokens)
                if s.kind == "steward" and v in ("load", "warm"):
                    run["load_ms"] = models(s.port)["gemma"]["status"]["load_ms"]
                runs[s.name].append(run)
                print(f"  round {r} {s.name} {v}: gemma {run['gemma_ms']} ms, comments {run['gemma_comments']}"
                      f"{' errors ' + str(run['errors']) if run['errors'] else ''}"
                      f"{' COMPILE' if run['compile'] else ''}", flush=True)
    return {"runs": runs, "summary": report_gaps(runs, tokens)}


def clean(recs):
    """Runs during which no compile was seen (all of them if none is clean)."""
    ok = [x for x in recs if not x.get("compile")]
    return ok if ok else recs


def report_gaps(runs, tokens):
    summary = {}
    notes = []
    dropped = sum(1 for v in runs.values() for x in v if x.get("compile"))
    if dropped:
        notes.append(f"  {dropped} run(s) during a compile left out")
    print(f"\nB. SmolLM2 inter-chunk gaps (4 streams, {tokens} tokens) around a Gemma request; ms, "
          "p50 / p99 / max per run, median over rounds")
    print("| server | variant | Gemma request | before | during | after |")
    print("|---|---|---|---|---|---|")
    for name in runs:
        loads = [x for x in clean(runs[name]) if x["variant"] == "load"]
        span = med([(x["t_done"] - x["t_fire"]) for x in loads]) or 1.5
        after_end = med([x["t_done"] - max(t[-1] for t in x["streams"]) for x in loads])
        summary[name] = {"span_s": span, "load_done_after_streams_end_s": after_end}
        notes.append(f"  {name}: Gemma's response ends {after_end:+.2f} s after the SmolLM2 streams' last token "
                     f"(load_ms {fmt(med([x.get('load_ms') for x in loads]), 0)})")
        for v in ("base", "load", "warm"):
            rs = [x for x in clean(runs[name]) if x["variant"] == v]
            if not rs:
                continue
            cells = {}
            for key in ("before", "during", "after"):
                per = [windows(x, span)[key] for x in rs]
                cells[key] = {
                    "p50": med([ms(pct(g, 50)) for g in per]), "p99": med([ms(pct(g, 99)) for g in per]),
                    "max": med([ms(max(g)) if g else None for g in per]),
                    "n": med([len(g) for g in per])}
            summary[name][v] = cells
            gm = med([x["gemma_ms"] for x in rs]) if v != "base" else None
            desc = {"load": "load + 1 token", "warm": "1 token (loaded)", "base": f"none ({span * 1e3:,.0f} ms span)"}[v]
            print(f"| {name} | {v} | {desc}{'' if gm is None else f', {gm:,.0f} ms'} | " + " | ".join(
                f"{fmt(cells[k]['p50'])} / {fmt(cells[k]['p99'])} / {fmt(cells[k]['max'])}" for k in
                ("before", "during", "after")) + " |")
    print("\n".join(notes))
    return summary


# ---------------------------------------------------------------- C: adapters

WORKLOADS = {  # name: list of (lora, temperature)
    "base8": [(None, 0.0)] * 4 + [(None, 1.0)] * 4,
    "a8": [("a", 0.0)] * 4 + [("a", 1.0)] * 4,
    "mix8": [("a", 0.0)] * 2 + [("a", 1.0)] * 2 + [("b", 0.0)] * 2 + [("b", 1.0)] * 2,
    "1a": [("a", 0.0)],
    "2a": [("a", 0.0)] * 2,
    "1a1b": [("a", 0.0), ("b", 0.0)],
}
STEP_RE = re.compile(r"steward_engine::owner::step: .*?decode=(\d+) .*?chunks=(\d+) prompt=(\d+) runtime_ms=([0-9.]+) ms=([0-9.]+)")


def adapter_run(s, wl, r, tokens):
    spec = WORKLOADS[wl]
    outs = [{} for _ in spec]
    bodies = []
    for i, (lora, temp) in enumerate(spec):
        b = smol_body(i, r, temp, tokens, lora or "base")
        bodies.append(b)
    threads = [threading.Thread(target=stream, args=(s.port, b, o)) for b, o in zip(bodies, outs)]
    off = s.log_size() if s.kind == "steward" else None
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    t1 = max(o["t_end"] for o in outs)
    toks = sum((o["usage"] or {}).get("completion_tokens", len(o["times"])) for o in outs)
    gaps = [b - a for o in outs for a, b in zip(o["times"], o["times"][1:])]
    groups = {}
    for (lora, _), o in zip(spec, outs):
        g = groups.setdefault(lora or "base", {"end": 0.0, "first": []})
        g["end"] = max(g["end"], o["t_end"] - t0)
        if o["times"]:
            g["first"].append(o["times"][0] - o["t_send"])
    rec = {
        "workload": wl, "round": r, "wall_s": t1 - t0, "tokens": toks, "tok_s": toks / (t1 - t0),
        "gap_p50_ms": ms(pct(gaps, 50)), "gap_p99_ms": ms(pct(gaps, 99)), "gap_max_ms": ms(max(gaps) if gaps else None),
        "groups": {k: {"end_s": v["end"], "ttft_max_s": max(v["first"]) if v["first"] else None}
                   for k, v in groups.items()},
        "errors": [o["error"] for o in outs if o["error"]], "compile": WATCH.during(t0, t1),
    }
    if off is not None:
        time.sleep(0.2)
        steps = [tuple(float(x) for x in m.groups()) for m in STEP_RE.finditer(s.log_since(off))]
        dec = [x for x in steps if x[1] == 0]  # decode-only steps
        rec["steps"] = len(steps)
        rec["decode_step_ms_p50"] = med([x[4] for x in dec])
        rec["decode_runtime_ms_p50"] = med([x[3] for x in dec])
        rec["decode_rows_mean"] = statistics.mean([x[0] for x in dec]) if dec else None
        rec["decode_step_ms_mean"] = statistics.mean([x[4] for x in dec]) if dec else None
        rec["decode_runtime_ms_mean"] = statistics.mean([x[3] for x in dec]) if dec else None
    return rec


def part_adapters(rounds, tokens, base_port, with_llama):
    for n, seed in (("a", 1), ("b", 2)):
        if not os.path.exists(LORA[n]):
            subprocess.run([PY, os.path.join(ROOT, "scripts/gen-random-lora.py"), SMOL, LORA[n],
                            "--seed", str(seed)], check=True)
    common = ["--model", f"smol={SMOL}", "--lora", f"a={LORA['a']}", "--lora", f"b={LORA['b']}",
              "--max-seqs", "8", "--ctx-per-seq", "2048"]
    env = {"RUST_LOG": "info,steward_engine::owner=trace"}
    servers = [steward(f"steward-slice{k}", base_port + i, *common, "--adapter-slice", str(k), env=env)
               for i, k in enumerate((1, 2, 4, 8))]
    if with_llama:
        servers.append(llama("llama-server", base_port + 4, "-m", SMOL, "-np", "8", "-c", "16384",
                             "--lora", LORA["a"], "--lora", LORA["b"]))
    start_all(servers)
    plan = {"steward-slice1": list(WORKLOADS), "steward-slice2": ["mix8", "1a1b"],
            "steward-slice4": ["mix8", "1a1b"], "steward-slice8": ["mix8", "1a1b"],
            "llama-server": list(WORKLOADS)}
    res = {s.name: [] for s in servers}
    try:
        for s in servers:  # warm-up, discarded
            for wl in plan[s.name]:
                if wl in ARGS.workloads.split(","):
                    adapter_run(s, wl, -1, 16)
        for r in range(rounds):
            for wl in ARGS.workloads.split(","):
                these = [s for s in servers if wl in plan[s.name]]
                k = r % len(these)
                for s in these[k:] + these[:k]:
                    quiet()
                    rec = adapter_run(s, wl, r, tokens)
                    res[s.name].append(rec)
                    print(f"  round {r} {wl:5} {s.name}: {rec['tok_s']:.1f} tok/s, gaps p50 {rec['gap_p50_ms']} "
                          f"p99 {rec['gap_p99_ms']} ms, groups "
                          + ", ".join(f"{g} ends {v['end_s']:.2f} s" for g, v in rec["groups"].items())
                          + (f", step p50 {rec['decode_step_ms_p50']} ms" if "steps" in rec else "")
                          + (f" ERRORS {rec['errors']}" if rec["errors"] else "")
                          + (" COMPILE" if rec["compile"] else ""), flush=True)
    finally:
        stop_all(servers)
    probe = None
    if with_llama:
        probe = llama_lora_probe(base_port + 5, tokens)
    report_adapters(res, tokens)
    return {"runs": res, "llama_probe": probe}


def report_adapters(res, tokens):
    dropped = sum(1 for v in res.values() for x in v if x.get("compile"))
    print(f"\nC. 8 streams x {tokens} tokens (medians over rounds)")
    print("| server | workload | tokens/s | gap p50 ms | gap p99 ms | gap max ms | group: last first token / end (s) | "
          "decode step p50 / mean ms (rows) |")
    print("|---|---|---|---|---|---|---|---|")
    for wl in WORKLOADS:
        for name in res:
            rs = [x for x in clean(res[name]) if x["workload"] == wl]
            if not rs:
                continue
            ends = ", ".join(f"{g} {med([x['groups'][g]['ttft_max_s'] for x in rs]):.2f} / "
                             f"{med([x['groups'][g]['end_s'] for x in rs]):.2f}" for g in rs[0]["groups"])
            step = ""
            if "steps" in rs[0]:
                step = (f"{fmt(med([x['decode_step_ms_p50'] for x in rs]), 2)} / "
                        f"{fmt(med([x['decode_step_ms_mean'] for x in rs]), 2)} ({fmt(med([x['decode_rows_mean'] for x in rs]), 1)})")
            print(f"| {name} | {wl} | {fmt(med([x['tok_s'] for x in rs]))} | {fmt(med([x['gap_p50_ms'] for x in rs]))} | "
                  f"{fmt(med([x['gap_p99_ms'] for x in rs]))} | {fmt(med([x['gap_max_ms'] for x in rs]))} | {ends} | {step} |")
    if dropped:
        print(f"  {dropped} run(s) during a compile left out")
    # Paired within a round: each slice against slice 1, each server's mixed run against its a8 run.
    def one(name, wl, r):
        return next((x for x in res.get(name, []) if x["workload"] == wl and x["round"] == r and not x.get("compile")), None)
    rounds = sorted({x["round"] for v in res.values() for x in v})
    for wl in ("mix8", "1a1b"):
        for name in res:
            if name == "steward-slice1":
                continue
            rat = [one(name, wl, r)["tok_s"] / one("steward-slice1", wl, r)["tok_s"] for r in rounds
                   if one(name, wl, r) and one("steward-slice1", wl, r)]
            if rat:
                print(f"  {wl}: {name} / steward-slice1 tokens/s, paired by round: median {med(rat):.2f} "
                      f"({', '.join(f'{x:.2f}' for x in rat)})")
    for name in res:
        rat = [one(name, "mix8", r)["tok_s"] / one(name, "a8", r)["tok_s"] for r in rounds
               if one(name, "mix8", r) and one(name, "a8", r)]
        if rat:
            print(f"  {name}: mix8 / a8 tokens/s, paired by round: median {med(rat):.2f}")


def llama_lora_probe(port, tokens):
    """One mixed run and one 1a1b run on a llama-server at -lv 4; its lora lines."""
    s = llama("llama-probe", port, "-m", SMOL, "-np", "8", "-c", "16384", "--lora", LORA["a"], "--lora", LORA["b"],
              "-lv", "4")
    start_all([s])
    try:
        off = s.log_size()
        rec = [adapter_run(s, wl, 99, tokens) for wl in ("mix8", "a8", "mix8")]
        text = s.log_since(off)
    finally:
        stop_all([s])
    lines = [ln for ln in text.splitlines() if "lora" in ln.lower()]
    print(f"\nllama-server -lv 4, runs mix8, a8, mix8: {len(lines)} log lines mention lora:")
    for ln in lines[:40]:
        print("   ", ln[:200])
    return {"run": rec, "lora_lines": lines[:200], "lora_line_count": len(lines)}


# ---------------------------------------------------------------- main

def main():
    global WATCH, ARGS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="load,gaps,adapters")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base-port", type=int, default=8480)
    ap.add_argument("--no-llama", action="store_true", help="Steward only")
    ap.add_argument("--gap-tokens", type=int, default=450)
    ap.add_argument("--adapter-tokens", type=int, default=128)
    ap.add_argument("--loader-nice", default="0,10",
                    help="part gaps: also Steward servers whose loader thread is reniced to these values")
    ap.add_argument("--gap-variants", default="load,warm,base", help="part gaps: which variants")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="part adapters: which workloads")
    ap.add_argument("--max-wait", type=float, default=1800, help="longest wait for a compile to end, s")
    ap.add_argument("--report", nargs="+", metavar="JSON", help="print the tables of earlier runs' JSON and exit")
    ARGS = ap.parse_args()
    if ARGS.report:
        for path in ARGS.report:
            d = json.load(open(path))
            print(f"{path}: {d['part']}, {d['started']} to {d['finished']}, HEAD {d['head']}")
            if d["part"] == "load":
                report_load(d["result"])
            elif d["part"] == "gaps":
                report_gaps(d["result"]["runs"], d["args"]["gap_tokens"])
            else:
                report_adapters(d["result"]["runs"], d["args"]["adapter_tokens"])
        return
    os.makedirs(OUT, exist_ok=True)
    WATCH = CompileWatch()
    parts = ARGS.parts.split(",")
    bp = ARGS.base_port
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(f"bench-models: {started}, HEAD {rev}, parts {parts}, rounds {ARGS.rounds}", flush=True)
    two = ["--model", f"smol={SMOL}", "--model", f"gemma={GEMMA}"]
    small = ["--max-seqs", "8", "--ctx-per-seq", "2048"]
    meta = {"started": started, "head": rev, "args": vars(ARGS),
            "steward_binary_mtime": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(os.path.getmtime(STEWARD)))}
    print(f"steward binary built {meta['steward_binary_mtime']}", flush=True)
    for part in parts:
        quiet()
        if part == "load":
            servers = [steward("steward", bp, *two, *small), steward("steward-defaults", bp + 1, *two)]
            if not ARGS.no_llama:
                servers.append(router("llama-router", bp + 2))
            start_all(servers)
            try:
                res = part_load(servers, ARGS.rounds)
            finally:
                stop_all(servers)
        elif part == "gaps":
            servers = [steward("steward", bp, *two, *small),
                       steward("steward-omp-active", bp + 1, *two, *small, env=OMP_ACTIVE)]
            for i, n in enumerate(int(x) for x in ARGS.loader_nice.split(",") if x != ""):
                s = steward(f"steward-loader-nice{n}", bp + 3 + i, *two, *small, env=OMP_ACTIVE)
                s.variants = ("load", "base")
                Renice(s, n)
                servers.append(s)
            if not ARGS.no_llama:
                servers.append(router("llama-router", bp + 2))
            start_all(servers)
            try:
                res = part_gaps(servers, ARGS.rounds, ARGS.gap_tokens)
            finally:
                stop_all(servers)
        elif part == "adapters":
            res = part_adapters(ARGS.rounds, ARGS.adapter_tokens, bp + 3, not ARGS.no_llama)
        else:
            sys.exit(f"unknown part {part}")
        with open(os.path.join(OUT, f"{part}.json"), "w") as f:
            json.dump(dict(meta, part=part, finished=time.strftime("%H:%M:%S UTC", time.gmtime()),
                           compile_seen=len(WATCH.seen), result=res), f, indent=1)
    WATCH.stop = True
    print(f"\nfinished {time.strftime('%H:%M:%S UTC', time.gmtime())}; compile processes seen during the "
          f"script: {'yes' if WATCH.seen else 'no'}")


if __name__ == "__main__":
    main()
