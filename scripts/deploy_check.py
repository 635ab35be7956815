#!/usr/bin/env python3
"""[7/8] The Kubernetes manifests in deploy/, offline: every core object
against Kubernetes' own schemas (kubernetes-validate, strict: unknown
fields refused), a kustomize render where kubectl is installed, and the
pieces agreeing with each other and with Steward: the Service and the
InferencePool select the Deployment's pods, the ports they name exist and
are the ones the container's arguments open, the probes hit /health and
/ready, the pods carry the engine-type label, the memory limit is above
--memory-budget, the image is the tag scripts/image.sh builds for this
version and runs as the image's user. The InferencePool is a CRD whose
schema is not on PyPI: it is validated (jsonschema) against
deploy/schema/inferencepool-v1.json, written from the Gateway API Inference
Extension's v1 API reference, and broken pools must fail that schema.
Usage: deploy_check.py [KUBERNETES_VALIDATE]"""
import copy
import glob
import json
import re
import shutil
import subprocess
import sys

import tomllib

import yaml
from jsonschema import Draft202012Validator

failures = []


def ok(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def mem_bytes(q):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "K": 10**3, "M": 10**6, "G": 10**9}
    for u, m in units.items():
        if q.endswith(u):
            return float(q[: -len(u)]) * m
    return float(q)


validator = sys.argv[1] if len(sys.argv) > 1 else "kubernetes-validate"
files = sorted(glob.glob("deploy/*.yaml"))
docs = [d for f in files for d in yaml.safe_load_all(open(f)) if d]
core = [f for f in files if not f.endswith(("inferencepool.yaml", "kustomization.yaml"))]
r = subprocess.run([validator, "--strict", "--quiet", *core], capture_output=True, text=True)
ok(r.returncode == 0, f"kubernetes-validate --strict {' '.join(core)}" + (f": {r.stdout}{r.stderr}" if r.returncode else ""))
if shutil.which("kubectl"):
    r = subprocess.run(["kubectl", "kustomize", "deploy"], capture_output=True, text=True)
    ok(r.returncode == 0, "kubectl kustomize deploy renders")
else:
    print("skip kubectl kustomize (no kubectl here)")

kinds = {d["kind"]: d for d in docs}
dep, svc, pool = kinds["Deployment"], kinds["Service"], kinds["InferencePool"]
pod_labels = dep["spec"]["template"]["metadata"]["labels"]
sel = dep["spec"]["selector"]["matchLabels"]
ok(all(pod_labels.get(k) == v for k, v in sel.items()), "the Deployment selects its own pods")
ok(all(pod_labels.get(k) == v for k, v in svc["spec"]["selector"].items()), "the Service selects the pods")
ok(all(pod_labels.get(k) == v for k, v in pool["spec"]["selector"]["matchLabels"].items()),
   "the InferencePool selects the pods")
ok(pod_labels.get("inference.networking.k8s.io/engine-type") == "vllm", "the pods carry the engine-type label")
c = dep["spec"]["template"]["spec"]["containers"][0]
args = dict(a[2:].split("=", 1) for a in c["args"] if a.startswith("--") and "=" in a)
ports = {p["name"]: p["containerPort"] for p in c["ports"]}
ok(ports["http"] == int(args["port"]) and ports["metrics"] == int(args["metrics-port"]),
   "container ports are the ones --port and --metrics-port open")
ok(pool["spec"]["targetPorts"][0]["number"] == int(args["port"]), "the InferencePool targets the API port")
ok(pool["spec"].get("endpointPickerRef", {}).get("name"), "the InferencePool names its endpoint picker")
ok(all(p["targetPort"] in ports for p in svc["spec"]["ports"]), "the Service's target ports exist")
probes = {k: c[k]["httpGet"]["path"] for k in ("livenessProbe", "readinessProbe", "startupProbe")}
ok(probes == {"livenessProbe": "/health", "readinessProbe": "/ready", "startupProbe": "/health"},
   f"probes: {probes}")
lim = mem_bytes(c["resources"]["limits"]["memory"])
ok(lim > mem_bytes(args["memory-budget"]) and mem_bytes(c["resources"]["requests"]["memory"]) <= lim,
   "memory: request <= limit, limit above --memory-budget")
grace = dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
ok(grace > int(args["drain-timeout-s"]), "terminationGracePeriodSeconds outlasts --drain-timeout-s")

# The image: the tag scripts/image.sh builds (the model baked in) for the
# workspace version, run as the user the image declares.
with open("Cargo.toml", "rb") as f:
    version = tomllib.load(f)["workspace"]["package"]["version"]
ok(c["image"] == f"localhost/steward:{version}-smollm2",
   f"the image is localhost/steward:{version}-smollm2 (scripts/image.sh): {c['image']}")
user = re.search(r"^USER\s+(\d+)", open("deploy/Containerfile").read(), re.M)
psc = dep["spec"]["template"]["spec"].get("securityContext", {})
ok(user is not None and psc.get("runAsUser") == int(user.group(1)) and psc.get("runAsNonRoot") is True
   and c.get("securityContext", {}).get("readOnlyRootFilesystem") is True,
   f"non-root as the image's USER ({user.group(1) if user else None}), read-only root")

# The InferencePool against its schema; broken pools must fail it.
schema = json.load(open("deploy/schema/inferencepool-v1.json"))
Draft202012Validator.check_schema(schema)
pool_schema = Draft202012Validator(schema)
errs = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in pool_schema.iter_errors(pool)]
ok(not errs, "the InferencePool validates against deploy/schema/inferencepool-v1.json" + (f": {errs}" if errs else ""))


def broken(what, change):
    p = copy.deepcopy(pool)
    change(p["spec"])
    ok(any(True for _ in pool_schema.iter_errors(p)), f"a broken InferencePool fails the schema: {what}")


broken("no targetPorts", lambda s: s.pop("targetPorts"))
broken("nine targetPorts (at most 8)", lambda s: s.update(targetPorts=[{"number": 8000 + i} for i in range(9)]))
broken("one target port twice", lambda s: s.update(targetPorts=[{"number": 8000}, {"number": 8000}]))
broken("port 70000", lambda s: s.update(targetPorts=[{"number": 70000}]))
broken("an empty selector", lambda s: s.update(selector={"matchLabels": {}}))
broken("the picker, a Service, without its port", lambda s: s["endpointPickerRef"].pop("port"))
broken("failureMode not FailOpen or FailClose", lambda s: s["endpointPickerRef"].update(failureMode="Open"))
broken("an unknown field (targetPort)", lambda s: s.update(targetPort={"number": 8000}))
print(f"deploy check: {'FAIL' if failures else 'PASS'} ({len(failures)} failed)")
sys.exit(1 if failures else 0)
