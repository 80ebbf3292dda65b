"""The image's one install step (sglang_stack/image/steps/install.py), run here on a real wheel made here.

What the Dockerfile's install RUNs do, in this process's Python: a hashed, wheels-only, dependency-free pip
install from a requirement file, through the mirror when MIRROR=1. The whole chain (slim, .pyc, the SBOM's
record) runs in every image build (tests/services/test_engine.py, `invoke smoke --target runtime`).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglang_stack import ROOT
from sglang_stack.image.steps import install, pyc


def wheel(directory: Path, name: str = "tinydist", version: str = "1.0") -> Path:
    """A pure-Python wheel: one module and its dist-info."""
    path = directory / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{name}.py", "VALUE = 42\n")
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(f"{info}/RECORD", "")
    return path


def run(requirements: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-B", "-m", "sglang_stack.image.steps.install", str(requirements), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)


def test_a_hashed_wheel_installs_into_a_scratch_tree(tmp_path):
    whl = wheel(tmp_path)
    digest = hashlib.sha256(whl.read_bytes()).hexdigest()
    req = tmp_path / "req.txt"
    req.write_text(f"tinydist @ file://{whl} --hash=sha256:{digest}\n")
    proc = run(req, "--scratch", str(tmp_path / "tools"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "tools" / "tinydist.py").read_text() == "VALUE = 42\n"
    assert "install: $ " in proc.stdout and "--require-hashes" in proc.stdout and "--no-deps" in proc.stdout, \
        "the step shows the pip command it runs"


def test_a_wrong_hash_fails_the_step(tmp_path):
    whl = wheel(tmp_path)
    req = tmp_path / "req.txt"
    req.write_text(f"tinydist @ file://{whl} --hash=sha256:{'0' * 64}\n")
    proc = run(req, "--scratch", str(tmp_path / "tools"))
    assert proc.returncode != 0 and "install: " in proc.stderr and "failed" in proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "tools" / "tinydist.py").exists()


def test_a_missing_requirement_file_is_one_line():
    proc = run(Path("no-such-file"), "--scratch", "/tmp/x")
    assert proc.returncode != 0 and proc.stderr.strip().startswith("error: install: /build/requirements/no-such-file.txt"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_venv_install_needs_its_stage():
    proc = run(Path("router"))
    assert proc.returncode == 2 and "--stage is required" in proc.stderr, proc.stderr


def test_the_mirror_rewrites_every_url_requirement_to_its_file():
    text = ("a @ https://example.org/x/a-1-py3-none-any.whl --hash=sha256:aa\n"
            "b @ http://h/b-2+cu130-cp39-abi3-linux_x86_64.whl --hash=sha256:bb\nc==3 --hash=sha256:cc\n")
    assert install.through_mirror(text) == ("a @ file:///mirror/wheels/a-1-py3-none-any.whl --hash=sha256:aa\n"
                                            "b @ file:///mirror/wheels/b-2+cu130-cp39-abi3-linux_x86_64.whl --hash=sha256:bb\n"
                                            "c==3 --hash=sha256:cc\n")
    env = install.pip_environment({"PATH": "/bin"}, mirror=True)
    assert env["PIP_NO_INDEX"] == "1" and env["PIP_FIND_LINKS"] == "/mirror/wheels", env


@pytest.mark.parametrize("clean", [True, False])
def test_a_tree_compiles_hash_checked_and_clean_drops_stale_bytecode(tmp_path, clean):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("X = 1\n")
    stale = tmp_path / "pkg" / "__pycache__" / "gone.cpython-311.pyc"
    stale.parent.mkdir()
    stale.write_bytes(b"stale")
    assert pyc.main(["--tree", str(tmp_path), *(["--clean"] if clean else [])]) == 0
    compiled = list((tmp_path / "pkg" / "__pycache__").glob("mod.*.pyc"))
    assert compiled and compiled[0].read_bytes()[4:8] == (3).to_bytes(4, "little"), "a checked-hash .pyc (flags 0b11)"
    assert stale.exists() is not clean, "--clean removes the __pycache__ of a run's own default .pyc files"


@pytest.mark.network
@pytest.mark.parametrize("ok", [True, False])
def test_run_gives_one_step_the_build_tools_and_leaves_no_tree(tmp_path, ok):
    """The Dockerfile's `install build-tools --run STEP`: docker/build's real hashed list, the binary audit with its
    ELF reader on the path, the step's exit status, and no tree afterwards either way."""
    scratch = tmp_path / "build-tools"
    site = tmp_path / "site"
    site.mkdir()
    (site / "libplain.so").write_bytes(b"not an ELF file")
    proc = run(ROOT / "docker/build/requirements/build-tools.txt", "--scratch", str(scratch), "--run", "binaries",
               "--lock", str(ROOT / "versions.lock"), "--path", str(site if ok else tmp_path / "missing"))
    assert (proc.returncode == 0) is ok, proc.stdout + proc.stderr
    assert f"install: $ PYTHONPATH={scratch}" in proc.stdout, "the step shows what it runs, with the tree on its path"
    assert "ModuleNotFoundError" not in proc.stderr, "the ELF reader came from the scratch tree"
    assert not scratch.exists(), "the build tools are removed after the step"


def test_run_without_a_step_is_one_line():
    proc = run(Path("build-tools"), "--run")
    assert proc.returncode != 0 and proc.stderr.strip() == "error: install: --run needs a step (sbom write ..., binaries ...)"
