"""Deadlines that ask "did it finish" follow the work, not a quiet machine: SGLang's all-reduce ranks are given up
only when none of them uses any CPU (a hang), however long a loaded machine makes them take; a test's wait stretches
with the load."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import load_factor, wait_until
from sglang_stack.entrypoints import allreduce

BURN = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    pass\n"


def test_ranks_that_keep_working_are_waited_for_past_the_stall_window():
    procs = [subprocess.Popen([sys.executable, "-c", BURN.format(s=3)]) for _ in range(2)]
    start = time.monotonic()
    assert allreduce.wait_working(procs, stall_s=1.0, cap_s=60, poll_s=0.1) == ""
    assert time.monotonic() - start >= 2.5 and all(p.returncode == 0 for p in procs)


def test_ranks_that_use_no_cpu_are_a_hang_named_in_one_line():
    procs = [subprocess.Popen(["sleep", "30"])]
    start = time.monotonic()
    try:
        why = allreduce.wait_working(procs, stall_s=1.0, cap_s=60, poll_s=0.1)
    finally:
        procs[0].kill()
    assert why == "used no CPU for 1 s: a rank hangs" and time.monotonic() - start < 10, why


def test_the_cap_bounds_even_a_working_rank():
    procs = [subprocess.Popen([sys.executable, "-c", BURN.format(s=30)])]
    try:
        assert allreduce.wait_working(procs, stall_s=10, cap_s=1.0, poll_s=0.1) == "did not finish within 1 s"
    finally:
        procs[0].kill()


def test_a_tests_wait_stretches_with_the_load(monkeypatch):
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (8.0 * (os.cpu_count() or 1), 0.0, 0.0))
    assert load_factor() == 8.0
    start = time.monotonic()
    assert wait_until(lambda: time.monotonic() - start > 0.3, timeout=0.1, interval=0.01)
