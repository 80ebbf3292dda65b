"""Which bytes produced a bench figure: the stack's commit, the GPUs, and each server's image.

Collected once per run, best effort and quickly (each probe a few seconds at most): a
figure with part of its provenance is still worth more than none, and a missing piece is
recorded as missing, never guessed. Nothing secret is collected: image labels and
digests, GPU names and the driver, a commit id.

- ``stack``: this checkout's commit (``git rev-parse HEAD``) and whether its tree had changes.
- ``gpus``: ``nvidia-smi``'s name, memory and driver of each GPU of this host, when it has
  any (the servers may be elsewhere; the endpoint's own server arguments say what it runs).
- ``images``: for an endpoint served by one of this checkout's compose services on this host,
  the container's image id, repository digests and ``io.sglang-stack.*`` labels: the pins
  and patch hashes the image was built from, and what `invoke verify` last found for that
  image ID here (``verified``: null when it never ran).
- ``models``: models.lock's commit for the target and the drafter, and whether this host's
  model directories match it by name and size.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Sequence

from sglang_stack.engine import Engine
from sglang_stack import ROOT
from sglang_stack.bench.client import Endpoint
from sglang_stack.errors import UserError

LABEL_PREFIX = "io.sglang-stack."


def _run(argv: list[str], timeout: float = 10.0) -> str | None:
    if not shutil.which(argv[0]):
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None




def gpus() -> list[dict] | None:
    out = _run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"])
    if out is None:
        return None
    rows = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            rows.append({"name": parts[0], "memory_mib": int(parts[1]) if parts[1].isdigit() else parts[1], "driver": parts[2]})
    return rows


def image_of_container(engine: Engine, container: str) -> dict | None:
    """The image a container runs: id, repository digests, and the stack's labels."""
    image = _run([engine.runner, "inspect", "--format", "{{.Image}}", container])
    if not image:
        return None
    image = image.strip()
    raw = _run([engine.runner, "image", "inspect", "--format", "{{json .}}", image])
    try:
        info = json.loads(raw) if raw else {}
    except ValueError:
        info = {}
    labels = ((info.get("Config") or {}).get("Labels")) or {}
    return {"id": image, "repo_digests": info.get("RepoDigests") or [], "tags": info.get("RepoTags") or [],
            "labels": {k: v for k, v in sorted(labels.items()) if k.startswith(LABEL_PREFIX)},
            "verified": verified(image)}


def verified(image_id: str) -> dict | None:
    """What `invoke verify` last found for this image ID on this host (build/verified/), or None: never verified."""
    from sglang_stack.image.verify import read_record

    record = read_record(image_id)
    if record is None:
        return None
    return {"ok": record.get("ok"), "commit": (record.get("checkout") or {}).get("commit"),
            "failed": [c["name"] for c in record.get("checks", []) if c.get("ok") is False]}


def images(endpoints: Sequence[Endpoint], env, engine: Engine | None) -> dict:
    """For each endpoint that is a compose service of this checkout on this host, its image; else nothing."""
    if not engine:
        return {}
    from sglang_stack.services import compose, composefile

    out = {}
    try:
        proj = composefile.project(env)
        published = {composefile.endpoint(name, proj.env): name for name in proj.names(composefile.SERVER)}
    except UserError:  # a broken .env: the probe has said so already; provenance is best effort
        return {}
    wanted = {e.name: published[e.url] for e in endpoints if e.url in published}
    if not wanted:
        return {}
    try:
        rows = compose.ps(engine, proj, sorted(set(wanted.values())), quiet=True)
    except UserError:  # no engine, or compose failed: the images stay unrecorded
        return {}
    for name, service in wanted.items():
        row = next((r for r in rows if r.get("Service") == service and r.get("State") == "running"), None)
        if row and (image := image_of_container(engine, row.get("ID") or row.get("Name"))):
            out[name] = {"service": service, **image}
    return out


def models(env) -> dict:
    """models.lock's commit for each role, and whether this host's MODEL_DIR / DRAFT_MODEL_DIR hold
    exactly those files by name and size (``matches``: None where there is no pin or no directory)."""
    from sglang_stack.services import composefile
    from sglang_stack.services import models as pins

    try:
        lock = pins.load()
    except UserError:
        return {}
    try:
        dirs = composefile.model_dirs(env)
    except UserError:
        dirs = {}
    out = {}
    for role, pin in lock.items():
        directory = dirs.get(role)
        matches = not pins.quick_check(directory, pin) if pin.pinned and directory and directory.is_dir() else None
        out[role] = {"repo": pin.repo, "revision": pin.revision or None, "dir": str(directory) if directory else None,
                     "matches": matches}
    return out


def collect(endpoints: Sequence[Endpoint], env, engine: Engine | None) -> dict:
    from sglang_stack.image.build import checkout

    return {"stack": checkout(), "gpus": gpus(), "images": images(endpoints, env, engine), "models": models(env)}
