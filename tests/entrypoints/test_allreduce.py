"""What SGLang itself does for all-reduce, by running each pinned release's own start-up and dispatch code
(``CustomAllreduce``, 0.5.23's ``PcieIpcCommunicator`` and ``GroupCoordinator``'s dispatch) in a Python where it
imports: N real processes in a gloo group, only the hardware answers stood in for
(sglang_stack/entrypoints/allreduce.py). The doctor's `all-reduce` line, `invoke settings` and the image's
PCIE_ALLREDUCE=auto read this decision; the recorded answers under fixtures/allreduce/ are what they are tested on."""

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
FIXTURES = Path(__file__).parents[1] / "fixtures" / "allreduce"
PCIE_MANY = "not supported on more than two PCIe-only GPUs"


@pytest.fixture(scope="module")
def pythons(profile_python) -> dict[str, str]:
    try:
        old = str(sglang_cpu_env.python())
    except sglang_cpu_env.Unavailable as err:
        if os.environ.get("SGLANG_STACK_CI"):
            pytest.fail(f"cannot make a Python where the default profile's SGLang imports: {err}")
        pytest.skip(f"cannot make a Python where the default profile's SGLang imports: {err}")
    return {DEFAULT: old, "0.5.23": str(profile_python("0.5.23"))}


def decide(python: str, tp: int, nvlink: bool, p2p: bool, *extra: str) -> dict:
    proc = subprocess.run([python, "-m", "sglang_stack.entrypoints.allreduce", "--tp", str(tp), "--nvlink",
                           "yes" if nvlink else "no", "--p2p", "yes" if p2p else "no", *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=3600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("release", [DEFAULT, "0.5.23"])
def test_eight_pcie_gpus_take_pcie_ipc_where_the_release_has_it(pythons, release):
    """8x RTX PRO 6000: custom all-reduce refuses more than two PCIe GPUs; 0.5.23's PCIe-IPC takes every decode
    reduction when it is on (NCCL when it is off); 0.5.9 has no PCIe-IPC, so NCCL carries them all."""
    decided = decide(pythons[release], 8, nvlink=False, p2p=True)
    assert decided["sglang"] == release and decided["custom_all_reduce"] == "off" and PCIE_MANY in decided["why"], decided
    assert decided["backend_off"] == "nccl", decided
    if release == DEFAULT:
        assert decided["pcie_ipc"]["available"] is False and decided["backend"] == "nccl", decided
    else:
        pcie = decided["pcie_ipc"]
        assert pcie["built"] is True and decided["backend"] == decided["backend_widest"] == "pcie_ipc", decided
        # No server settings given: SGLang's own fallback width (64 rows) x the hidden size bounds the workspace.
        assert pcie["max_numel"] == 64 * decided["hidden"] and decided["widest_rows"] == 64, pcie
    assert decided == json.loads((FIXTURES / f"{release}-tp8-pcie-p2p.json").read_text()), \
        "the doctor tests' recorded answer is what the release decides"


def test_eight_nvlinked_gpus_keep_custom_all_reduce_in_front(pythons):
    """8x H200: custom all-reduce takes the decode reductions; PCIe-IPC, built when on, only sees what it declines."""
    decided = decide(pythons["0.5.23"], 8, nvlink=True, p2p=True)
    assert decided["custom_all_reduce"] == "on" and decided["backend"] == decided["backend_off"] == "custom", decided
    assert decided == json.loads((FIXTURES / "0.5.23-tp8-nvlink.json").read_text()), "the recorded H200 answer"


@pytest.mark.parametrize("tp, p2p, extra, backend, why", [
    (3, True, (), "nccl", "world size 3"),
    (2, False, ("--deterministic", "yes"), "nccl", "Deterministic inference is on"),
    (2, False, (), "nccl", "peer-to-peer"),  # no P2P: its workspace cannot map the peers' memory
    (1, True, (), "none", "one GPU"),
])
def test_pcie_ipc_refusals_are_sglangs_own(pythons, tp, p2p, extra, backend, why):
    decided = decide(pythons["0.5.23"], tp, False, p2p, *extra)
    assert decided["backend"] == backend and decided["pcie_ipc"]["built"] is False, decided
    assert why in decided["pcie_ipc"]["why"], decided["pcie_ipc"]


def test_the_workspace_bound_is_sglangs_decode_width(pythons):
    """With the server's decode width (largest captured batch x draft tokens), SGLang sizes the workspace to it:
    decode reductions take PCIe-IPC, a prefill chunk wider than the bound stays on NCCL."""
    decided = decide(pythons["0.5.23"], 4, False, True, "--max-rows", "16", "--hidden", "6144")
    assert decided["custom_all_reduce"] == "off" and decided["pcie_ipc"]["max_numel"] == 16 * 6144, decided
    assert decided["backend"] == decided["backend_widest"] == "pcie_ipc", decided
    assert decided["backend_prefill"] == "nccl", "prefill-sized reductions stay on NCCL (SGLang's decode-sized bound)"


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
