"""The all-reduce probe (``sglang_stack.entrypoints.probe``): the same code as on the GPUs, on torch's gloo backend
in a CPU Python of the 0.5.23 profile's pins: a working set reports each size, and a set with a rank that never
joins is reported hung at the deadline, with every rank it started gone."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from sglang_stack import ROOT

pytestmark = pytest.mark.sglang_env


def probe(python: Path, *args: str, marker: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "SGLANG_STACK_PROBE_TEST": marker}
    return subprocess.run([str(python), "-m", "sglang_stack.entrypoints.probe", "--backend", "gloo", *args],
                          capture_output=True, text=True, timeout=300, env=env)


def left(marker: str) -> list[int]:
    """Processes still running that this test's probe started (they carry its marker in their environment)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"SGLANG_STACK_PROBE_TEST={marker}".encode() in (proc / "environ").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_a_working_set_reports_every_size(profile_python):
    marker = uuid.uuid4().hex
    proc = probe(profile_python("0.5.23"), "--gpus", "2", "--sizes", "64K,1M", "--deadline", "120", marker=marker)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "probe: 2 ranks (gloo), all-reduce of 64K, 1M, deadline 120 s", lines
    assert lines[1].startswith("probe: 64K: ") and lines[2].startswith("probe: 1M: ") and ", bus " in lines[2], lines
    assert lines[3].startswith("probe: ok: 2 sizes in "), lines
    assert not left(marker)


def test_a_rank_that_never_joins_is_hung_at_the_deadline_and_nothing_is_left(profile_python):
    marker = uuid.uuid4().hex
    proc = probe(profile_python("0.5.23"), "--gpus", "3", "--join", "2", "--sizes", "1M", "--deadline", "10", marker=marker)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: probe: hung at size 1M (joining) after 10 s: "), proc.stderr
    assert not left(marker), "every rank the probe started ends with it"
