"""A Python where the real SGLang imports on a machine without a GPU: to run its own ServerArgs and ports.

The image is the place SGLang runs (``invoke settings`` uses it where it is built); this machine
cannot build it with the real cu130 wheels. So the tests make the nearest environment that can
run SGLang's own decision code: a venv with the pinned sglang wheel (hash-checked), every
distribution of requirements.lock.txt at its pinned version except the GPU-only ones, and a CPU
build of torch. What differs from the image, and why it does not change a decision:

- torch is the CPU build lying on this machine's disk (PyPI's Linux torch is a CUDA build of
  several GB); ``services/settings.py`` stands in for its device queries either way;
- Python is this machine's (3.11; the image has 3.12): the wheels are the lock's versions,
  built for this interpreter, so they install by version, not by the lock's cp312 hashes;
- sgl-kernel, the CUDA libraries and the jit caches are left out: no GPU kernel runs while
  ServerArgs resolves, and ``services/settings.py`` reports each stand-in it used.

The venv is kept under the project's cache, keyed by everything that goes into it.

A profile whose every distribution is on PyPI (no URL wheel: ``profiles/0.5.23``) needs none of
that: ``profile_python`` makes a venv of the host's CPython of the lock's own minor version with
exactly the image's distributions, hash-checked from the profile's requirement lock (torch and
the CUDA libraries included: they import on a machine without a GPU), and its sglang wheel.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

from sglang_stack import ROOT
from sglang_stack import download
from sglang_stack.lock import lockfile as lockmod

# Never imported while ServerArgs resolves, or GPU-only (CUDA libraries, kernels and their caches).
LEFT_OUT = re.compile(r"^(torch|torchvision|torchaudio|torchao|torch-memory-saver|torchcodec|torch-c-dlpack-ext|"
                      r"nvidia-(?!ml-py).*|flashinfer-cubin|flashinfer-jit-cache|sgl-kernel|decord2|modelscope)$")
TORCH_CPU = "2.13.0"  # the CPU build of torch on this machine kind's disk (pip takes it from /opt/wheels)
WHEELS = Path("/opt/wheels")


class Unavailable(Exception):
    """This machine cannot make the environment (no CPU torch on disk, no index); the message says why."""


def profile_python(name: str) -> Path:
    """The interpreter of a venv holding exactly profile ``name``'s Python distributions, made once per lock."""
    from sglang_stack.lock import profiles
    from sglang_stack.smoke.substitutes import host_python
    from sglang_stack.errors import UserError

    profile = profiles.get(name)
    lock = lockmod.load(profile.lock)
    if lock.get("wheel"):
        raise Unavailable(f"profile {name} installs URL wheels ({', '.join(w['name'] for w in lock['wheel'])}): "
                          "use python() and its stand-ins")
    minor = lock["python"]["version"]
    try:
        prefix = host_python(minor)
    except UserError as err:
        raise Unavailable(str(err)) from None
    exe = prefix / "bin" / f"python{minor}"
    sglang = lock["sglang"]
    key = hashlib.sha256("\n".join([minor, str(prefix), sglang["sha256"], profile.requirements.read_text(),
                                     Path(__file__).read_text()]).encode()).hexdigest()[:16]
    home = download.cache_dir() / f"sglang-env-{name}-{key}"
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"sglang-env-{name}-{key}.lock", "w") as lockfile:
        fcntl.flock(lockfile, fcntl.LOCK_EX)
        py = home / "bin" / "python"
        if (home / ".complete").is_file():
            return py
        shutil.rmtree(home, ignore_errors=True)
        wheel = download.fetch(sglang["url"], sglang["sha256"])
        subprocess.run([str(exe), "-m", "venv", str(home)], check=True)
        pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "--no-compile"]
        for step in (["--require-hashes", "-r", str(profile.requirements)], [str(wheel)]):
            proc = subprocess.run([*pip, *step], capture_output=True, text=True, timeout=3600)
            if proc.returncode != 0:
                shutil.rmtree(home, ignore_errors=True)
                raise Unavailable(f"pip install {' '.join(step)}: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        (home / ".complete").write_text("")
        return py


def requirements() -> list[str]:
    pins = []
    for line in (ROOT / "requirements.lock.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if m and not LEFT_OUT.match(m[1].lower()):
            pins.append(f"{m[1]}=={m[2]}")
    return pins


def python() -> Path:
    """The environment's interpreter, made once per set of inputs."""
    torch = sorted(WHEELS.glob(f"torch-{TORCH_CPU}+cpu-cp{sys.version_info[0]}{sys.version_info[1]}-*.whl"))
    if not torch:
        raise Unavailable(f"no CPU build of torch {TORCH_CPU} for this Python under {WHEELS}")
    sglang = lockmod.load()["sglang"]
    pins = requirements()
    key = hashlib.sha256("\n".join([sys.version, sglang["sha256"], torch[0].name, *pins, Path(__file__).read_text()])
                         .encode()).hexdigest()[:16]
    home = download.cache_dir() / f"sglang-cpu-env-{key}"
    py = home / "bin" / "python"
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f"sglang-cpu-env-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test workers (pytest -n) make it once: the second waits, then reuses it
        return _make(home, py, torch[0], sglang, pins)


def _make(home: Path, py: Path, torch: Path, sglang: dict, pins: list[str]) -> Path:
    if (home / ".complete").is_file():
        return py
    shutil.rmtree(home, ignore_errors=True)
    wheel = download.fetch(sglang["url"], sglang["sha256"])
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
    for step in ([str(torch)], pins, [str(wheel)]):
        proc = subprocess.run([*pip, *step], capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            shutil.rmtree(home, ignore_errors=True)
            raise Unavailable(f"pip install {step[0]} ...: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    (home / ".complete").write_text("")
    return py



def run_json(python: Path, tree: Path, script: str, *args: str, env: dict | None = None, timeout: int = 600) -> dict:
    """Run ``script`` with ``python``, the sglang package of ``tree`` first on its path; its last stdout line is JSON."""
    import json
    import os

    environ = {**os.environ, **(env or {}), "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([str(python), "-c", script, *args], capture_output=True, text=True, timeout=timeout,
                          env=environ, cwd=tree)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and lines, f"{python} exited {proc.returncode}: {proc.stderr.strip()[-1500:]}"
    return json.loads(lines[-1])
