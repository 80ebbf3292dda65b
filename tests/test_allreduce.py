"""What SGLang itself does for all-reduce, by running each pinned release's own start-up code (``CustomAllreduce``)
in a Python where it imports: N real processes in a gloo group, only the hardware answers stood in for
(sglang_stack/entrypoints/allreduce.py). The doctor's `all-reduce` line reads this decision."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import sglang_cpu_env
from pins import PIN
from sglang_stack import ROOT

pytestmark = pytest.mark.sglang_env
DEFAULT = PIN["sglang"]  # the default profile's release; the fixture below was recorded from it
FIXTURE = Path(__file__).parent / "fixtures" / "allreduce" / f"{DEFAULT}-tp8-pcie-p2p.json"
PCIE_MANY = "it's not supported on more than two PCIe-only GPUs"


@pytest.fixture(scope="module")
def pythons(profile_python) -> dict[str, str]:
    try:
        old = str(sglang_cpu_env.python())
    except sglang_cpu_env.Unavailable as err:
        if os.environ.get("SGLANG_STACK_CI"):
            pytest.fail(f"cannot make a Python where the default profile's SGLang imports: {err}")
        pytest.skip(f"cannot make a Python where the default profile's SGLang imports: {err}")
    return {DEFAULT: old, "0.5.23": str(profile_python("0.5.23"))}


def decide(python: str, tp: int, nvlink: bool, p2p: bool) -> dict:
    proc = subprocess.run([python, "-m", "sglang_stack.entrypoints.allreduce", "--tp", str(tp), "--nvlink",
                           "yes" if nvlink else "no", "--p2p", "yes" if p2p else "no"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("release", [DEFAULT, "0.5.23"])
def test_eight_pcie_gpus_leave_every_all_reduce_to_nccl(pythons, release):
    decided = decide(pythons[release], 8, nvlink=False, p2p=True)
    assert decided["sglang"] == release and decided["custom_all_reduce"] == "off" and PCIE_MANY in decided["why"], decided
    if release == DEFAULT:
        assert decided == json.loads(FIXTURE.read_text()), "the doctor test's recorded answer is what the default decides"


@pytest.mark.parametrize("release, tp, nvlink, p2p, state, why", [
    (DEFAULT, 2, True, True, "on", ""),
    (DEFAULT, 2, False, False, "off", "lacks GPU P2P capability"),
    (DEFAULT, 3, True, True, "off", "unsupported world size: 3"),
    ("0.5.23", 2, False, True, "on", ""),
    (DEFAULT, 1, False, False, "not needed", "one GPU"),
])
def test_sglangs_own_rules_decide(pythons, release, tp, nvlink, p2p, state, why):
    decided = decide(pythons[release], tp, nvlink, p2p)
    assert decided["custom_all_reduce"] == state and why in decided["why"], decided
    if state == "on":
        assert decided["full_nvlink"] is nvlink, "SGLang's own reading of the links, as its kernel will use them"
