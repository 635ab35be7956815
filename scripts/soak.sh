#!/usr/bin/env bash
# [1/8] soak: `steward serve` (default model) at and past capacity under the
# `soak` workload (10,000 requests mixing cancels in every state, slow
# readers, n = 3, grammars, unstreamed requests and bad inputs), sampled
# every second; afterwards the server must be idle again (0 running,
# 0 waiting, 0 reserved, no KV held by live sequences: only the prefix
# cache's cells), RSS flat after warm-up, and every answer one a correct
# server gives (steward-bench --strict). Prints PASS or FAIL with the numbers.
#
#   scripts/soak.sh                       # the full soak (~10-15 min on 2 cores)
#   CONVERSATIONS=300 scripts/soak.sh     # a quick one
#
# Environment: OUT (results folder, default /tmp/soak-out), CONVERSATIONS,
# WORKLOAD (default soak), MAX_SEQS (8), MAX_WAITING (8), PORT (default: a
# free one), SERVE_ARGS (more `steward serve` flags), NO_BUILD=1 (use the
# binaries as they are), WARMUP_FRAC (0.3: the share of the run RSS may
# grow in), RSS_TOL_MIB (48: growth allowed after warm-up), VENV (where
# matplotlib goes, default /tmp/soak-venv).
# Files in OUT: samples.csv, soak.png, bench.json, bench.html, bench.log,
# server.log, metrics-{before,after}.txt, ledger-after.json, verdict.txt.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
OUT="${OUT:-/tmp/soak-out}"
WORKLOAD="${WORKLOAD:-soak}"
MAX_SEQS="${MAX_SEQS:-8}"
MAX_WAITING="${MAX_WAITING:-8}"
WARMUP_FRAC="${WARMUP_FRAC:-0.3}"
RSS_TOL_MIB="${RSS_TOL_MIB:-48}"
VENV="${VENV:-/tmp/soak-venv}"
mkdir -p "$OUT"
rm -f "$OUT"/samples.csv "$OUT"/soak.png "$OUT"/verdict.txt "$OUT"/.phase "$OUT"/.stop

stale() { # stale BINARY DIR...: the binary is missing or older than a source
  local bin=$1; shift
  [[ ! -x $bin ]] && return 0
  [[ -n $(find "$@" Cargo.toml Cargo.lock -newer "$bin" -type f 2>/dev/null | head -1) ]]
}
if [[ -z ${NO_BUILD:-} ]]; then
  if stale target/release/steward crates/engine crates/server crates/protocol; then
    echo "soak: building steward (release)"
    nice -n 10 cargo build --release -p steward-server --bin steward || exit 1
  fi
  if stale target/release/steward-bench crates/bench crates/protocol; then
    echo "soak: building steward-bench (release)"
    nice -n 10 cargo build --release -p steward-bench || exit 1
  fi
fi

PORT="${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}"
url="http://127.0.0.1:$PORT"
server_pid="" sampler_pid="" progress_pid="" bench_pid=""
cleanup() {
  touch "$OUT/.stop"
  [[ -n $bench_pid ]] && kill "$bench_pid" 2>/dev/null
  [[ -n $progress_pid ]] && kill "$progress_pid" 2>/dev/null
  [[ -n $sampler_pid ]] && kill "$sampler_pid" 2>/dev/null
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
  return 0
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck disable=SC2086
./target/release/steward serve --host 127.0.0.1 --port "$PORT" \
  --max-seqs "$MAX_SEQS" --max-waiting "$MAX_WAITING" ${SERVE_ARGS:-} >"$OUT/server.log" 2>&1 &
server_pid=$!
echo "soak: steward pid $server_pid on $url (--max-seqs $MAX_SEQS --max-waiting $MAX_WAITING ${SERVE_ARGS:-})"
for _ in $(seq 600); do
  curl -sf "$url/ready" >/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || { echo "soak: FAIL: the server exited while starting"; tail -20 "$OUT/server.log"; exit 1; }
  sleep 0.5
done
curl -sf "$url/ready" >/dev/null || { echo "soak: FAIL: not ready within 300 s"; exit 1; }

# The sampler: one CSV row a second (elapsed s, phase, RSS, /metrics gauges
# and ledger terms) until $OUT/.stop appears or the server is gone.
echo idle >"$OUT/.phase"
python3 - "$server_pid" "$url/metrics" "$OUT" <<'PY' &
import os, sys, time, urllib.request
pid, url, out = sys.argv[1], sys.argv[2], sys.argv[3]
gauges = [
    ("running", "steward_requests_running"), ("prefilling", "steward_requests_prefilling"),
    ("waiting", "steward_requests_waiting"), ("paused", "steward_requests_paused"),
    ("live_outboxes", "steward_live_outboxes"), ("permits", "steward_admission_permits"),
    ("kv_used", "steward_kv_cells_used"), ("kv_reserved", "steward_kv_cells_reserved"),
    ("kv_cached", "steward_kv_cells_cached"), ("kv_total", "steward_kv_cells_capacity"),
    ("prefix_entries", "steward_prefix_cache_entries"),
    ("finished", "steward_requests_finished_total"), ("cancelled", "steward_requests_cancelled_total"),
    ("failed", "steward_requests_failed_total"), ("http_responses", "steward_http_responses_total"),
    ("prompt_after_cancel", "steward_prompt_tokens_after_cancel_total"),
    ("steps", "steward_steps_total"), ("step_max_s", "steward_step_duration_max_seconds"),
]
terms = ["weights", "live_state", "reserved_growth", "kv_free", "kv_pool", "cached_prefixes",
         "host_prefixes", "compute_buffers", "other", "rss"]
cols = (["t_s", "phase", "rss_mib"] + [g[0] for g in gauges] + ["mem_" + t + "_mib" for t in terms]
        + ["server_cpu_pct", "others_cpu_pct"])
hz = os.sysconf("SC_CLK_TCK")
def cpu():  # (the server's CPU ticks, all busy ticks of the host)
    st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    host = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return int(st[11]) + int(st[12]), sum(host) - host[3] - host[4]
last_cpu, last_t = cpu(), time.time()
f = open(os.path.join(out, "samples.csv"), "w")
f.write(",".join(cols) + "\n")
t0 = time.time()
while not os.path.exists(os.path.join(out, ".stop")):
    t = time.time()
    try:
        rss = [l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS:")][0].split()[1]
    except (OSError, IndexError):
        break
    m = {}
    try:
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith("#") or " " not in line:
                continue
            name, v = line.rsplit(" ", 1)
            base = name.split("{")[0]
            if base == "steward_memory_bytes":
                m["mem:" + name.split('term="')[1].split('"')[0]] = float(v)
            else:
                m[base] = m.get(base, 0.0) + float(v)
    except Exception:
        pass
    try:
        phase = open(os.path.join(out, ".phase")).read().strip()
    except OSError:
        phase = "?"
    row = [f"{t - t0:.1f}", phase, f"{int(rss) / 1024:.1f}"]
    row += ["" if g not in m else f"{m[g]:g}" for _, g in gauges]
    row += ["" if "mem:" + x not in m else f"{m['mem:' + x] / 2**20:.1f}" for x in terms]
    try:
        now_cpu, now_t = cpu(), time.time()
    except OSError:
        break
    dt = max(1e-3, now_t - last_t) * hz / 100.0
    mine, host = now_cpu[0] - last_cpu[0], now_cpu[1] - last_cpu[1]
    row += [f"{mine / dt:.0f}", f"{max(0, host - mine) / dt:.0f}"]
    last_cpu, last_t = now_cpu, now_t
    f.write(",".join(row) + "\n")
    f.flush()
    time.sleep(max(0.0, 1.0 - (time.time() - t)))
PY
sampler_pid=$!

curl -s "$url/metrics" >"$OUT/metrics-before.txt"
sleep 2
echo load >"$OUT/.phase"
args=(run --url "$url" --workload "$WORKLOAD" --strict --settle-s 30
      --out "$OUT/bench.json" --html "$OUT/bench.html")
[[ -n ${CONVERSATIONS:-} ]] && args+=(--conversations "$CONVERSATIONS")
echo "soak: steward-bench ${args[*]}"
t_start=$(date +%s)
( while sleep 30; do
    tail -1 "$OUT/samples.csv" 2>/dev/null | awk -F, -v e=$(( $(date +%s) - t_start )) \
      '{printf "soak: %4ds  rss %s MiB  running %s  prefilling %s  waiting %s  finished %s  cancelled %s\n", e, $3, $4, $5, $6, $15, $16}'
  done ) &
progress_pid=$!
# In the background, so that a signal to this script is handled at once.
./target/release/steward-bench "${args[@]}" 2>"$OUT/bench.log" &
bench_pid=$!
wait "$bench_pid"
bench_rc=$?
bench_pid=""
kill "$progress_pid" 2>/dev/null
progress_pid=""
echo "soak: steward-bench exited $bench_rc after $(( $(date +%s) - t_start )) s"
grep -v '^\s*$' "$OUT/bench.log" | tail -40

# Idle again? Poll up to 30 s for every live-state gauge to reach 0.
echo settle >"$OUT/.phase"
sleep 3
idle_ok=0
for _ in $(seq 60); do
  curl -s "$url/metrics" >"$OUT/metrics-after.txt"
  if awk '
    /^steward_requests_(running|prefilling|waiting|paused) / || /^steward_kv_cells_(used|reserved) / ||
    /^steward_admission_permits / || /^steward_live_outboxes / ||
    /^steward_memory_bytes\{term="(live_state|reserved_growth)"\} / { if ($2 != 0) bad = 1 }
    END { exit bad }' "$OUT/metrics-after.txt"; then idle_ok=1; break; fi
  sleep 0.5
done
curl -s "$url/debug/ledger" >"$OUT/ledger-after.json"
curl -s "$url/debug/requests" >"$OUT/requests-after.json"
sleep 2
touch "$OUT/.stop"
wait "$sampler_pid" 2>/dev/null
sampler_pid=""

# Graceful shutdown: SIGTERM drains and exits 0.
kill -TERM "$server_pid"
shutdown_rc=124
for _ in $(seq 80); do
  if ! kill -0 "$server_pid" 2>/dev/null; then wait "$server_pid"; shutdown_rc=$?; break; fi
  sleep 0.5
done
server_pid=""

# The verdict, with the numbers.
python3 - "$OUT" "$bench_rc" "$idle_ok" "$shutdown_rc" "$WARMUP_FRAC" "$RSS_TOL_MIB" <<'PY' | tee "$OUT/verdict.txt"
import csv, json, os, statistics, sys
out, bench_rc, idle_ok, shutdown_rc = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
warm, tol = float(sys.argv[5]), float(sys.argv[6])
def metrics(p):
    m = {}
    for line in open(p):
        if line.startswith("#") or " " not in line:
            continue
        k, v = line.rsplit(" ", 1)
        m[k] = float(v)
    return m
after = metrics(os.path.join(out, "metrics-after.txt"))
g = lambda k: after.get(k, float("nan"))
rows = list(csv.DictReader(open(os.path.join(out, "samples.csv"))))
load = [r for r in rows if r["phase"] == "load"]
fails = []
try:
    s = json.load(open(os.path.join(out, "bench.json")))["summary"]
    a = s["classes"].get("all", {})
    print(f"requests {s['requests']}: 2xx {a.get('ok_2xx')}, 4xx {a.get('client_4xx')}, "
          f"429/503 {a.get('overload_429_503')}, other 5xx {a.get('other_5xx')}, transport {a.get('transport')}, "
          f"cancelled by us {a.get('cancelled_by_us')}, streams [DONE] {a.get('stream_done')}, "
          f"error events {a.get('stream_error_event')}; failures {s['failures']}")
    if s["failures"]:
        fails.append(f"{s['failures']} answers a correct server would not give (bench.log: FAILURE lines)")
except (OSError, ValueError, KeyError) as e:
    fails.append(f"no bench report ({e})")
if bench_rc != 0:
    fails.append(f"steward-bench exited {bench_rc} (3: not idle after the run, 4: strict failures)")
state = {k: g(f"steward_{k}") for k in ["requests_running", "requests_prefilling", "requests_waiting",
         "requests_paused", "kv_cells_used", "kv_cells_reserved", "kv_cells_cached", "admission_permits",
         "live_outboxes", "prefix_cache_entries", "prompt_tokens_after_cancel_total"]}
state["memory live_state"] = g('steward_memory_bytes{term="live_state"}')
state["memory reserved_growth"] = g('steward_memory_bytes{term="reserved_growth"}')
print("after: " + ", ".join(f"{k} {v:g}" for k, v in state.items()))
if not idle_ok:
    fails.append("not idle 30 s after the run (running/waiting/reserved/used/permits/outboxes not all 0)")
if load:
    k = max(1, int(len(load) * warm))
    post = load[k:] or load[-1:]
    w = min(10, len(post))
    rss = lambda rs: statistics.median(float(r["rss_mib"]) for r in rs)
    host = lambda rs: statistics.median(float(r["mem_host_prefixes_mib"] or 0) for r in rs)
    first, last = rss(post[:w]), rss(post[-w:])
    adj = (last - host(post[-w:])) - (first - host(post[:w]))
    print(f"RSS MiB: start {float(load[0]['rss_mib']):.1f}, after warm-up ({float(post[0]['t_s']):.0f} s) {first:.1f}, "
          f"end {last:.1f}, max {max(float(r['rss_mib']) for r in load):.1f}; growth after warm-up "
          f"{last - first:+.1f} ({adj:+.1f} less the host tier's growth), allowed {tol:g}")
    if adj > tol:
        fails.append(f"RSS grew {adj:+.1f} MiB after warm-up (host tier excluded), more than {tol:g}")
else:
    fails.append("no samples during the run")
if shutdown_rc != 0:
    fails.append(f"SIGTERM: the server exited {shutdown_rc} (124: not within 40 s)")
print("PASS" if not fails else "FAIL: " + "; ".join(fails))
sys.exit(1 if fails else 0)
PY
verdict=${PIPESTATUS[0]}

# The plot (matplotlib in a venv of its own; a missing plot fails nothing).
if [[ ! -x $VENV/bin/python ]] || ! "$VENV/bin/python" -c 'import matplotlib' 2>/dev/null; then
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q matplotlib >/dev/null 2>&1
fi
"$VENV/bin/python" - "$OUT" <<'PY' || echo "soak: no plot (matplotlib unavailable)"
import csv, os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
out = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(out, "samples.csv"))))
num = lambda k: [float(r[k]) if r[k] else float("nan") for r in rows]
t = num("t_s")
fig, ax = plt.subplots(4, 1, figsize=(11, 12), sharex=True)
ax[0].plot(t, num("rss_mib"), label="RSS (VmRSS)", color="black")
for term in ["weights", "kv_pool", "cached_prefixes", "host_prefixes", "live_state", "reserved_growth",
             "compute_buffers", "other"]:
    ax[0].plot(t, num(f"mem_{term}_mib"), label=term, linewidth=1)
ax[0].set_ylabel("MiB"); ax[0].set_title("RSS and memory-ledger terms"); ax[0].legend(fontsize=7, ncol=3)
for k in ["kv_used", "kv_reserved", "kv_cached"]:
    ax[1].plot(t, num(k), label=k, linewidth=1)
ax[1].set_ylabel("KV cells"); ax[1].legend(fontsize=8)
for k in ["running", "prefilling", "waiting", "paused"]:
    ax[2].plot(t, num(k), label=k, linewidth=1)
ax[2].set_ylabel("requests"); ax[2].legend(fontsize=8)
ax[3].plot(t, num("server_cpu_pct"), label="steward", linewidth=1)
ax[3].plot(t, num("others_cpu_pct"), label="everything else (bench, other processes)", linewidth=1)
ax[3].plot(t, [100 * x for x in num("step_max_s")], label="longest step so far (x100 s)", linewidth=1)
ax[3].set_ylabel("CPU %"); ax[3].set_xlabel("seconds"); ax[3].legend(fontsize=8)
for a in ax:
    for i, r in enumerate(rows):
        if i and r["phase"] != rows[i - 1]["phase"]:
            a.axvline(float(r["t_s"]), color="grey", linestyle=":", linewidth=1)
fig.tight_layout()
fig.savefig(os.path.join(out, "soak.png"), dpi=90)
PY
echo "soak: results in $OUT (samples.csv, soak.png, bench.json, verdict.txt)"
exit "$verdict"
