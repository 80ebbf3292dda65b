"""The binary audit on the real wheels: CUDA 12 builds named by package and file, declared exceptions, stale ones.

torchao and torch_memory_saver are wheels requirements.lock.txt pins (fetched
from PyPI and checked against the lock's hashes); markupsafe's speedups are a clean extension.
torch itself is not in the test tree (it comes from PyTorch's index), so the libraries its
extensions need from it are small real shared objects made here with the C compiler, under
the sonames torch ships: the audit then judges the CUDA runtime they need, as in the image.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import need
from pypi_wheels import unpack

from sglang_stack.image.size import locked_wheel
from sglang_stack import ROOT
from pins import PIN

TORCH_SONAMES = ("libc10.so", "libc10_cuda.so", "libtorch.so", "libtorch_cpu.so", "libtorch_cuda.so", "libtorch_python.so")
NO_EXCEPTIONS = re.compile(r"\n\[\[binary_exception\]\]\n.*?(?=\n\[\[|\n# -{10}|\Z)", re.S)


def audit(path: Path, lock: Path = ROOT / "versions.lock") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sglang_stack.image.steps.binaries", "--path", str(path), "--lock", str(lock)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def torch_stand_ins(site: Path) -> None:
    """torch's shared libraries, as real (empty) ELF objects with torch's sonames, in torch/lib."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        need("needs a C compiler to make torch's stand-in libraries")
    lib = site / "torch" / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    source = site.parent / "empty.c"
    source.write_text("int sglang_stack_stand_in;\n")
    for soname in TORCH_SONAMES:
        subprocess.run([cc, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(lib / soname), str(source)], check=True)


@pytest.fixture(scope="module")
def cuda12_site(tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("cuda12") / "site-packages"
    unpack(locked_wheel("torchao"), site)
    unpack(locked_wheel("torch-memory-saver"), site)
    torch_stand_ins(site)
    return site


@pytest.fixture(scope="module")
def lock_without_exceptions(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("lock") / "versions.lock"
    text = NO_EXCEPTIONS.sub("", (ROOT / "versions.lock").read_text())
    assert "[[binary_exception]]" not in text
    path.write_text(text)
    return path


def test_undeclared_cuda12_builds_fail_naming_package_and_file(cuda12_site, lock_without_exceptions):
    proc = audit(cuda12_site, lock_without_exceptions)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stdout.splitlines() if line.startswith("error: ")]
    assert any(line.startswith(f"error: torchao {PIN['torchao']}: torchao/_C.abi3.so needs libcudart.so.12 (CUDA 12; this stack is CUDA 13)")
               for line in errors), proc.stdout
    assert any(line.startswith(f"error: torch_memory_saver {PIN['torch-memory-saver']}: torch_memory_saver_hook_mode_preload.abi3.so needs libcudart.so.12")
               for line in errors), proc.stdout
    assert not any("libtorch" in line or "libc10" in line for line in errors), "torch's own libraries must resolve"
    assert "Traceback" not in proc.stderr


def test_declared_exceptions_pass_and_say_what_they_break(cuda12_site):
    proc = audit(cuda12_site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    declared = [line for line in proc.stdout.splitlines() if line.startswith("declared: ")]
    assert any(line.startswith(f"declared: torchao {PIN['torchao']}: torchao/_C.abi3.so needs libcudart.so.12 (breaks: ") for line in declared), proc.stdout
    assert any("--enable-memory-saver" in line for line in declared), proc.stdout
    assert proc.stdout.strip().endswith("0 error(s)"), proc.stdout


def test_a_clean_extension_passes(tmp_path):
    site = unpack(locked_wheel("markupsafe"), tmp_path / "site-packages")
    proc = audit(site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    m = re.search(r"binaries: (\d+) ELF objects", proc.stdout)
    assert m and int(m.group(1)) >= 1, f"markupsafe's speedups were not read: {proc.stdout}"
    assert "error" not in proc.stdout.replace("0 error(s)", ""), proc.stdout


def test_a_declaration_that_no_longer_matches_is_stale(tmp_path):
    site = unpack(locked_wheel("markupsafe"), tmp_path / "site-packages")
    lock = tmp_path / "versions.lock"
    lock.write_text((ROOT / "versions.lock").read_text() + '''
[[binary_exception]]
package = "markupsafe"
needs = ["libcudart.so.12"]
reason = "a declaration for a finding that does not exist"
breaks = "nothing"
''')
    proc = audit(site, lock)
    assert proc.returncode == 1, proc.stdout
    assert "error: versions.lock [[binary_exception]] markupsafe (libcudart.so.12) is stale" in proc.stdout, proc.stdout


def test_invoke_binaries_is_the_same_check(cuda12_site, tmp_path):
    import engine

    proc = subprocess.run([*engine.INVOKE, "binaries", "--path", str(cuda12_site)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"declared: torchao {PIN['torchao']}" in proc.stdout
    missing = subprocess.run([*engine.INVOKE, "binaries", "--path", str(tmp_path / "nope")], capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr, missing.stderr
    assert missing.stderr.strip().count("\n") == 0 and "nope" in missing.stderr, missing.stderr
