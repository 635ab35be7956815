#!/usr/bin/env python3
"""Real-browser check of Steward's built-in pages (the web chat at `/` and
the engine dashboard at `/dashboard`), driven through Debian's Chromium by
Playwright (never `playwright install`: the browser is /usr/bin/chromium).

It starts `steward serve` itself (default model, --max-seqs 4,
--ctx-per-seq 1024) on a free loopback port and checks:

  a) stream   the chat streams an answer: the assistant text is sampled
              while it streams and must grow, then end non-empty with a
              finish reason and token usage shown;
  b) stop     Stop during a long answer aborts the fetch, the partial answer
              is kept and marked stopped, and the server's
              steward_requests_cancelled_total (sum over samples) goes up;
  c) error    a request the server refuses (max_tokens past the context)
              shows the server's error message verbatim, with its code
              (the page's own request is replayed from Python to learn the
              exact words);
  d) dashboard  a long generation started from Python appears in
              #requests as prefilling/decoding, the step timeline and the
              memory ledger receive data, the KV panel shows used cells; when
              the client goes away, the cancellation is listed with its
              latency;
  e) reload   conversations survive a reload (localStorage): same list, the
              same answer text; a deleted one stays deleted;
  f) markdown md.js escapes HTML (no tag or javascript: link gets through)
              and renders fences, code, emphasis, lists, links;
  g) clean    no page error and no console error (CSP refusals included).
  h) canned   replies the default model cannot give, made in the browser
              (a fetch stand-in that trickles the stream in 40-byte pieces,
              and request interception): reasoning_content shown in a
              <details> open while it streams and folded after; tool_calls
              accumulated per index, shown with name and pretty JSON; an
              in-stream `data: {"error":...}` shown verbatim with the partial
              text kept; a 401 shows the message and focuses the key field.
  i) image    a second steward started with --mmproj (a random-weight gemma3
              projector, made by gen-random-mmproj.py when missing): the
              attach button is enabled there (disabled, with a tooltip, on
              the first server); a dropped file over 20 MiB and a non-image
              are refused with a message; a 64x64 PNG written here is
              attached through the file picker (thumbnail with a working x),
              "Describe this picture." is sent as an OpenAI content array
              (text + image_url data URI, byte for byte the PNG), the user's
              bubble shows the <img>, a reply arrives (noise: the projector is
              random); the next turn sends the picture again in the history;
              it survives a reload.
  Also: the model picker lists exactly GET /v1/models.

Screenshots (1280x800): docs/img/chat.png, docs/img/dashboard.png,
docs/img/chat-image.png.
Prints one line `browser check: PASS ...` or `browser check: FAIL ...` and
exits non-zero on any failure.
"""

import argparse
import base64
import http.client
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHROMIUM = "/usr/bin/chromium"
CHROME_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

results = []  # (name, ok, detail)


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check(name, ok, detail=""):
    results.append((name, bool(ok), detail))
    log(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    return bool(ok)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, web_dir, logfile, extra=()):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.pop("STEWARD_WEB_DIR", None)
        env.pop("STEWARD_API_KEY", None)
        env.pop("STEWARD_PORT", None)
        env.pop("STEWARD_MODEL", None)
        if web_dir:
            env["STEWARD_WEB_DIR"] = web_dir
        self.log = open(logfile, "w")
        cmd = [binary, "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--max-seqs", "4", "--ctx-per-seq", "1024", *extra]
        log("starting " + " ".join(cmd))
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout=240):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"steward exited with {self.proc.returncode} (see its log)")
            try:
                with urllib.request.urlopen(self.base + "/ready", timeout=2) as r:
                    if r.status == 200:
                        return time.time() - t0
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        raise RuntimeError("steward was not ready in time")

    def get(self, path):
        with urllib.request.urlopen(self.base + path, timeout=10) as r:
            return r.status, r.read().decode()

    def post(self, path, body):
        req = urllib.request.Request(self.base + path, data=body.encode() if isinstance(body, str) else body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def cancelled_total(self):
        _, text = self.get("/metrics")
        total = 0.0
        for line in text.splitlines():
            if line.startswith("steward_requests_cancelled_total"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class LongStream(threading.Thread):
    """A streamed chat completion from Python that keeps generating
    (ignore_eos) until `leave` is set, then drops the connection."""

    def __init__(self, port, max_tokens):
        super().__init__(daemon=True)
        self.port = port
        self.max_tokens = max_tokens
        self.leave = threading.Event()
        self.first = threading.Event()
        self.id = None
        self.chunks = 0
        self.error = None
        self.finished = False

    def run(self):
        body = json.dumps({
            "messages": [{"role": "user", "content": "Write a long essay about the history of computing."}],
            "max_tokens": self.max_tokens, "temperature": 1.0, "ignore_eos": True, "stream": True,
        })
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            if resp.status != 200:
                self.error = f"HTTP {resp.status}: {resp.read()[:300]!r}"
                return
            while not self.leave.is_set():
                line = resp.readline()
                if not line:
                    self.finished = True
                    break
                if line.startswith(b"data: {"):
                    obj = json.loads(line[6:])
                    self.id = self.id or obj.get("id")
                    self.chunks += 1
                    self.first.set()
                elif line.startswith(b"data: [DONE]"):
                    self.finished = True
                    break
        except Exception as e:  # noqa: BLE001 - reported by the check
            self.error = repr(e)
        finally:
            self.first.set()
            try:
                if conn.sock:
                    conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


def png(w, h):
    """A small RGB PNG (a colour gradient with a ring), from zlib and struct alone."""
    rows = b"".join(
        b"\x00" + b"".join(
            bytes((230, 80, 60) if 18 <= ((x - w / 2) ** 2 + (y - h / 2) ** 2) ** 0.5 <= 24
                  else (x * 255 // w, y * 255 // h, 200))
            for x in range(w))
        for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def wait_for(fn, timeout, every=0.1):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = fn()
        if v:
            return v
        time.sleep(every)
    return fn()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steward", default=os.path.join(ROOT, "target/release/steward"))
    ap.add_argument("--shots", default=os.path.join(ROOT, "docs/img"), help="folder for the screenshots")
    ap.add_argument("--web-dir", default=None,
                    help="serve the pages from this folder (STEWARD_WEB_DIR) instead of the embedded copy")
    ap.add_argument("--keep", action="store_true", help="keep the server log and the browser profile")
    a = ap.parse_args()

    t_start = time.time()
    from playwright.sync_api import sync_playwright  # noqa: E402 - installed by browser_check.sh

    work = tempfile.mkdtemp(prefix="steward-browser-")
    os.makedirs(a.shots, exist_ok=True)
    server = Server(a.steward, a.web_dir, os.path.join(work, "steward.log"))
    mm = None
    console_errors = []
    try:
        took = server.wait_ready()
        log(f"server ready on {server.base} in {took:.1f}s")
        st, _ = server.get("/dashboard")
        if st != 200:
            raise RuntimeError(f"GET /dashboard answered {st}: the binary serves no pages (built with --no-web?)")

        with sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                os.path.join(work, "profile"),
                executable_path=CHROMIUM,
                headless=True,
                args=CHROME_ARGS,
                viewport={"width": 1280, "height": 800},
            )
            ctx.set_default_timeout(20000)

            def watch(page, name):
                page.on("pageerror", lambda e: console_errors.append(f"{name}: page error: {e}"))
                page.on("console", lambda m: console_errors.append(f"{name}: console {m.type}: {m.text}")
                        if m.type == "error" else None)

            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            watch(page, "chat")
            requests_seen = []
            page.on("request", lambda r: requests_seen.append(r)
                    if r.url.endswith("/v1/chat/completions") else None)

            page.goto(server.base + "/")
            page.wait_for_function("document.querySelectorAll('#model option').length > 0", timeout=10000)
            model_ids = page.eval_on_selector_all("#model option", "os => os.map(o => o.value)")
            _, models_json = server.get("/v1/models")
            listed = [m["id"] for m in json.loads(models_json)["data"]]
            check("models", model_ids == listed, f"picker {model_ids} vs /v1/models {listed}")
            attach_off = page.evaluate("(() => { const b = document.querySelector('#attach');"
                                       " return [b.disabled, b.title]; })()")
            check("attach off", attach_off[0] is True and "does not take images" in attach_off[1],
                  f"no projector: attach disabled {attach_off[0]}, tooltip {attach_off[1]!r}")

            def open_settings():
                if page.is_hidden("#settings"):
                    page.click("#settings-toggle")

            def set_field(sel, value):
                open_settings()
                page.fill(sel, str(value))

            last = "#messages > .msg.assistant:last-child"

            # ---- a) a streamed answer grows, then finishes ----
            set_field("#max_tokens", 72)
            set_field("#temperature", 0)
            page.fill("#prompt", "Show a short Python function that adds two numbers, in a code block.")
            page.click("#send")
            samples = []
            t0 = time.time()
            while time.time() - t0 < 60:
                state, n = page.evaluate(
                    "() => { const m = [...document.querySelectorAll('.msg.assistant')].pop();"
                    " return m ? [m.dataset.state, m.querySelector('.content').innerText.length] : [null, 0]; }")
                if state == "streaming":
                    samples.append(n)
                elif state in ("done", "error", "stopped"):
                    break
                time.sleep(0.05)
            page.wait_for_selector(f"{last}:is([data-state=done], [data-state=error])", timeout=60000)
            grew = sorted(set(x for x in samples if x > 0))
            final = page.inner_text(f"{last} .content")
            finish = page.get_attribute(f"{last} .meta .finish", "data-finish") if page.query_selector(
                f"{last} .meta .finish") else None
            meta = page.inner_text(f"{last} .meta")
            check("stream", len(grew) >= 2 and final.strip() and finish in ("stop", "length"),
                  f"lengths seen while streaming {grew[:6]}{'...' if len(grew) > 6 else ''}, final {len(final)} chars, "
                  f"finish {finish!r}, meta {meta!r}")
            check("usage", "completion tokens" in meta and "tok/s" in meta, meta)
            answer_a = final
            title_a = page.inner_text("#conversations li.active .conv-title")

            # ---- b) Stop cancels on the server ----
            page.click("#new-chat")
            set_field("#max_tokens", 900)
            set_field("#temperature", 1)
            before = server.cancelled_total()
            page.fill("#prompt", "Tell me a very long story about a dragon and a lighthouse keeper.")
            page.click("#send")
            got_text = wait_for(lambda: len(page.inner_text(f"{last} .content")) > 20, 30)
            page.click("#stop")
            t_stop = time.time()
            after = wait_for(lambda: (lambda v: v if v >= before + 1 else None)(server.cancelled_total()), 10, 0.1)
            after = after or server.cancelled_total()
            took_cancel = time.time() - t_stop
            page.wait_for_selector(f"{last}[data-state=stopped]", timeout=5000)
            partial = page.inner_text(f"{last} .content")
            check("stop", got_text and after >= before + 1 and partial.strip()
                  and page.inner_text(f"{last} .meta .finish") == "stopped",
                  f"cancelled_total {before:g} -> {after:g} ({took_cancel:.2f}s after Stop), partial answer "
                  f"{len(partial)} chars kept, marked stopped")

            # ---- c) an error as the server words it ----
            page.click("#new-chat")
            set_field("#max_tokens", 2000)
            set_field("#temperature", "")
            requests_seen.clear()
            page.fill("#prompt", "Hello there")
            page.click("#send")
            page.wait_for_selector(f"{last}[data-state=error] .error", timeout=10000)
            shown = page.inner_text(f"{last} .error .error-message")
            code_shown = page.inner_text(f"{last} .error .error-code")
            sent = requests_seen[-1].post_data if requests_seen else "{}"
            status, body = server.post("/v1/chat/completions", sent)
            want = json.loads(body)["error"] if status != 200 else {}
            check("error", status == 400 and shown == want.get("message") and want.get("code", "") in code_shown
                  and "context" in shown,
                  f"server {status} {want.get('code')!r}: page shows {shown!r} [{code_shown}]")

            # ---- h) reasoning, tool calls, in-stream errors and 401 from canned replies ----
            # SmolLM2 neither reasons nor calls tools: these replies are
            # served by the browser's own request interception, shaped as
            # the server's stream is.
            def sse(*objs):
                return "".join(f"data: {o if isinstance(o, str) else json.dumps(o)}\n\n" for o in objs)

            def canned(status, body, ctype="text/event-stream"):
                def handler(route):
                    route.fulfill(status=status, body=body, headers={"content-type": ctype})
                page.route("**/v1/chat/completions", handler)
                return handler

            def ch(delta, finish=None):
                return {"id": "chatcmpl-canned", "object": "chat.completion.chunk", "model": "canned",
                        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": None}

            reply = sse(
                ch({"role": "assistant", "content": "", "reasoning_content": "Let me think"}),
                ch({"reasoning_content": " about the weather."}),
                ch({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                    "function": {"name": "get_weather", "arguments": "{\"city\": "}}]}),
                ch({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\", \"days\": 2}"}}]}),
                ch({"tool_calls": [{"index": 1, "id": "call_2", "type": "function",
                                    "function": {"name": "get_time", "arguments": "{}"}}]}),
                ch({"content": "Checking **Paris**."}),
                ch({}, "tool_calls"),
                {"id": "chatcmpl-canned", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9}},
                "[DONE]")
            # This reply trickles in 40-byte pieces (lines cut anywhere),
            # through a fetch stand-in for the next chat request, so the
            # page is seen mid-stream: reasoning open while it streams.
            page.evaluate("""(text) => {
                const real = window.fetch;
                window.fetch = function (url, opts) {
                  if (!String(url).endsWith('/v1/chat/completions')) return real.apply(this, arguments);
                  window.fetch = real;
                  const bytes = new TextEncoder().encode(text);
                  let at = 0;
                  const body = new ReadableStream({ pull(c) {
                    return new Promise(r => setTimeout(() => {
                      if (at < bytes.length) { c.enqueue(bytes.slice(at, at + 40)); at += 40; } else c.close();
                      r();
                    }, 25));
                  }});
                  return Promise.resolve(new Response(body, { status: 200, headers: { 'content-type': 'text/event-stream' } }));
                };
            }""", reply)
            page.click("#new-chat")
            set_field("#max_tokens", "")
            page.fill("#prompt", "What is the weather in Paris?")
            page.click("#send")
            page.wait_for_selector(f"{last}[data-state=streaming] details.reasoning:not(.hidden)", timeout=10000)
            open_mid = page.evaluate(f"document.querySelector('{last} details.reasoning').open")
            page.wait_for_selector(f"{last}[data-state=done]", timeout=10000)
            r = page.evaluate("""(sel) => {
                const m = document.querySelector(sel);
                const det = m.querySelector('details.reasoning');
                return {
                  reasoning: det && !det.classList.contains('hidden') ? det.querySelector('.reasoning-body').textContent : null,
                  open: det && det.open,
                  calls: [...m.querySelectorAll('.toolcall')].map(t => [t.querySelector('.toolcall-name').innerText,
                                                                     t.querySelector('.toolcall-args').innerText]),
                  strong: m.querySelector('.content strong') && m.querySelector('.content strong').innerText,
                  finish: m.querySelector('.meta .finish') && m.querySelector('.meta .finish').dataset.finish,
                };
            }""", last)
            calls_ok = [c[0] for c in r["calls"]] == ["get_weather", "get_time"] and \
                json.loads(r["calls"][0][1]) == {"city": "Paris", "days": 2} and "\n" in r["calls"][0][1]
            r["open_while_streaming"] = open_mid
            check("reasoning+tools", r["reasoning"] == "Let me think about the weather." and open_mid is True
                  and r["open"] is False and calls_ok and r["strong"] == "Paris" and r["finish"] == "tool_calls",
                  json.dumps(r))

            h = canned(200, sse(ch({"role": "assistant", "content": "Partial"}),
                                {"error": {"message": "the engine failed: out of memory in step 12",
                                           "type": "server_error", "param": None, "code": "engine_failed"}}))
            page.fill("#prompt", "And tomorrow?")
            page.click("#send")
            page.wait_for_selector(f"{last}[data-state=error]", timeout=10000)
            page.unroute("**/v1/chat/completions", h)
            shown = page.inner_text(f"{last} .error")
            check("stream error", "the engine failed: out of memory in step 12" in shown and "engine_failed" in shown
                  and page.inner_text(f"{last} .content") == "Partial", " ".join(shown.split()))

            h = canned(401, json.dumps({"error": {"message": "a valid API key is required (Authorization: Bearer)",
                                                  "type": "authentication_error", "param": None,
                                                  "code": "invalid_api_key"}}), "application/json")
            page.fill("#prompt", "Hello?")
            page.click("#send")
            page.wait_for_selector(f"{last}[data-state=error]", timeout=10000)
            page.unroute("**/v1/chat/completions", h)
            shown = page.inner_text(f"{last} .error .error-message")
            focused = page.evaluate("document.activeElement && document.activeElement.id")
            check("401", shown == "a valid API key is required (Authorization: Bearer)" and focused == "api-key"
                  and page.is_visible("#settings"), f"shows {shown!r}, focus on #{focused}")

            # ---- f) markdown is safe and renders ----
            md = page.evaluate("""() => {
                const d = document.createElement('div');
                d.innerHTML = StewardMD.render([
                  '<img src=x onerror="window.__pwned=1"> <script>window.__pwned=1</script>',
                  '[x](javascript:alert(1)) [y](https://example.org/a?b=1&c=2) **bold** *it* `<b>code</b>`',
                  '"><svg onload=alert(1)>',
                  '', '- one', '- two', '', '> quote', '', '## Head',
                  '', '```html', '<script>alert(1)</script>', '```'].join('\\n'));
                const links = [...d.querySelectorAll('a')].map(a => a.getAttribute('href'));
                return {
                  tags: [...d.querySelectorAll('img,script,svg,iframe')].length,
                  handlers: [...d.querySelectorAll('*')].filter(e => [...e.attributes].some(x => /^on/i.test(x.name))).length,
                  links, strong: !!d.querySelector('strong'), em: !!d.querySelector('em'),
                  code: d.querySelector('p code') && d.querySelector('p code').textContent,
                  li: d.querySelectorAll('ul li').length, quote: !!d.querySelector('blockquote'),
                  h2: !!d.querySelector('h2'), fence: d.querySelector('.codeblock pre code') &&
                    d.querySelector('.codeblock pre code').textContent, copy: !!d.querySelector('.codeblock button.copy'),
                };
            }""")
            check("markdown", md["tags"] == 0 and md["handlers"] == 0 and md["links"] == ["https://example.org/a?b=1&c=2"]
                  and md["strong"] and md["em"] and md["code"] == "<b>code</b>" and md["li"] == 2 and md["quote"]
                  and md["h2"] and md["fence"] == "<script>alert(1)</script>" and md["copy"], json.dumps(md))

            # ---- d) the dashboard shows a running request ----
            cancels_before = server.cancelled_total()
            ls = LongStream(server.port, 900)
            ls.start()
            ls.first.wait(30)
            dash = ctx.new_page()
            watch(dash, "dashboard")
            dash.goto(server.base + "/dashboard")
            dash.wait_for_selector("#status[data-state=connected]", timeout=10000)
            row_sel = "#requests tbody tr[data-state=decoding], #requests tbody tr[data-state=prefilling]"
            row = dash.wait_for_selector(row_sel, timeout=15000)
            row_state = row.get_attribute("data-state")
            row_id = row.get_attribute("data-id")
            row_text = row.inner_text()
            check("dashboard request", row_state in ("decoding", "prefilling") and not ls.error,
                  f"row {row_id} {row_state}: {' '.join(row_text.split())!r} (client saw id {ls.id}, "
                  f"{ls.chunks} chunks{', error ' + ls.error if ls.error else ''})")
            dash.wait_for_function(
                "() => { const s = document.querySelector('.steps-chart'), l = document.querySelector('.ledger-chart');"
                " return s && l && +s.dataset.steps >= 5 && +l.dataset.samples >= 3; }", timeout=10000)
            steps = dash.get_attribute(".steps-chart", "data-steps")
            samples_l = dash.get_attribute(".ledger-chart", "data-samples")
            weights = dash.inner_text(".ledger-table tr[data-term='weights'] td.num")
            rss = dash.inner_text(".ledger-table tr[data-term='rss'] td.num")
            kv = dash.inner_text(".kv-list")
            used = re.search(r"cells used\s*([\d,]+)", kv)
            check("dashboard data", int(steps) >= 5 and int(samples_l) >= 3 and re.search(r"\d", weights)
                  and "iB" in weights and used and int(used.group(1).replace(",", "")) > 0,
                  f"{steps} steps in the timeline, {samples_l} ledger samples, weights {weights}, rss {rss}, "
                  f"KV cells used {used.group(1) if used else None}")
            # Let the request, rows and charts move a little for the picture.
            try:
                dash.wait_for_function(
                    f"() => {{ const r = document.querySelector(\"#requests tr[data-id='{row_id}']\");"
                    " return r && +r.children[5].textContent.replace(/,/g, '') >= 24; }", timeout=8000)
            except Exception:  # noqa: BLE001 - only the picture waits for it
                pass
            dash.screenshot(path=os.path.join(a.shots, "dashboard.png"))
            # The client goes away: its cancellation is listed with a latency.
            ls.leave.set()
            ls.join(10)
            crow = ""
            try:
                dash.wait_for_selector(f".cancellations tbody tr[data-id='{ls.id}']", timeout=8000)
                crow = " ".join(dash.inner_text(f".cancellations tbody tr[data-id='{ls.id}']").split())
            except Exception as e:  # noqa: BLE001
                crow = f"no row for {ls.id}: {type(e).__name__}"
            check("dashboard cancel", bool(re.search(r"\d+(\.\d+)? (ms|s) ", crow)) and not ls.finished
                  and server.cancelled_total() >= cancels_before + 1,
                  f"listed: {crow!r}" + (" (the stream had already finished)" if ls.finished else ""))
            dash.close()

            # ---- e) conversations survive a reload ----
            titles = page.eval_on_selector_all("#conversations .conv-title", "bs => bs.map(b => b.textContent)")
            page.reload()
            page.wait_for_selector("#conversations li")
            titles2 = page.eval_on_selector_all("#conversations .conv-title", "bs => bs.map(b => b.textContent)")
            idx = titles2.index(title_a) if title_a in titles2 else -1
            again = ""
            if idx >= 0:
                page.click(f"#conversations li >> nth={idx} >> .conv-title")
                again = page.inner_text(".msg.assistant >> nth=0 >> .content")
            same = titles2 == titles and len(titles) >= 3 and again == answer_a
            # Delete the error conversation (the first), reload: it stays gone.
            page.hover("#conversations li >> nth=0")
            page.click("#conversations li >> nth=0 >> .conv-delete")
            left = page.eval_on_selector_all("#conversations .conv-title", "bs => bs.map(b => b.textContent)")
            page.reload()
            page.wait_for_selector("#conversations li")
            left2 = page.eval_on_selector_all("#conversations .conv-title", "bs => bs.map(b => b.textContent)")
            check("reload", same and left2 == left and len(left) == len(titles) - 1,
                  f"{len(titles)} conversations before and {len(titles2)} after reload, answer "
                  f"{'same' if again == answer_a else 'DIFFERENT'}; after a delete {len(left2)} remain")

            # The picture: the streamed answer of (a), reloaded from storage.
            if title_a in left2:
                page.click(f"#conversations li >> nth={left2.index(title_a)} >> .conv-title")
            if not page.is_hidden("#settings"):
                page.click("#settings-toggle")
            page.screenshot(path=os.path.join(a.shots, "chat.png"))

            # ---- i) a picture through the attach button, on a server with a projector ----
            proj = os.path.join(ROOT, "target/mmproj/gemma3.gguf")
            if not os.path.exists(proj):
                log("making the random-weight projector " + proj)
                subprocess.run([sys.executable, os.path.join(ROOT, "scripts/gen-random-mmproj.py"),
                                "--kind", "gemma3", "--out", proj], check=True)
            mm = Server(a.steward, a.web_dir, os.path.join(work, "steward-mmproj.log"), ["--mmproj", proj])
            took = mm.wait_ready()
            log(f"server with a projector ready on {mm.base} in {took:.1f}s")
            picture = png(64, 64)
            pic_path = os.path.join(work, "picture.png")
            with open(pic_path, "wb") as f:
                f.write(picture)
            pic_url = "data:image/png;base64," + base64.b64encode(picture).decode()

            img_page = ctx.new_page()
            watch(img_page, "image chat")
            sent = []
            img_page.on("request", lambda r: sent.append(r.post_data_json)
                        if r.url.endswith("/v1/chat/completions") else None)
            img_page.goto(mm.base + "/")
            img_page.wait_for_selector("#attach:not([disabled])", timeout=20000)
            on_title = img_page.get_attribute("#attach", "title")
            # Refused before reading: over 20 MiB, and not an image (dropped).
            refused = img_page.evaluate("""() => {
                const drop = (file) => {
                  const dt = new DataTransfer();
                  dt.items.add(file);
                  document.querySelector('#composer').dispatchEvent(
                    new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
                  return document.querySelector('#notice').textContent;
                };
                return [drop(new File([new Uint8Array(21 * 1024 * 1024)], 'big.png', { type: 'image/png' })),
                        drop(new File(['hello'], 'notes.txt', { type: 'text/plain' })),
                        document.querySelectorAll('#attachments .attachment').length];
            }""")
            check("attach limits", "big.png" in refused[0] and "MiB" in refused[0] and "notes.txt" in refused[1]
                  and refused[2] == 0, f"tooltip {on_title!r}; refused {refused[0]!r} and {refused[1]!r}")
            # Attach through the file picker; the x removes it; attach again.
            img_page.set_input_files("#attach-file", pic_path)
            img_page.wait_for_selector("#attachments .attachment img", timeout=10000)
            img_page.click("#attachments .attachment-remove")
            removed = img_page.is_hidden("#attachments") and not img_page.query_selector("#attachments .attachment")
            with img_page.expect_file_chooser() as fc:
                img_page.click("#attach")
            fc.value.set_files(pic_path)
            img_page.wait_for_selector("#attachments .attachment img", timeout=10000)
            preview = img_page.get_attribute("#attachments .attachment img", "src")
            check("attach preview", removed and preview == pic_url,
                  f"thumbnail {'shows the PNG' if preview == pic_url else repr((preview or '')[:60])}, "
                  f"x {'removes it' if removed else 'did NOT remove it'}")

            img_page.click("#settings-toggle")
            img_page.fill("#max_tokens", "32")
            img_page.fill("#temperature", "0")
            img_page.click("#settings-toggle")
            img_page.fill("#prompt", "Describe this picture.")
            img_page.click("#send")
            img_page.wait_for_selector(f"{last}:is([data-state=done], [data-state=error])", timeout=120000)
            r = img_page.evaluate("""(sel) => {
                const u = [...document.querySelectorAll('.msg.user')].pop();
                const im = u && u.querySelector('img[data-testid=user-image]');
                const m = document.querySelector(sel);
                return { img: im ? [im.getAttribute('src'), im.naturalWidth, im.naturalHeight] : null,
                         text: u && u.querySelector('.content') && u.querySelector('.content').innerText,
                         state: m.dataset.state, reply: m.querySelector('.content').innerText,
                         error: m.querySelector('.error').innerText, meta: m.querySelector('.meta').innerText,
                         pending: document.querySelectorAll('#attachments .attachment').length };
            }""", last)
            body = sent[0] if sent else {}
            want = [{"type": "text", "text": "Describe this picture."},
                    {"type": "image_url", "image_url": {"url": pic_url}}]
            got = (body.get("messages") or [{}])[-1]
            check("image sent", got == {"role": "user", "content": want},
                  "the user message is text + image_url (the PNG's data URI)" if got.get("content") == want
                  else f"sent {json.dumps(got)[:300]}")
            check("image shown", r["img"] is not None and r["img"][0] == pic_url and r["img"][1:] == [64, 64]
                  and r["text"] == "Describe this picture." and r["pending"] == 0,
                  f"user bubble img {r['img'][1:] if r['img'] else None}, text {r['text']!r}, "
                  f"composer attachments left {r['pending']}")
            check("image reply", r["state"] == "done" and r["reply"].strip() != "",
                  f"{r['state']}: {len(r['reply'])} chars (noise), meta {' '.join(r['meta'].split())!r}"
                  + (f", error {r['error']!r}" if r["error"] else ""))
            # The next turn carries the picture in the history.
            img_page.fill("#prompt", "And the colours?")
            img_page.click("#send")
            img_page.wait_for_function("() => document.querySelectorAll('.msg.assistant:is([data-state=done],"
                                       " [data-state=error])').length === 2", timeout=120000)
            hist = [m for m in (sent[1] if len(sent) > 1 else {}).get("messages", []) if m["role"] == "user"]
            check("image history", len(hist) == 2 and hist[0]["content"] == want
                  and hist[1]["content"] == "And the colours?",
                  "the second request sends the first user message again with its image_url"
                  if hist and hist[0]["content"] == want else f"second request's user messages: {json.dumps(hist)[:300]}")
            img_page.reload()
            img_page.wait_for_selector(".msg.user img[data-testid=user-image]", timeout=10000)
            kept = img_page.get_attribute(".msg.user img[data-testid=user-image]", "src")
            check("image reload", kept == pic_url, "the picture is back from localStorage after a reload"
                  if kept == pic_url else f"after reload: {(kept or '')[:60]!r}")
            # The picture: the conversation, and one more attached in the composer.
            img_page.set_input_files("#attach-file", pic_path)
            img_page.wait_for_selector("#attachments .attachment img", timeout=10000)
            img_page.fill("#prompt", "What about this one?")
            img_page.screenshot(path=os.path.join(a.shots, "chat-image.png"))
            img_page.close()

            ctx.close()
        # The refused requests of (c) and (h) are logged by Chromium itself as
        # failed resource loads (400, 401): expected; everything else counts.
        errs = [e for e in console_errors if not re.search(r"the server responded with a status of (400|401)", e)]
        check("clean", not errs, "; ".join(errs[:5]) if errs else "no page or console error")
    except Exception as e:  # noqa: BLE001
        check("run", False, f"{type(e).__name__}: {e}")
        try:
            for name in ("steward.log", "steward-mmproj.log"):
                if os.path.exists(os.path.join(work, name)):
                    with open(os.path.join(work, name)) as f:
                        log(f"{name} tail:\n" + f.read()[-2000:])
        except OSError:
            pass
    finally:
        server.stop()
        if mm:
            mm.stop()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")

    failed = [n for n, ok, _ in results if not ok]
    dt = time.time() - t_start
    if failed:
        print(f"browser check: FAIL ({', '.join(failed)}) - {len(results) - len(failed)} passed, "
              f"{len(failed)} failed in {dt:.0f}s")
        return 1
    print(f"browser check: PASS - {len(results)} passed, 0 failed in {dt:.0f}s "
          f"(screenshots in {os.path.relpath(a.shots, ROOT)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
