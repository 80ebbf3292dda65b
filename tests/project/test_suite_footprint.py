"""The suite's own footprint on a disk the machine shares: what a run leaves behind under pytest's temporary root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sglang_stack import ROOT

TESTS = '''
def test_passes(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 1024)

def test_fails(tmp_path):
    (tmp_path / "evidence").write_text("kept")
    assert False
'''


def _run(tmp_path: Path, select: str) -> list[Path]:
    """Run the project's pytest configuration on TESTS (``select`` by -k) with its own temporary root; what is left."""
    (tmp_path / "test_left.py").write_text(TESTS)
    temproot = tmp_path / "temproot"
    temproot.mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-c", str(ROOT / "pyproject.toml"),
            "--rootdir", str(tmp_path), "-k", select, str(tmp_path / "test_left.py")]
    print("$", " ".join(argv))
    subprocess.run(argv, cwd=tmp_path, env={**os.environ, "PYTEST_DEBUG_TEMPROOT": str(temproot)}, capture_output=True, text=True)
    return sorted(p.relative_to(temproot) for p in temproot.rglob("*") if p.is_file() and not p.name.endswith(".lock"))


def test_a_passing_run_leaves_nothing_in_pytests_temporary_root(tmp_path):
    left = _run(tmp_path, "passes")
    assert left == [], f"a passing run left {[str(p) for p in left]} (pyproject.toml: tmp_path_retention_policy)"


def test_a_failed_run_keeps_only_its_failures_directories_until_the_next_run(tmp_path):
    _run(tmp_path, "passes or fails")
    left = [str(p) for p in _run(tmp_path, "passes or fails")]
    assert [p.rsplit("/", 1)[-1] for p in left] == ["evidence"], f"two failed runs left {left}"
