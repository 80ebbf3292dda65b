"""Where results go: never over earlier results, and never a directory that cannot be written, found out late."""

from __future__ import annotations

import re

import pytest

from sglang_server import Behaviour, SGLangServer
from sglang_stack import ROOT
from sglang_stack.bench import measure as bench, report
from sglang_stack.errors import UserError
from sglang_stack.bench.request import Request
from test_bench import BASE, write_prompts


def test_existing_results_are_never_overwritten(tmp_path):
    (tmp_path / report.JSON_NAME).write_text("{}")
    with pytest.raises(UserError, match=r"already holds bench.json"):
        bench.results_dir(tmp_path)


# --- bench-compare: one service at a time ----------------------------------------------


@pytest.mark.parametrize("where", ["a-file", "under-a-file", "read-only"])
def test_an_out_that_cannot_be_written_fails_before_any_request(tmp_path, where):
    """--out a file, under a file, or in a directory nobody may write: one line naming --out, and no request sent."""
    import os

    if where == "a-file":
        out = tmp_path / "file"
        out.write_text("not a directory")
    elif where == "under-a-file":
        (tmp_path / "file").write_text("not a directory")
        out = tmp_path / "file" / "sub"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes through a read-only mode; the under-a-file case covers the check")
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        out = locked / "results"
    prompts = write_prompts(tmp_path / "prompts.jsonl", count=2)
    with SGLangServer(BASE) as base:
        with pytest.raises(UserError, match=rf"^--out {re.escape(str(out))}: (cannot write there|exists and is not a directory$|is under .*, which is not a directory)"):
            bench.run(Request(endpoints=[f"baseline={base.url}"], levels="1", repeats=1, warmup=0, prompts=prompts, out=out), environ={}, progress=False)
        generated = list(base.bodies)
    assert not generated, f"generation requests were sent before --out was checked: {generated}"


def test_the_probe_waits_no_longer_than_timeout(tmp_path):
    """A server that accepts and never answers is given up on after --timeout, not after the probe's own 30 s."""
    prompts = write_prompts(tmp_path / "prompts.jsonl", count=2)
    with SGLangServer(Behaviour(wedged=True)) as wedged:
        with pytest.raises(UserError, match=r"not reachable: no answer to /health within 2 s"):
            bench.run(Request(endpoints=[f"wedged={wedged.url}"], levels="1", repeats=1, warmup=0, prompts=prompts, out=tmp_path / "out", timeout=2), environ={}, progress=False)
    assert not (tmp_path / "out").exists(), "a run refused at its probe must create no results directory"


def test_k8s_out_under_a_file_is_one_line(tmp_path):
    import subprocess
    import sys

    (tmp_path / "file").write_text("x")
    proc = subprocess.run([sys.executable, "-m", "invoke", "k8s", "--out", str(tmp_path / "file" / "manifests")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"error: --out {tmp_path / 'file' / 'manifests'}: cannot write there"), proc.stderr
