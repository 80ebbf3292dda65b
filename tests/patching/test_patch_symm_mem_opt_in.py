"""Patch 0008 (profile 0.5.23): SM120 runs torch's two-shot all-reduce without multicast, only when asked.

0.5.23's own ``TorchSymmMemCommunicator`` runs, in a Python of the profile's pins: ``__init__`` and
``all_reduce``. What stands in is the device: the capability and world size the communicator asks for, torch's
symmetric-memory allocator and rendezvous (a CPU buffer, and a handle with or without a multicast pointer), the
one field of the published runtime config it reads, and the two all-reduce kernels, which record which one ran. Every case is run on the unpatched tree too: where the
opt-in is not given, the patched tree must decide exactly as upstream does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_cpu_env import run_json

pytestmark = [pytest.mark.sglang_env, pytest.mark.network]

OPT_IN = "SGLANG_STACK_SYMM_MEM_TWO_SHOT_WITHOUT_MULTICAST"

SCRIPT = r"""
import json, logging, sys
from types import SimpleNamespace as NS
import torch
import sglang.srt.distributed.device_communicators.torch_symm_mem as mod

cases = json.loads(sys.argv[1])
out = []
records = []
logging.basicConfig(level=logging.INFO)

class Capture(logging.Handler):
    def emit(self, record):
        records.append((record.levelname, record.getMessage()))

mod.logger.addHandler(Capture())
for case in cases:
    records.clear()
    allocated, ran = [], []
    mod.torch_symm_mem_available = True
    mod.get_exec = lambda: NS(comm=NS(enable_scattered_sconv=False))  # the published runtime config's one field read here
    mod.torch.cuda.set_device = lambda device: None
    mod.torch.cuda.get_device_capability = lambda device, cap=case["cap"]: (cap, 0)
    mod.dist.get_world_size = lambda group, n=case["world"]: n
    def empty(n, device, dtype):
        allocated.append(n)
        return torch.zeros(n, dtype=dtype)
    mod.torch_symm_mem = NS(empty=empty, rendezvous=lambda buf, name, mc=case["multicast"]: NS(multicast_ptr=mc))
    for kernel in ("multimem_all_reduce_", "two_shot_all_reduce_"):
        setattr(torch.ops.symm_mem, kernel, lambda buf, op, name, k=kernel: ran.append(k.split("_all")[0]))
    comm = mod.TorchSymmMemCommunicator(NS(group_name="tp"), 0)
    if not comm.disabled:
        comm.device = torch.device("cpu")  # the input tensor below lives on the CPU
        comm.all_reduce(torch.ones(8, dtype=torch.bfloat16))
    out.append({"disabled": comm.disabled, "allocated": allocated, "max_size": comm.max_size, "ran": ran,
                "log": [f"{level}: {message}" for level, message in records]})
print(json.dumps(out))
"""

CASES = [{"cap": cap, "world": world, "multicast": mc} for cap in (9, 10, 12, 11) for world in (2, 8) for mc in (0, 1)]


@pytest.fixture(scope="module")
def decide(upstream_python, trees):
    """``decide(tree, cases, opt_in)``: what the communicator decided in each case, run once per tree and opt-in value."""
    done: dict = {}

    def get(tree: Path, cases: list, opt_in: str | None = None) -> list:
        key = (tree, opt_in or "")
        if key not in done:
            every = CASES + [{**c, "cap": 10, "multicast": 1} for c in CASES if c["cap"] == 12]
            done[key] = dict(zip(map(json.dumps, every), run_json(upstream_python, tree, SCRIPT, json.dumps(every),
                                                                   env={OPT_IN: opt_in or ""})))
        return [done[key][json.dumps(c)] for c in cases]

    return get


@pytest.mark.parametrize("opt_in", [None, "1"], ids=["no-opt-in", "opt-in"])
def test_known_capabilities_decide_exactly_as_upstream(decide, trees, opt_in):
    pristine, patched = trees
    known = [c for c in CASES if c["cap"] in (9, 10)]
    before, after = decide(pristine, known, opt_in), decide(patched, known, opt_in)
    for case, b, a in zip(known, before, after):
        assert a == b, f"capability {case['cap']}, TP {case['world']}, multicast {case['multicast']}: {b} became {a}"


def test_sm120_without_the_opt_in_is_disabled_before_allocating_and_names_it(decide, trees):
    pristine, patched = trees
    sm120 = [c for c in CASES if c["cap"] == 12]
    for case, before, after in zip(sm120, decide(pristine, sm120), decide(patched, sm120)):
        assert before["disabled"] and not before["allocated"], f"upstream changed for SM120: {before}"
        assert after["disabled"] and not after["allocated"], f"{case}: allocated or enabled without the opt-in: {after}"
        assert any(OPT_IN in line for line in after["log"]), f"{case}: the warning does not name the opt-in: {after['log']}"


def test_sm120_with_the_opt_in_runs_the_two_shot_kernel_without_multicast(decide, trees):
    _, patched = trees
    sm120 = [c for c in CASES if c["cap"] == 12]
    sm100 = decide(patched, [{**c, "cap": 10, "multicast": 1} for c in sm120], "1")
    for case, got, b200 in zip(sm120, decide(patched, sm120, "1"), sm100):
        assert not got["disabled"] and got["allocated"], f"{case}: the opt-in did not enable it: {got}"
        assert got["ran"] == ["two_shot"], f"{case}: SM120 must run the two-shot kernel only: {got['ran']}"
        assert got["max_size"] == b200["max_size"], f"{case}: SM120 takes SM100's size limit: {got['max_size']} vs {b200}"


def test_the_opt_in_needs_an_explicit_yes(decide, trees):
    _, patched = trees
    case = [{"cap": 12, "world": 8, "multicast": 0}]
    for value in ("0", "yes please"):
        got, = decide(patched, case, value)
        assert got["disabled"] and not got["allocated"], f"{OPT_IN}={value!r} turned it on: {got}"


def test_an_unknown_capability_stays_disabled_with_or_without_the_opt_in(decide, trees):
    _, patched = trees
    other = [c for c in CASES if c["cap"] == 11]
    for got in decide(patched, other, "1"):
        assert got["disabled"] and not got["allocated"], got
