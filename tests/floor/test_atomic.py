"""Atomic writes leave the old file, or the new one, and nothing else."""

from __future__ import annotations

import pytest

from sglang_stack import atomic


def test_write_replaces_and_creates_parents(tmp_path):
    target = tmp_path / "a" / "b" / "file.txt"
    atomic.write(target, "first")
    atomic.write(target, b"second")
    assert target.read_bytes() == b"second"
    assert oct(target.stat().st_mode & 0o777) == "0o644", "written files are readable like any checkout file"
    assert [p.name for p in target.parent.iterdir()] == ["file.txt"], "a temporary file was left behind"


def test_a_failed_rename_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "bench.json"
    target.write_bytes(b"old")

    def fail(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", fail)
    with pytest.raises(OSError):
        atomic.write(target, b"new")
    assert target.read_bytes() == b"old", "a failed write touched the old file"
    assert [p.name for p in tmp_path.iterdir()] == ["bench.json"], "a temporary file was left behind"
