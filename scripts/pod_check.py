#!/usr/bin/env python3
"""deploy/steward.yaml as a real pod: `podman kube play` on a rendered copy
of the Deployment and its Service, with the image the manifest names (built
by scripts/image.sh when missing; nothing is pulled: imagePullPolicy Never).
The copy differs from the manifest where podman 4.3 needs it to, and in its
drain time:
- replicas 1: kube play makes one pod per replica, and each publishes the
  same host ports, so a second one fails to start;
- every container port gets a free hostPort on 127.0.0.1: kube play
  publishes a port with no hostPort on the same number on 0.0.0.0 (8000 and
  9090 would be taken on every interface); the check reaches the pod there;
- probe ports named (port: metrics) are resolved to numbers: kube play turns
  the liveness probe into a healthcheck `curl http://localhost:0/...` otherwise;
- the names carry this process's id, so runs do not collide;
- the drain is long (--drain-timeout-s=600, terminationGracePeriodSeconds
  660): the check asserts that SIGTERM drains a request in flight and exits
  0, not how fast a loaded machine decodes (deploy_check.py holds the
  manifest's grace period above its drain).
Then: /ready on the metrics port is polled (the readiness probe's path and
port; no time asserted), the pod's settings are read back (memory limit,
uid, read-only root), an OpenAI chat completion goes through the API port, a
streaming request sized to last ~5 s here (the decode rate measured first)
is started and, once its first text arrived, the pod's container gets
SIGTERM as the kubelet sends it (`podman stop -t
<terminationGracePeriodSeconds>` on the container): the stream completes, the
log shows the drain began with it in flight, and the container exits 0.
Not `podman pod stop` or `podman kube down`: podman 4.3 stops the pod's
infra (pause) container alongside the others, at once, which removes the
pod's network while the server drains; the server finishes the request and
exits 0, but its last bytes go nowhere and the client hangs. (Kubernetes
keeps the pod's network until its containers have exited.) `podman kube
down` and `podman pod rm -f` clean up afterwards, whatever happens.

Usage (target/pyenv/bin/python): pod_check.py [--tarball TGZ]"""
import argparse
import atexit
import os
import signal
import sys
import tempfile

import yaml

from checklib import failures, free_port, ok
from containerlib import (ROOT, container_state, drain_in_flight, ensure_images, phase, podman, stream_through_stop,
                          stream_tokens, wait_http)

tmp = tempfile.mkdtemp(prefix="steward-pod-check-")
rendered = os.path.join(tmp, "steward.yaml")
pod = None


def cleanup():
    global pod
    if os.path.exists(rendered):
        podman("kube", "down", rendered, check=False, timeout=120)
    if pod:
        podman("pod", "rm", "-f", "-t", "0", pod, check=False, timeout=120)
        pod = None
    if os.path.exists(rendered):
        os.remove(rendered)
    if os.path.isdir(tmp):
        os.rmdir(tmp)


atexit.register(cleanup)
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(sig, lambda s, f: sys.exit(128 + s))


def mem_bytes(q):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "K": 10**3, "M": 10**6, "G": 10**9}
    for u, m in units.items():
        if q.endswith(u):
            return int(float(q[: -len(u)]) * m)
    return int(q)


def main():
    global pod
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tarball")
    a = ap.parse_args()
    docs = [d for d in yaml.safe_load_all(open(ROOT / "deploy/steward.yaml")) if d]
    dep = next(d for d in docs if d["kind"] == "Deployment")
    svc = next(d for d in docs if d["kind"] == "Service")
    spec = dep["spec"]["template"]["spec"]
    c = spec["containers"][0]
    image = c["image"]
    ensure_images([image], a.tarball)

    # The rendered copy (see the doc string for why each change).
    name = f"steward-check-{os.getpid()}"
    dep["metadata"]["name"] = name
    svc["metadata"]["name"] = name
    dep["spec"]["replicas"] = 1
    c["imagePullPolicy"] = "Never"
    host = {}  # container port (number) -> its port on 127.0.0.1
    for p in c["ports"]:
        p["hostPort"] = host[p["containerPort"]] = free_port()
        p["hostIP"] = "127.0.0.1"
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        g = c.get(probe, {}).get("httpGet")
        if g and isinstance(g["port"], str):
            g["port"] = named[g["port"]]
    c["args"] = [x for x in c["args"] if not x.startswith("--drain-timeout-s")] + ["--drain-timeout-s=600"]
    spec["terminationGracePeriodSeconds"] = 660
    with open(rendered, "w") as f:
        yaml.safe_dump_all([dep, svc], f, sort_keys=False)

    phase(f"podman kube play ({image}, replicas 1, container ports on 127.0.0.1: {host})")
    rc, out, err = podman("kube", "play", rendered, check=False, timeout=300)
    pod = f"{name}-pod-0"
    ok(rc == 0, f"podman kube play: exit {rc}" + (f": {err[-1500:]}" if rc else ""))
    if rc != 0:
        return
    cname = f"{pod}-{c['name']}"
    rc, out, _ = podman("pod", "ps", "--filter", f"name={name}", "--format", "{{.Name}}")
    ok(out.split() == [pod], f"one pod for the Deployment: {out.split()}")

    ready_probe = c["readinessProbe"]["httpGet"]
    url = f"http://127.0.0.1:{host[ready_probe['port']]}{ready_probe['path']}"
    up = wait_http(url, lambda: container_state(cname)[0], f"pod {pod}")
    ok(up, f"the readiness probe's {ready_probe['path']} on port {ready_probe['port']} answers 200")
    if not up:
        print(podman("logs", cname, check=False)[2][-3000:])
        return

    fmt = "{{.HostConfig.Memory}} {{.Config.User}} {{.HostConfig.ReadonlyRootfs}} {{.Config.StopTimeout}}"
    mem, user, ro, stop_timeout = podman("inspect", "--format", fmt, cname)[1].split()
    want = mem_bytes(c["resources"]["limits"]["memory"])
    ok(int(mem) == want, f"podman applied the memory limit: {mem} bytes (limits.memory {c['resources']['limits']['memory']})")
    rc, uid, _ = podman("exec", cname, "id", "-u", check=False)
    ok(rc == 0 and uid.isdigit() and int(uid) != 0, f"the container runs as uid {uid} (user {user}), not root")
    rc, _, err = podman("exec", cname, "touch", "/opt/steward/written", check=False)
    ok(ro == "true" and rc != 0 and "Read-only" in err, f"readOnlyRootFilesystem applied ({ro}; {err.strip().split(': ')[-1]})")
    rc, out, err = podman("healthcheck", "run", cname, check=False)
    hc = podman("inspect", "--format", "{{.Config.Healthcheck.Test}}", cname)[1]
    ok(rc == 0, f"the liveness probe, which podman runs as a health check {hc}: {out or err.strip()[-200:]}")
    print(f"     (podman's stop timeout for the container: {stop_timeout} s; terminationGracePeriodSeconds "
          f"is {spec['terminationGracePeriodSeconds']}: passed to podman stop below)")

    from openai import OpenAI

    args = dict(x[2:].split("=", 1) for x in c["args"] if x.startswith("--") and "=" in x)
    model = args.get("served-model-name", "smol")
    base = f"http://127.0.0.1:{host[named['http']]}/v1"
    client = OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120)
    try:
        ids = [m.id for m in client.models.list()]
        r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Name three colors."}],
                                           max_tokens=16, temperature=0)
        text = r.choices[0].message.content
        ok(ids == [model] and bool(text) and r.usage.completion_tokens > 0,
           f"OpenAI client through the pod's API port: models {ids}, chat {text!r}")
    except Exception as e:  # noqa: BLE001
        ok(False, f"OpenAI client through the pod's API port: {e!r}")

    grace = spec["terminationGracePeriodSeconds"]
    phase(f"a streaming request, SIGTERM (podman stop -t {grace} {cname}) while it is in flight")
    n = stream_tokens(base, "unused", model, 5, most=256)
    st = stream_through_stop(base, "unused", model,
                             lambda: podman("stop", "-t", str(grace), cname, check=False, timeout=grace + 60)[0], n)
    ok(st["error"] is None and st["finish_reason"] == "length" and st["completion_tokens"] == n
       and st["chunks_after_stop"] > 0, f"the stream completed through the drain ({st})")
    running, code = container_state(cname)
    ok(st["stop"] == 0 and not running and code == 0, f"podman stop returned {st['stop']}, the container exited {code}")
    logs = podman("logs", cname, check=False)
    in_flight, cut = drain_in_flight(logs[1] + logs[2])
    ok(in_flight is not None and in_flight >= 1, f"the drain began with {in_flight} request(s) in flight")
    ok(not cut, "nothing was cut at the grace period")


if __name__ == "__main__":
    try:
        main()
    finally:
        cleanup()
    phase(f"pod check: {'FAIL' if failures else 'PASS'} ({len(failures)} failed)")
    sys.exit(1 if failures else 0)
