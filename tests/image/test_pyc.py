"""Byte-compiling what a build step installed: hash-checked, the same bytes every time, test suites left as source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sglang_stack import ROOT

SOURCE = 'def pick(x):\n    return x in {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}\n'


def installed(tmp_path: Path) -> tuple[Path, Path]:
    """A distribution laid out as `pip install --target` leaves it, with a RECORD, and pip's report of it."""
    target = tmp_path / "site"
    pkg, info = target / "demo", target / "demo-1.0.dist-info"
    for d in (pkg / "tests", pkg / "examples", info):
        d.mkdir(parents=True)
    files = {"demo/__init__.py": SOURCE, "demo/tests/test_demo.py": "assert True\n",
             "demo/examples/old.py": "print 'python 2'\n", "demo/broken.py": "def (:\n"}
    for rel, text in files.items():
        (target / rel).write_text(text)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in [*files, "demo-1.0.dist-info/METADATA"]))
    report = tmp_path / "pip-report.json"
    report.write_text(json.dumps({"install": [{"metadata": {"name": "demo", "version": "1.0"}}]}))
    return target, report


def compile_(tmp_path: Path, *args: str, seed: str = "0") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "sglang_stack.image.steps.pyc", *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path)


def test_what_a_step_installed_is_compiled_and_its_tests_are_not(tmp_path):
    target, report = installed(tmp_path)
    proc = compile_(tmp_path, "--report", str(report), "--target", str(target))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"pyc: 1 files compiled (hash-checked) for {report}; 1 left as source (they do not compile)"
    pycs = sorted(p.relative_to(target).as_posix() for p in target.rglob("*.pyc"))
    assert pycs == [f"demo/__pycache__/__init__.{sys.implementation.cache_tag}.pyc"], pycs
    flags = int.from_bytes(next(target.rglob("*.pyc")).read_bytes()[4:8], "little")
    assert flags == 0b11, f"a checked-hash .pyc has flags 3, not {flags}: no mtime in it"
    assert "SyntaxWarning" not in proc.stderr and proc.stderr == "", proc.stderr


def test_the_same_source_gives_the_same_bytes_whatever_the_hash_seed(tmp_path):
    """A frozenset constant (``x in {...}``) is written sorted: every seed gives one .pyc, and so does every run."""
    target, report = installed(tmp_path)
    pyc = target / "demo" / "__pycache__" / f"__init__.{sys.implementation.cache_tag}.pyc"
    seen = set()
    for seed in ("0", "1", "2", "random"):
        assert compile_(tmp_path, "--report", str(report), "--target", str(target), seed=seed).returncode == 0
        seen.add(pyc.read_bytes())
    assert len(seen) == 1, f"{len(seen)} different .pyc files from one source"


def test_a_report_of_something_not_installed_is_one_line(tmp_path):
    target, report = installed(tmp_path)
    report.write_text(json.dumps({"install": [{"metadata": {"name": "absent", "version": "1"}}]}))
    proc = compile_(tmp_path, "--report", str(report), "--target", str(target))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "absent: in " in proc.stderr, proc.stderr
