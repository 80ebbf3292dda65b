"""The all-reduce probe (``sglang_stack.entrypoints.probe``): the same code as on the GPUs, on torch's gloo backend
in a CPU Python of the 0.5.23 profile's pins: a working set reports each size, and a set with a rank that never
joins is reported hung at the deadline, with every rank it started gone."""

from __future__ import annotations

import os
import subprocess
import sys
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
    assert lines[1].startswith("probe: 64K: gloo ") and lines[2].startswith("probe: 1M: gloo ") and ", bus " in lines[2], lines
    assert lines[1].endswith("; sums exact") and lines[2].endswith("; sums exact"), "each result is the reference sum"
    assert lines[3].startswith("probe: ok: 2 sizes in "), lines
    assert not left(marker)


def test_a_rank_that_never_joins_is_hung_at_the_deadline_and_nothing_is_left(profile_python):
    marker = uuid.uuid4().hex
    proc = probe(profile_python("0.5.23"), "--gpus", "3", "--join", "2", "--sizes", "1M", "--deadline", "10", marker=marker)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error: probe: hung at size 1M (gloo, joining) after 10 s: "), proc.stderr
    assert not left(marker), "every rank the probe started ends with it"


# --- what the parent decides, without ranks ------------------------------------------------------------------


def row(size, backend, us, exact=True):
    return {"size": size, "backend": backend, "us": us, "exact": exact, "busbw_gbps": 1.0}


KIB = 1 << 10


@pytest.mark.parametrize("rows, chosen, words", [
    ([row(12 * KIB, "nccl", 205.1), row(12 * KIB, "pcie_ipc", 5.3), row(384 * KIB, "nccl", 1169.3),
      row(384 * KIB, "pcie_ipc", 34.6), row(64 << 20, "nccl", 9000), row(64 << 20, "pcie_ipc", 12000)],
     "pcie_ipc", "faster than NCCL at every decode size (12K 38.7x, 384K 33.8x)"),
    ([row(12 * KIB, "nccl", 205.1), row(12 * KIB, "pcie_ipc", 5.3, exact=False)], "nccl", "sums were wrong at 12K"),
    ([row(12 * KIB, "nccl", 5.0), row(12 * KIB, "pcie_ipc", 5.3)], "nccl", "not faster than NCCL at 12K"),
    ([row(12 * KIB, "nccl", 205.1), {"size": 12 * KIB, "backend": "pcie_ipc", "unsupported": True}], "nccl",
     "PCIe-IPC declined 12K"),
])
def test_the_verdict_needs_exact_sums_and_a_win_at_every_decode_size(rows, chosen, words):
    from sglang_stack.entrypoints.probe import judge

    assert judge(rows, "nccl") == (chosen, judge(rows, "nccl")[1]) and words in judge(rows, "nccl")[1], judge(rows, "nccl")


@pytest.mark.parametrize("args, words", [
    (["--sizes", "0"], "must be a multiple of 16 bytes from 16 to 8G"),
    (["--sizes", "999999G"], "must be a multiple of 16 bytes from 16 to 8G"),
    (["--sizes", "12K,x"], "'X' is not a byte count"),
    (["--deadline", "1e308"], "--deadline '1e308': seconds, more than 0 and at most 3600"),
    (["--deadline", "nan"], "--deadline 'nan'"),
])
def test_bad_sizes_and_deadlines_are_one_line_before_any_rank_starts(args, words):
    from sglang_stack.entrypoints import probe as module

    with pytest.raises(SystemExit) as said:
        module.main(["--gpus", "2", *args])
    assert str(said.value).startswith("error: ") and words in str(said.value), said.value


def test_if_needed_does_nothing_where_the_setting_needs_no_verdict(tmp_path):
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT), "PCIE_ALLREDUCE": "off", "HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "sglang_stack.entrypoints.probe", "--gpus", "8", "--if-needed",
                           "--record"], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "probe: not needed: PCIE_ALLREDUCE=off needs no verdict", \
        proc.stdout + proc.stderr
    assert not (tmp_path / ".cache").exists(), "nothing recorded"
