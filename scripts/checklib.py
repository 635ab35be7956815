"""Helpers the live-server checks share (router_check, kv_events_check,
rpc_check): a pass/fail line per check, a free port, a JSON request."""
import json
import socket
import sys
import time
import urllib.error
import urllib.request

failures = []


def ok(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def free_port(host="127.0.0.1"):
    s = socket.socket()
    s.bind((host, 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http(url, body=None, headers=None, timeout=60, method=None):
    """(status, body text); status 0 and the reason when nothing answered."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return 0, str(e)


def png(w=24, h=16, seed=0):
    """A small RGB PNG (a colour gradient, shifted by `seed`), written with
    zlib and struct."""
    import struct
    import zlib
    rows = b"".join(b"\x00" + bytes(v for x in range(w)
                                    for v in ((x * 255 // w + seed * 37) % 256,
                                              (y * 255 // h + seed * 74) % 256, 128))
                    for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def wait_ready(url, proc, what):
    """Poll `url` until it answers; exit naming `what` if `proc` ends first
    or it never does (5 minutes)."""
    for _ in range(1500):
        if proc.poll() is not None:
            sys.exit(f"{what} exited: see its log")
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except Exception:
            time.sleep(0.2)
    sys.exit(f"{what} never became ready")


def stop(proc, timeout=30):
    """SIGTERM `proc` and wait for it; SIGKILL if it outlasts `timeout` s."""
    import subprocess
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
