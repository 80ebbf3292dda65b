"""Patch 0003 against unpatched 0.5.9: every decision of TorchSymmMemCommunicator, as a table.

Both real files (all_reduce_utils.py and torch_symm_mem.py) of the unpatched and the
patched tree are imported against a stand-in torch, for compute capability 8 to 12,
world size, multicast on or off, a failure (allocation or rendezvous) or none, and the
SM120 opt-in set or not. A row is what the communicator decided: raised (what), or
enabled or not, its kernel, its maximum size, whether it allocated, and what it logged.
"""

from __future__ import annotations

import ast
import importlib.util
import logging
import sys
import types
from pathlib import Path

import pytest

SIZES = "sglang/srt/distributed/device_communicators/all_reduce_utils.py"
SYMM = "sglang/srt/distributed/device_communicators/torch_symm_mem.py"
MODULE = "sglang.srt.distributed.device_communicators.torch_symm_mem"
OPT_IN = "SGLANG_STACK_SYMM_MEM_TWO_SHOT_WITHOUT_MULTICAST"
MiB = 1024 * 1024

CAPABILITIES = [8, 9, 10, 11, 12]
WORLD_SIZES = [2, 3, 4, 6, 8, 16]
FAILURES = {
    None: None,
    "allocation": RuntimeError("CUDA error: out of memory"),
    "rendezvous": RuntimeError("CUDA error: peer access is not supported between these two devices"),
}
# Upstream's sizes for SM100, which 0003 gives SM120 (untuned).
SM100_SIZES = {2: 64 * MiB, 4: 64 * MiB, 6: 128 * MiB, 8: 128 * MiB}

BF16 = types.SimpleNamespace(itemsize=2)


class FakeTensor:
    dtype = BF16

    def __init__(self, n=4):
        self.n = n

    def numel(self):
        return self.n

    def element_size(self):
        return 2

    def view(self, *shape):
        return self

    def copy_(self, other):
        return self

    def __getitem__(self, key):
        return self

    @property
    def shape(self):
        return (self.n,)


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str]] = []

    def emit(self, record):
        self.lines.append((record.levelname, record.getMessage()))


@pytest.fixture
def log_lines():
    handler = Lines()
    logger = logging.getLogger(MODULE)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


def load(tree: Path, monkeypatch, *, capability: int, world_size: int, multicast: int, failure: str | None):
    """Import the tree's two files against a stand-in torch; returns (module, what the stand-in saw)."""
    seen: dict[str, list] = {"kernels": [], "allocations": [], "rendezvous": []}
    error = FAILURES[failure]

    def package(name, **attrs):
        mod = types.ModuleType(name)
        mod.__path__ = []
        mod.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, mod)
        return mod

    def empty(n, device, dtype):
        seen["allocations"].append(n * dtype.itemsize)
        if failure == "allocation":
            raise error
        return FakeTensor(n)

    def rendezvous(buffer, group_name):
        seen["rendezvous"].append(group_name)
        if failure == "rendezvous":
            raise error
        return types.SimpleNamespace(multicast_ptr=multicast)

    symm = package("torch.distributed._symmetric_memory", empty=empty, rendezvous=rendezvous)
    dist = package("torch.distributed", ProcessGroup=object, get_world_size=lambda group: world_size, _symmetric_memory=symm)
    ops = types.SimpleNamespace(
        symm_mem=types.SimpleNamespace(
            multimem_all_reduce_=lambda *a: seen["kernels"].append("multimem"),
            two_shot_all_reduce_=lambda *a: seen["kernels"].append("two_shot"),
        )
    )
    cuda = types.SimpleNamespace(set_device=lambda d: None, get_device_capability=lambda d: (capability, 0))
    package(
        "torch",
        distributed=dist,
        Tensor=FakeTensor,
        bfloat16=BF16,
        device=lambda spec: spec,
        cuda=cuda,
        ops=ops,
        empty_like=lambda t: FakeTensor(t.n),
    )
    for name in ("sglang", "sglang.srt", "sglang.srt.distributed", "sglang.srt.distributed.device_communicators"):
        package(name)
    package("sglang.srt.utils", is_cuda=lambda: True, is_hip=lambda: False)
    for rel, name in ((SIZES, "all_reduce_utils"), (SYMM, "torch_symm_mem")):
        full = f"sglang.srt.distributed.device_communicators.{name}"
        spec = importlib.util.spec_from_file_location(full, tree / rel)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, full, module)
        spec.loader.exec_module(module)
    return module, seen


def decide(tree: Path, monkeypatch, log_lines, *, capability, world_size, multicast, failure) -> dict:
    """One row of the table: what the communicator of ``tree`` decided."""
    module, seen = load(tree, monkeypatch, capability=capability, world_size=world_size, multicast=multicast, failure=failure)
    log_lines.lines.clear()
    try:
        comm = module.TorchSymmMemCommunicator(group=types.SimpleNamespace(group_name="tp"), device=0)
    except Exception as err:  # what it raises is part of the row
        return {"raises": f"{type(err).__name__}: {err}", "allocated": seen["allocations"],
                "rendezvous": len(seen["rendezvous"]), "log": list(log_lines.lines)}
    row = {"enabled": not comm.disabled, "allocated": seen["allocations"], "rendezvous": len(seen["rendezvous"]),
           "log": list(log_lines.lines)}
    if comm.disabled:
        row["keeps_buffer"] = getattr(comm, "buffer", None) is not None
        return row
    comm.all_reduce(FakeTensor(8))
    row.update(
        kernel=seen["kernels"][-1],
        max_size=comm.max_size,
        takes_under_max=comm.should_torch_symm_mem_allreduce(FakeTensor(comm.max_size // 2 - 2)),
        takes_max=comm.should_torch_symm_mem_allreduce(FakeTensor(comm.max_size // 2)),
    )
    return row


def table(tree: Path, monkeypatch, log_lines, capability: int) -> dict:
    return {
        (world_size, multicast, failure): decide(
            tree, monkeypatch, log_lines, capability=capability, world_size=world_size, multicast=multicast, failure=failure
        )
        for world_size in WORLD_SIZES
        for multicast in (0, 1)
        for failure in FAILURES
    }


def differences(a: dict, b: dict) -> list[str]:
    return [f"{key}: {a[key]} != {b[key]}" for key in a if a[key] != b[key]]


@pytest.fixture(params=[False, True], ids=["default", "opt-in"])
def opt_in(request, monkeypatch):
    if request.param:
        monkeypatch.setenv(OPT_IN, "1")
    else:
        monkeypatch.delenv(OPT_IN, raising=False)
    return request.param


# --------------------------------------------------------------------------
# SM80, SM90, SM100: exactly as unpatched
# --------------------------------------------------------------------------


@pytest.mark.parametrize("capability", [8, 9, 10])
def test_known_capabilities_decide_exactly_as_unpatched(sglang_pristine, sglang_patched, monkeypatch, log_lines, opt_in, capability):
    before = table(sglang_pristine, monkeypatch, log_lines, capability)
    after = table(sglang_patched, monkeypatch, log_lines, capability)
    diff = differences(before, after)
    assert not diff, f"SM{capability}0 decides differently after the patch:\n" + "\n".join(diff)
    if capability >= 9:  # the table covers the paths that matter, not only "disabled"
        kinds = {row.get("kernel") for row in after.values()}
        assert kinds == {None, "multimem", "two_shot"}, f"SM{capability}0 rows exercised kernels {kinds}"
        assert any("raises" in row for row in after.values()), "no failure row raised"


# --------------------------------------------------------------------------
# SM110 (no table entry) and SM120
# --------------------------------------------------------------------------


def test_unpatched_sm120_and_sm110_raise_keyerror_for_every_world_size(sglang_pristine, monkeypatch, log_lines):
    for capability in (11, 12):
        rows = table(sglang_pristine, monkeypatch, log_lines, capability)
        assert {row.get("raises") for row in rows.values()} == {f"KeyError: {capability}"}, f"SM{capability}0 unpatched: {rows}"


def test_a_capability_without_a_size_table_is_disabled_with_one_warning(sglang_patched, monkeypatch, log_lines, opt_in):
    for key, row in table(sglang_patched, monkeypatch, log_lines, 11).items():
        assert row == {
            "enabled": False,
            "allocated": [],
            "rendezvous": 0,
            "log": [("WARNING", "TorchSymmMemCommunicator: Device capability 11 not supported, communicator is not available.")],
            "keeps_buffer": False,
        }, f"SM110 {key}: {row}"


def test_sm120_never_raises_keyerror_and_allocates_nothing_without_the_opt_in(sglang_pristine, sglang_patched, monkeypatch,
                                                                               log_lines, opt_in):
    sm100 = table(sglang_pristine, monkeypatch, log_lines, 10)  # unpatched SM100: the reference for each row
    sm120 = table(sglang_patched, monkeypatch, log_lines, 12)
    for (world_size, multicast, failure), row in sm120.items():
        key = f"SM120 world size {world_size}, multicast {multicast}, failure {failure}, opt-in {opt_in}"
        reference = sm100[(world_size, multicast, failure)]
        assert "KeyError" not in row.get("raises", ""), f"{key}: {row}"
        if not opt_in:
            # 0.5.23's default: disabled at the capability check, before anything that can fail,
            # with upstream's warning for a capability it does not support, naming the opt-in.
            assert row["enabled"] is False and row["allocated"] == [] and row["rendezvous"] == 0, f"{key}: {row}"
            assert row["keeps_buffer"] is False, f"{key}: {row}"
            assert "raises" not in row, f"{key}: a failure in an allocation or rendezvous that must not happen: {row}"
            assert len(row["log"]) == 1 and row["log"][0][0] == "WARNING", f"{key}: logged {row['log']}"
            message = row["log"][0][1]
            assert message.startswith("TorchSymmMemCommunicator: Device capability 12 not supported, "
                                      "communicator is not available."), f"{key}: {message!r}"
            assert OPT_IN in message and "unmeasured on PCIe" in message, f"{key}: the warning does not name the opt-in"
            continue
        if world_size not in SM100_SIZES or failure:
            # With the opt-in: an unsupported world size, or a failed allocation or rendezvous, as
            # upstream does on SM100 (disabled with its warning, or the error raised on that rank).
            assert row == reference, f"{key}: {row}, unpatched SM100 does {reference}"
            continue
        assert row["allocated"] == [SM100_SIZES[world_size]], f"{key}: allocated {row['allocated']}"
        assert row["enabled"] and row["kernel"] == "two_shot", f"{key}: {row}"
        assert row["max_size"] == SM100_SIZES[world_size], f"{key}: max size {row['max_size']}"
        assert row["takes_under_max"] and not row["takes_max"], f"{key}: size limit not applied: {row}"
        if multicast:
            assert row["log"] == [], f"{key}: logged {row['log']}"
        else:
            assert len(row["log"]) == 1 and row["log"][0][0] == "INFO", f"{key}: logged {row['log']}"
            assert OPT_IN in row["log"][0][1] and "unmeasured on PCIe" in row["log"][0][1], f"{key}: {row['log']}"


def test_the_opt_in_needs_an_explicit_yes(sglang_patched, monkeypatch, log_lines):
    for value in ("0", "", "no", "false", "yes please"):
        monkeypatch.setenv(OPT_IN, value)
        row = decide(sglang_patched, monkeypatch, log_lines, capability=12, world_size=8, multicast=0, failure=None)
        assert row["enabled"] is False, f"{OPT_IN}={value!r} turned the two-shot path on: {row}"
    for value in ("1", "true", "TRUE"):
        monkeypatch.setenv(OPT_IN, value)
        row = decide(sglang_patched, monkeypatch, log_lines, capability=12, world_size=8, multicast=0, failure=None)
        assert row["enabled"] is True, f"{OPT_IN}={value!r} did not turn it on: {row}"


def test_no_rank_swallows_a_failure_on_its_own(sglang_patched):
    """A per-rank fallback would leave the ranks on different all-reduce paths (a hang):
    the communicator must not catch exceptions; a failure raises on the rank it hit."""
    tree = ast.parse((sglang_patched / SYMM).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TorchSymmMemCommunicator")
    handlers = [n.lineno for n in ast.walk(cls) if isinstance(n, ast.ExceptHandler)]
    assert handlers == [], f"{SYMM}: TorchSymmMemCommunicator catches exceptions at lines {handlers}"
