"""Helpers the container checks share (image_check.py, pod_check.py): podman
with the repository's configuration (deploy/podman/containers.conf, passed as
CONTAINERS_CONF on every call), the image names, polling, and a streaming
request that a SIGTERM drain must let finish."""
import os
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

from checklib import http

ROOT = Path(__file__).resolve().parent.parent
ENV = dict(os.environ, CONTAINERS_CONF=str(ROOT / "deploy/podman/containers.conf"))
T0 = time.monotonic()


def phase(what):
    print(f"== [{time.monotonic() - T0:.0f} s] {what}", flush=True)


def podman(*args, check=True, timeout=None):
    """podman ARGS with the repository's configuration; (rc, stdout, stderr)."""
    r = subprocess.run(["podman", *args], env=ENV, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()[-2000:]}")
    return r.returncode, r.stdout.strip(), r.stderr.strip()


def version():
    """The workspace version (Cargo.toml), which the release tarball and the image tags carry."""
    with open(ROOT / "Cargo.toml", "rb") as f:
        return tomllib.load(f)["workspace"]["package"]["version"]


def image_exists(image):
    return podman("image", "exists", image, check=False)[0] == 0


def ensure_images(images, tarball=None, rebuild=False):
    """Builds the images with scripts/image.sh when one is missing (or always, with rebuild)."""
    if rebuild or not all(image_exists(i) for i in images):
        phase("scripts/image.sh" + (f" {tarball}" if tarball else ""))
        subprocess.run([str(ROOT / "scripts/image.sh"), *([tarball] if tarball else [])], check=True, env=ENV)
    missing = [i for i in images if not image_exists(i)]
    if missing:
        sys.exit(f"missing image(s) after scripts/image.sh: {missing}")


def container_state(name):
    """(running, exit code) of a container, (False, None) when it is gone."""
    rc, out, _ = podman("inspect", "--format", "{{.State.Running}} {{.State.ExitCode}}", name, check=False)
    if rc != 0:
        return False, None
    running, code = out.split()
    return running == "true", int(code)


def wait_http(url, alive, what, deadline_s=900, headers=None):
    """Polls URL until it answers 200 while alive() holds; no timing is asserted,
    the deadline only ends a hung start (a first start fetches and converts the model)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if http(url, headers=headers, timeout=5)[0] == 200:
            phase(f"{what}: {url} answered 200")
            return True
        if not alive():
            print(f"{what}: exited before {url} answered", flush=True)
            return False
        time.sleep(0.5)
    print(f"{what}: {url} did not answer 200 within {deadline_s} s", flush=True)
    return False


def stream_tokens(base_url, key, model, seconds, most=512):
    """How many tokens a stream should ask for to last about `seconds` here:
    the decode rate of a 32-token request, measured now (a loaded machine
    decodes a fraction of an idle one's rate). Only sizes the request: the
    stream must outlast the SIGTERM's delivery and finish within the drain."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=float(os.environ.get("STREAM_TIMEOUT", 300)))
    t = time.monotonic()
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Count to fifty."}],
                                       max_tokens=32, temperature=0, extra_body={"ignore_eos": True})
    rate = r.usage.completion_tokens / max(time.monotonic() - t, 1e-3)
    n = max(32, min(most, int(rate * seconds)))
    print(f"     ({rate:.1f} tokens/s now: the stream asks for {n} tokens)", flush=True)
    return n


def stream_through_stop(base_url, key, model, stop, max_tokens=256):
    """Starts a streaming chat completion of exactly max_tokens tokens
    (ignore_eos), calls stop() on a thread once the first text arrives, reads
    the stream to its end and returns what happened: the finish reason, the
    usage, text chunks received after stop() began, stop()'s result."""
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=float(os.environ.get("STREAM_TIMEOUT", 300)))
    out = {"finish_reason": None, "completion_tokens": None, "chunks_after_stop": 0, "error": None}
    stopper = None
    result = {}

    def run_stop():
        result["value"] = stop()

    try:
        with client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Tell a long story about a lighthouse."}],
            max_tokens=max_tokens, temperature=0, stream=True, stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        ) as s:
            for chunk in s:
                if chunk.usage is not None:
                    out["completion_tokens"] = chunk.usage.completion_tokens
                if not chunk.choices:
                    continue
                c = chunk.choices[0]
                out["finish_reason"] = c.finish_reason or out["finish_reason"]
                if c.delta.content:
                    if stopper is None:
                        stopper = threading.Thread(target=run_stop, daemon=True)
                        stopper.start()
                    else:
                        out["chunks_after_stop"] += 1
    except Exception as e:  # noqa: BLE001
        out["error"] = repr(e)
    if stopper is None:
        stopper = threading.Thread(target=run_stop, daemon=True)
        stopper.start()
    stopper.join()
    out["stop"] = result.get("value")
    return out


def drain_in_flight(logs):
    """From a server log: the requests in flight when the SIGTERM drain began
    (None: no drain logged), and whether the grace period cut any."""
    import re

    logs = re.sub(r"\x1b\[[0-9;]*m", "", logs)
    m = re.search(r"draining\s+in_flight=(\d+)", logs)
    return (int(m.group(1)) if m else None), "grace period over" in logs
