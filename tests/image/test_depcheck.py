"""`pip check` judged against the declared overrides, in a real virtualenv with real installs.

jinja2 (the wheel requirements.lock.txt pins) requires MarkupSafe>=2.0. Installed with
--no-deps, as the image installs everything, it leaves pip check one line to report: MarkupSafe
missing, or present at a version it does not admit (a wheel of "markupsafe 1.0" made here).
The check passes exactly when versions.lock declares that override, and names a stale one.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from sglang_stack.image.size import locked_wheel
from sglang_stack import ROOT

OVERRIDE = '''
[[override]]
package = "markupsafe"
{what}
of = "jinja2"
declared = ">=2.0"
reason = "a test of the dependency check"
'''


def old_markupsafe(directory: Path) -> Path:
    """A real, minimal wheel of markupsafe 1.0: what pip would install from an index pinning it."""
    path = directory / "markupsafe-1.0-py3-none-any.whl"
    files = {
        "markupsafe/__init__.py": b"",
        "markupsafe-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: markupsafe\nVersion: 1.0\n",
        "markupsafe-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
                     for name, data in files.items()) + "markupsafe-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("markupsafe-1.0.dist-info/RECORD", record)
    return path


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(root / "env")], check=True)
    python = root / "env" / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(locked_wheel("jinja2"))], check=True)
    return python


def depcheck(python: Path, lock_text: str, tmp_path: Path) -> subprocess.CompletedProcess:
    lock = tmp_path / "versions.lock"
    lock.write_text(lock_text)
    return subprocess.run([str(python), "-m", "sglang_stack.image.steps.depcheck", "--lock", str(lock)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)


def test_an_undeclared_missing_requirement_fails_naming_both(venv, tmp_path):
    proc = depcheck(venv, "schema = 1\n", tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "error: pip check: markupsafe, required by jinja2, is not installed" in proc.stdout, proc.stdout
    assert "declares no [[override]] of jinja2" in proc.stdout


def test_the_declared_omission_passes(venv, tmp_path):
    proc = depcheck(venv, OVERRIDE.format(what="omit = true"), tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 declared override(s), 0 problem(s)" in proc.stdout, proc.stdout


def test_an_override_that_pip_no_longer_reports_is_stale(venv, tmp_path):
    text = OVERRIDE.format(what="omit = true") + OVERRIDE.format(what='version = "9.9"').replace('"markupsafe"', '"babel"')
    proc = depcheck(venv, text, tmp_path)
    assert proc.returncode == 1, proc.stdout
    assert "error: versions.lock [[override]] babel (of jinja2) is stale" in proc.stdout, proc.stdout


def test_a_version_conflict_is_judged_as_a_version_override(venv, tmp_path):
    python = venv
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(old_markupsafe(tmp_path))], check=True)
    try:
        wrong_kind = depcheck(python, OVERRIDE.format(what="omit = true"), tmp_path)
        assert wrong_kind.returncode == 1, wrong_kind.stdout
        assert "markupsafe, required by jinja2, is installed at a version it does not admit" in wrong_kind.stdout
        right = depcheck(python, OVERRIDE.format(what='version = "1.0"'), tmp_path)
        assert right.returncode == 0, right.stdout + right.stderr
    finally:
        subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "markupsafe"], check=True)
