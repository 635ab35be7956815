"""Access checks against a real `steward serve` (the binary, the default
model): TLS with a self-signed certificate made here (openssl), driven by the
official OpenAI Python client; API keys from a key file, reloaded on SIGHUP;
a per-key rate limit; the unauthenticated --metrics-port; the certificate
itself reloaded on SIGHUP. Exits non-zero on the first failed check.

Usage: python access_check.py STEWARD_BINARY
"""

import hashlib
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import httpx
import openai

checks = 0


def ok(cond, what):
    global checks
    if not cond:
        print(f"FAIL: {what}")
        sys.exit(1)
    checks += 1
    print(f"ok: {what}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def make_cert(d, name):
    cert, key = os.path.join(d, f"{name}.pem"), os.path.join(d, f"{name}.key")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "2", "-subj", f"/CN={name}", "-keyout", key, "-out", cert,
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True)
    return cert, key


def fingerprint(port):
    """sha256 of the certificate the server presents to a new connection."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            return hashlib.sha256(s.getpeercert(binary_form=True)).hexdigest()


def file_sha(path):
    pem = open(path).read()
    der = ssl.PEM_cert_to_DER_cert(pem)
    return hashlib.sha256(der).hexdigest()


def get(url, key=None, ctx=None):
    req = urllib.request.Request(url)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


def main():
    binary = sys.argv[1]
    d = tempfile.mkdtemp(prefix="steward-access-")
    cert, key = make_cert(d, "first")
    keys = os.path.join(d, "keys")
    with open(keys, "w") as f:
        f.write("# test keys\nalpha-key-0001 name=alpha\nlimited-key-02 name=limited rpm=3\n")
    port, mport = free_port(), free_port()
    log = open(os.path.join(d, "server.log"), "w")
    proc = subprocess.Popen(
        [binary, "serve", "--host", "127.0.0.1", "--port", str(port), "--max-seqs", "2",
         "--ctx-per-seq", "512", "--served-model-name", "smol", "--api-key-file", keys,
         "--metrics-port", str(mport), "--tls-cert", cert, "--tls-key", key],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        run(proc, port, mport, d, cert, key, keys)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(f"access: {checks} checks passed")


def run(proc, port, mport, d, cert, key, keys):
    base = f"https://localhost:{port}/v1"
    tls = ssl.create_default_context(cafile=cert)
    for _ in range(300):
        if proc.poll() is not None:
            print(open(os.path.join(d, "server.log")).read())
            ok(False, "server started")
        try:
            if get(f"http://127.0.0.1:{mport}/ready")[0] == 200:
                break
        except OSError:
            pass
        time.sleep(0.2)
    # --metrics-port: no key needed there; the API port still wants one.
    st, _, body = get(f"http://127.0.0.1:{mport}/metrics")
    ok(st == 200 and "steward_api_keys 2" in body, "metrics port answers /metrics without a key")
    # The scrape as a gateway reads it: prometheus_client's parser takes the
    # whole text, and every vllm:* sample names its model (model_name).
    from prometheus_client.parser import text_string_to_metric_families
    fams = list(text_string_to_metric_families(body))
    vllm = [smp for f in fams if f.name.startswith("vllm:") for smp in f.samples]
    ok(len(vllm) >= 8 and all(smp.labels.get("model_name") == "smol" for smp in vllm),
       f"metrics port: {len(fams)} families parse, {len(vllm)} vllm:* samples, each with model_name")
    st, _, body = get(f"http://127.0.0.1:{mport}/get_load")
    ok(st == 200 and json.loads(body)["load"] == 0, "metrics port answers /get_load without a key")
    ok(get(f"http://127.0.0.1:{mport}/v1/models")[0] == 404, "metrics port serves no API routes")
    ok(get(f"https://localhost:{port}/metrics", ctx=tls)[0] == 401, "API port's /metrics wants a key")

    # TLS: the official client, trusting only our certificate.
    client = openai.OpenAI(base_url=base, api_key="alpha-key-0001", max_retries=0,
                           http_client=httpx.Client(verify=cert))
    r = client.chat.completions.create(model="smol", max_tokens=8, temperature=0,
                                       messages=[{"role": "user", "content": "Say hi"}])
    ok(r.choices[0].message.content and r.usage.completion_tokens > 0,
       "OpenAI client over TLS gets an answer")
    chunks = list(client.chat.completions.create(
        model="smol", max_tokens=6, stream=True, messages=[{"role": "user", "content": "Count"}]))
    ok(len(chunks) >= 2, "OpenAI client streams over TLS")
    untrusting = openai.OpenAI(base_url=base, api_key="alpha-key-0001", max_retries=0)
    try:
        untrusting.models.list()
        ok(False, "a client not trusting the certificate is refused")
    except openai.APIConnectionError:
        ok(True, "a client not trusting the certificate is refused")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            s.settimeout(5)
            got = s.recv(100)
    except OSError:
        got = b""
    ok(not got.startswith(b"HTTP/1.1 200"), "plain HTTP on the TLS port gets no answer")

    # Keys: a wrong one is 401 in OpenAI's shape.
    wrong = openai.OpenAI(base_url=base, api_key="wrong-key-0000", max_retries=0,
                          http_client=httpx.Client(verify=cert))
    try:
        wrong.models.list()
        ok(False, "a wrong key is refused")
    except openai.AuthenticationError as e:
        ok(e.status_code == 401 and e.body.get("code") == "invalid_api_key", "a wrong key is refused with 401")

    # Rate limit: 3 a minute for `limited`, then 429 with Retry-After.
    lim = openai.OpenAI(base_url=base, api_key="limited-key-02", max_retries=0,
                        http_client=httpx.Client(verify=cert))
    for i in range(3):
        raw = lim.models.with_raw_response.list()
        ok(raw.headers.get("x-ratelimit-limit-requests") == "3"
           and raw.headers.get("x-ratelimit-remaining-requests") == str(2 - i),
           f"limited key request {i + 1} of 3 passes, remaining {2 - i}")
    try:
        lim.models.list()
        ok(False, "the 4th request in a minute is limited")
    except openai.RateLimitError as e:
        ra = int(e.response.headers.get("retry-after", "0"))
        ok(e.status_code == 429 and e.body.get("code") == "rate_limit_exceeded" and 1 <= ra <= 20,
           f"the 4th request in a minute is 429 rate_limit_exceeded, Retry-After {ra}")
    ok(client.models.list().data, "another key is not limited by it")

    # SIGHUP: a new key file (alpha out, beta in) and a new certificate.
    first_fp = fingerprint(port)
    ok(first_fp == file_sha(cert), "the server presents the first certificate")
    with open(keys, "w") as f:
        f.write("beta-key-00003 name=beta\nlimited-key-02 name=limited rpm=3\n")
    cert2, key2 = make_cert(d, "second")
    os.replace(cert2, cert)
    os.replace(key2, key)
    proc.send_signal(signal.SIGHUP)
    tls2 = ssl.create_default_context(cafile=cert)
    beta_ok = False
    for _ in range(50):
        try:
            if get(f"https://localhost:{port}/v1/models", "beta-key-00003", tls2)[0] == 200:
                beta_ok = True
                break
        except (OSError, ssl.SSLError):
            pass
        time.sleep(0.1)
    ok(beta_ok, "after SIGHUP the new key works (with the new certificate)")
    ok(fingerprint(port) == file_sha(cert) != first_fp, "after SIGHUP new connections get the new certificate")
    ok(get(f"https://localhost:{port}/v1/models", "alpha-key-0001", tls2)[0] == 401,
       "after SIGHUP the removed key is refused")
    st, h, _ = get(f"https://localhost:{port}/v1/models", "limited-key-02", tls2)
    ok(st == 429, "a key kept across the reload keeps its rate bucket")
    # A bad file is not taken: the keys in force stay.
    with open(keys, "w") as f:
        f.write("short\n")
    proc.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    ok(get(f"https://localhost:{port}/v1/models", "beta-key-00003", tls2)[0] == 200,
       "a bad key file on SIGHUP keeps the keys in force")
    _, _, body = get(f"http://127.0.0.1:{mport}/metrics")
    ok('steward_key_reloads_total{result="ok"} 1' in body and 'steward_key_reloads_total{result="failed"} 1' in body
       and "steward_rate_limited_total 2" in body,
       "reloads and rate limiting are counted in /metrics")


if __name__ == "__main__":
    main()
