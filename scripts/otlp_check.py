#!/usr/bin/env python3
"""[6/7] Traces over OTLP and the access log, against a receiver of our own
(the `opentelemetry-proto` package's messages; gRPC through grpcio, HTTP
with the standard library: no collector binary is reachable here).

  - gRPC: a streamed chat request sent with a `traceparent` makes one
    trace whose root's parent is the client's span (same trace id, and the
    response's `traceparent` names it); its stages (tokenize, queue,
    admission, prefill with a child per prefill step, decode, retire) come
    in order, each starting where the one before ended, and their
    durations add up to the time the client measured within 5%;
  - a request whose client leaves mid-prefill shows `cancellation` and
    `retire` spans, and its access log line says `cancelled_at=prefill`;
  - every request has one access log line (`--log-format json`);
  - HTTP/protobuf: the same server shape over the other transport;
  - with the receiver gone, 1,000 requests complete with outputs equal to
    those before (each prompt cached, its last token computed alone: the
    same computation every time), RSS stays bounded, and
    steward_trace_spans_dropped_total equals the spans built since.

Assertions are on spans, counters and outputs; time is only compared
with time measured around the same request.

Usage: otlp_check.py STEWARD_BINARY
"""
import concurrent.futures
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2 as pb
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc as pbg

from checklib import failures, free_port, ok, stop, wait_ready
from checklib import http as _http

STAGES = ["tokenize", "queue", "admission", "prefill", "decode", "retire"]


class Receiver:
    """Spans received, by trace id (hex)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.spans = {}
        self.requests = 0

    def take(self, req):
        with self.lock:
            self.requests += 1
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        self.spans.setdefault(s.trace_id.hex(), []).append(s)

    def trace(self, tid, want, deadline=60):
        """The spans of trace `tid` once `want(spans)` holds (or None)."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            with self.lock:
                got = list(self.spans.get(tid, []))
            if got and want(got):
                return got
            time.sleep(0.2)
        return None


class Grpc(pbg.TraceServiceServicer):
    def __init__(self, rx):
        self.rx = rx

    def Export(self, request, context):  # noqa: N802 (gRPC's name)
        self.rx.take(request)
        return pb.ExportTraceServiceResponse()


def start_grpc(rx):
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    pbg.add_TraceServiceServicer_to_server(Grpc(rx), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


def start_http(rx):
    class H(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            ok_path = self.path == "/v1/traces" and self.headers.get("content-type") == "application/x-protobuf"
            if ok_path:
                req = pb.ExportTraceServiceRequest()
                req.ParseFromString(body)
                rx.take(req)
            out = pb.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200 if ok_path else 400)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, srv.server_address[1]


class Server:
    def __init__(self, steward, model, d, name, extra):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = os.path.join(d, f"{name}.log")
        self.proc = subprocess.Popen(
            [steward, "serve", "--model", model, "--port", str(self.port), "--threads", "1",
             "--max-seqs", "12", "--ctx-per-seq", "2048", "--prompt-budget", "64", "--no-web",
             "--log-format", "json", "--state-dir", "none", *extra],
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        wait_ready(self.base + "/ready", self.proc, f"steward serve ({name}; log {self.log})")

    def stop(self):
        stop(self.proc, 60)

    def metric(self, name):
        _, text = _http(self.base + "/metrics")
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith(name + " ") or line.startswith(name + "{"))

    def access_lines(self):
        out = []
        with open(self.log) as f:
            for line in f:
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if j.get("target") == "steward::access":
                    out.append(j)
        return out

    def rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0


def stream(base, messages, max_tokens, headers=None):
    """(client seconds from send to the last byte, response headers, text)."""
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "ignore_eos": True}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", body,
                                 {"content-type": "application/json", **(headers or {})})
    t0 = time.monotonic()
    text = ""
    with urllib.request.urlopen(req, timeout=300) as r:
        hdrs = dict(r.headers)
        for line in r:
            line = line.decode().strip()
            if line.startswith("data: {"):
                for c in json.loads(line[6:]).get("choices", []):
                    text += (c.get("delta") or {}).get("content") or ""
    return time.monotonic() - t0, hdrs, text


def by_name(spans):
    d = {}
    for s in spans:
        d.setdefault(s.name, []).append(s)
    return d


def check_trace(srv, rx, transport):
    client_trace = os.urandom(16).hex()
    client_span = os.urandom(8).hex()
    tp = f"00-{client_trace}-{client_span}-01"
    long_user = "Summarise this log. " + " ".join(f"Line {i}: the pump at station {i % 7} ran fine." for i in range(40))
    secs, hdrs, text = stream(srv.base, [{"role": "user", "content": long_user}], 24,
                              {"traceparent": tp, "x-request-id": f"otlp-{transport}-1"})
    ok(bool(text), f"{transport}: the streamed answer came ({len(text)} chars)")
    back = hdrs.get("traceparent", "")
    ok(back.startswith(f"00-{client_trace}-") and not back.startswith(f"00-{client_trace}-{client_span}"),
       f"{transport}: the response's traceparent names Steward's root in the client's trace ({back})")
    spans = rx.trace(client_trace, lambda s: any(x.name.startswith("POST ") for x in s))
    ok(spans is not None, f"{transport}: the receiver got trace {client_trace}")
    if spans is None:
        return
    names = by_name(spans)
    roots = [s for s in spans if s.name.startswith("POST ")]
    root = roots[0]
    ok(len(roots) == 1 and root.parent_span_id.hex() == client_span,
       f"{transport}: one root, whose parent is the client's span ({root.parent_span_id.hex()})")
    attrs = {a.key: a.value for a in root.attributes}
    ok(attrs.get("steward.request_id") and attrs["steward.request_id"].string_value == f"otlp-{transport}-1",
       f"{transport}: the root carries the request id")
    stages = [names.get(n, [None])[0] for n in STAGES]
    ok(all(stages), f"{transport}: every stage has its span ({sorted(names)})")
    if not all(stages):
        return
    steps = names.get("prefill step", [])
    prefill = names["prefill"][0]
    ok(len(steps) >= 2 and all(s.parent_span_id == prefill.span_id for s in steps),
       f"{transport}: {len(steps)} prefill steps, children of prefill")
    ordered = all(a.end_time_unix_nano <= b.start_time_unix_nano + 1000
                  for a, b in zip(stages, stages[1:]))
    ok(ordered and all(s.parent_span_id == root.span_id for s in stages),
       f"{transport}: the stages are the root's children, in order, each starting where the last ended")
    total = sum(s.end_time_unix_nano - s.start_time_unix_nano for s in stages) / 1e9
    ok(abs(total - secs) <= 0.05 * secs,
       f"{transport}: the stages add up to {total:.3f} s, the client measured {secs:.3f} s (within 5%)")
    decode = names["decode"][0]
    ev = [e.name for e in decode.events]
    ok(ev == ["first token", "first text sent"], f"{transport}: decode's events: {ev}")
    check_exemplars(srv, client_trace, transport)


def check_exemplars(srv, trace, transport):
    """/metrics as OpenMetrics (parsed by prometheus_client's strict
    parser) carries this trace as an exemplar of the TTFT and inter-token
    histograms."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
    req = urllib.request.Request(srv.base + "/metrics",
                                 headers={"accept": "application/openmetrics-text; version=1.0.0"})
    with urllib.request.urlopen(req, timeout=60) as r:
        ctype, text = r.headers.get("content-type", ""), r.read().decode()
    try:
        fams = {f.name: f for f in text_string_to_metric_families(text)}
    except Exception as e:  # noqa: BLE001
        ok(False, f"{transport}: /metrics as OpenMetrics parses ({e})")
        return
    ok(ctype.startswith("application/openmetrics-text"), f"{transport}: OpenMetrics content type ({ctype})")
    for fam in ("steward_time_to_first_text_seconds", "steward_inter_token_latency_seconds"):
        ex = [s.exemplar.labels.get("trace_id") for s in fams[fam].samples
              if s.name.endswith("_bucket") and s.exemplar]
        ok(trace in ex, f"{transport}: {fam} has the request's trace as an exemplar ({len(ex)} exemplars)")


def check_cancel(srv, rx):
    """A client that leaves mid-prefill: cancellation and retire spans."""
    tid = os.urandom(16).hex()
    tp = f"00-{tid}-{os.urandom(8).hex()}-01"
    user = " ".join(f"Record {i}: crate {i * 7 % 13} shipped." for i in range(110))
    body = json.dumps({"messages": [{"role": "user", "content": user}], "max_tokens": 8,
                       "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
              + f"x-request-id: otlp-cancel\r\ntraceparent: {tp}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
              + body)
    # Leave once its prefill has run a step or two (/debug/requests).
    left = False
    for _ in range(600):
        _, t = _http(srv.base + "/debug/requests")
        try:
            reqs = json.loads(t)
        except ValueError:
            reqs = {}
        mine = [r for r in reqs.get("requests", []) if r.get("id") == "otlp-cancel"]
        if mine and mine[0].get("state") == "prefilling" and mine[0].get("prompt_computed", 0) > 0:
            left = True
            break
        time.sleep(0.05)
    s.close()
    ok(left, "cancel: the request was seen prefilling before the client left")
    spans = rx.trace(tid, lambda sp: any(x.name.startswith("POST ") for x in sp))
    ok(spans is not None, "cancel: its trace arrived")
    if spans is None:
        return
    names = by_name(spans)
    ok("cancellation" in names and "retire" in names and "decode" not in names,
       f"cancel: cancellation and retire spans, no decode ({sorted(names)})")
    end = {a.key: a.value.string_value for a in names.get("retire", [names["tokenize"][0]])[0].attributes}.get("steward.end")
    ok(end == "cancelled", f"cancel: retire says {end}")
    for _ in range(100):
        lines = [l for l in srv.access_lines() if l.get("request_id") == "otlp-cancel"]
        if lines:
            break
        time.sleep(0.1)
    ok(lines and lines[0].get("cancelled_at") == "prefill",
       f"cancel: the access log says {lines[0].get('cancelled_at') if lines else None}")


def check_dead_collector(srv, rx_server):
    """The receiver gone: 1,000 requests, same outputs, bounded RSS, every
    span built since counted as dropped."""
    prompts = [f"Say one word about the number {i}." for i in range(10)]

    def one(p):
        st, t = _http(srv.base + "/v1/completions", {"prompt": p, "max_tokens": 1, "temperature": 0})
        return json.loads(t)["choices"][0]["text"] if st == 200 else f"<{st}>"

    for p in prompts:
        one(p)  # cached from now on: each later request computes its last token alone
    want = {p: one(p) for p in prompts}
    # Every span built so far settled (exported) before the receiver goes.
    for _ in range(300):
        settled = srv.metric("steward_trace_spans_exported_total") + srv.metric("steward_trace_spans_dropped_total")
        if settled == srv.metric("steward_trace_spans_total"):
            break
        time.sleep(0.2)
    rx_server.stop(0)
    built0, dropped0 = srv.metric("steward_trace_spans_total"), srv.metric("steward_trace_spans_dropped_total")
    rss = []
    same = 0
    for i in range(1000):
        p = prompts[i % 10]
        same += one(p) == want[p]
        if i in (199, 999):
            rss.append(srv.rss_mb())
    ok(same == 1000, f"dead collector: {same}/1000 outputs equal those before")
    ok(rss[1] - rss[0] < 64, f"dead collector: RSS {rss[0]:.0f} MB after 200, {rss[1]:.0f} MB after 1,000")
    built = dropped = 0
    for _ in range(300):
        built = srv.metric("steward_trace_spans_total") - built0
        dropped = srv.metric("steward_trace_spans_dropped_total") - dropped0
        if built > 0 and dropped == built:
            break
        time.sleep(0.2)
    ok(built >= 5000 and dropped == built,
       f"dead collector: {dropped:.0f} of {built:.0f} spans built counted as dropped")


def main():
    steward = sys.argv[1]
    d = tempfile.mkdtemp(prefix="steward-otlp-")
    model = subprocess.run([steward, "fetch-model"], capture_output=True, text=True, check=True).stdout.strip()
    rx = Receiver()
    gsrv, gport = start_grpc(rx)
    srv = Server(steward, model, d, "grpc", ["--otlp-endpoint", f"http://127.0.0.1:{gport}"])
    try:
        check_trace(srv, rx, "grpc")
        check_cancel(srv, rx)
        lines = srv.access_lines()
        ok(any(l.get("request_id") == "otlp-grpc-1" and l.get("status") == 200 and l.get("generated_tokens") == 24
               for l in lines), f"access log: a JSON line for the streamed request ({len(lines)} lines)")
        check_dead_collector(srv, gsrv)
    finally:
        srv.stop()
    hrx = Receiver()
    hsrv, hport = start_http(hrx)
    srv = Server(steward, model, d, "http", ["--otlp-endpoint", f"http://127.0.0.1:{hport}",
                                             "--otlp-protocol", "http/protobuf"])
    try:
        check_trace(srv, hrx, "http")
    finally:
        srv.stop()
        hsrv.shutdown()
    if failures:
        print(f"otlp check: {len(failures)} FAILED; logs in {d}")
        sys.exit(1)
    print("otlp check: PASS")


if __name__ == "__main__":
    main()
