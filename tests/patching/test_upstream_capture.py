"""0006's question on a release with the layer boundary: does EAGLE-3 capture reduced activations with the fusion on?

Patch 0006 fixed 0.5.9, whose capture read ``hidden_states + residual`` before FlashInfer's fused all-reduce:
each rank's own partial sum. Upstream moved the capture into the layer boundary (sgl-project/sglang#28343).
This runs the release's own boundary, in a Python of the profile's pins, and asks the same question as
tests/patching/test_patch_fused_capture.py: at TP 2 and TP 8, with the fusion on and off, does every rank capture what
TP 1 captures? ``prove`` is the proof of 0006's retirement (tests/patching/test_upstream.py runs it on the unpatched tree);
the test here shows it failing on a boundary that captures before the all-reduce.

What runs is the release's: ``StageBoundary.prepare`` (``_prepare_attention``, ``_prepare``) with its
``capture_gathered`` collector, ``ResidualStream`` (``record``, ``input``, ``write``), ``Contribution``,
``UnreducedOutput`` and ``AuxHiddenStatePacker``, on real torch tensors. What stands in: each tensor-parallel
rank is a thread; a layer's body is a small map whose row-parallel output is this rank's share of the sum (an
``UnreducedOutput`` owed to the next boundary, as the exit leaves it when the fusion defers the all-reduce, or
reduced at once when it does not); and the boundary's selected entry step, which with the fusion does what
FlashInfer's fused kernel does (all-reduce, add the residual, RMSNorm) in one call, and without it adds and
normalizes. Collectives between the threads are real: a barrier, then every rank sums the same shares in the
same order.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sglang_cpu_env import run_json

pytestmark = [pytest.mark.sglang_env, pytest.mark.network]

STAGE = "sglang/srt/layers/layer_boundary/stage.py"

SCRIPT = r"""
import json, sys, threading
from types import SimpleNamespace as NS
import torch
from sglang.srt.layers.aux_hidden_states import AuxHiddenStatePacker
from sglang.srt.layers.layer_boundary.contracts import StageKind
from sglang.srt.layers.layer_boundary.output import UnreducedOutput
from sglang.srt.layers.layer_boundary.residual.add_norm import PLAIN_ADD
from sglang.srt.layers.layer_boundary.residual.stream import ResidualStream
from sglang.srt.layers.layer_boundary.stage import StageBoundary

LAYERS, CAPTURE = 6, [0, 2, 3, 5]
torch.manual_seed(0)
weights = [torch.randn(4, 4, dtype=torch.float64) for _ in range(LAYERS)]

def run_case(tp, fusion):
    class Group:
        def __init__(self, size):
            self.size, self.barrier, self.slots, self.local = size, threading.Barrier(size, timeout=60), [None] * size, threading.local()
            self.fused = 0
        def all_reduce(self, x):
            self.slots[self.local.rank] = x
            self.barrier.wait()
            total = self.slots[0].clone()
            for share in self.slots[1:]:
                total = total + share
            self.barrier.wait()
            return total

    def rms_norm(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    group = Group(tp)

    class Entry:
        # The boundary's selected entry step: with the fusion, FlashInfer's fused all-reduce + residual add + RMSNorm.
        input_move = None
        attn_input_adapter = None
        declared_sum = None
        input_retainable = False
        capture_preserves_residual = None
        def prepare(self, hidden, residual, forward_batch, norm, **call):
            if residual is None:
                return norm(hidden), hidden
            if isinstance(hidden, UnreducedOutput):
                assert fusion, "an unreduced output reached the boundary with the fusion off"
                if group.local.rank == 0:
                    group.fused += 1
                residual = group.all_reduce(hidden.partial) + residual
            else:
                residual = hidden + residual
            return norm(residual), residual

    entry = Entry()
    plan = NS(norm=rms_norm, paths={}, enters_stack=False, _publish_lora_layout=None, path_for=lambda fb: NS(entry=entry))
    boundaries = [StageBoundary(plan, declaration=NS(kind=StageKind.ATTENTION, row_transport=None)) for _ in range(LAYERS)]

    def rank_main(rank, results):
        group.local.rank = rank
        batch = NS(residual_stream=ResidualStream())
        packer = AuxHiddenStatePacker(len(CAPTURE))
        hidden = torch.tensor([[0.3, -1.2, 0.7, 2.0]], dtype=torch.float64)  # the embedding output
        for i, boundary in enumerate(boundaries):
            x = boundary.prepare(hidden, batch, capture_gathered=packer if i in CAPTURE else None)
            # The layer's body: row-parallel, so this rank's share of the output; the sum is owed to the next boundary.
            share = torch.tanh(x @ weights[i]) * ((rank + 1) / (tp * (tp + 1) / 2))
            stream = batch.residual_stream
            if fusion and tp > 1:
                hidden = stream.record(UnreducedOutput(share, group=group), PLAIN_ADD)
            else:
                hidden = stream.record(group.all_reduce(share) if tp > 1 else share, PLAIN_ADD)
        results[rank] = packer.finalize().reshape(len(CAPTURE), 4).tolist()

    results, errors = [None] * tp, []
    def run(rank):
        try:
            rank_main(rank, results)
        except BaseException as err:
            errors.append(f"rank {rank}: {type(err).__name__}: {err}")
            group.barrier.abort()
    threads = [threading.Thread(target=run, args=(r,)) for r in range(tp)]
    for t in threads: t.start()
    for t in threads: t.join(120)
    return {"captures": results, "fused": group.fused, "errors": errors}

print(json.dumps([run_case(tp, fusion == "on") for tp, fusion in json.loads(sys.argv[1])]))
"""


CASES = [(tp, fusion) for fusion in ("on", "off") for tp in (1, 2, 8)]


def prove(python: Path, tree: Path) -> None:
    """Every rank at TP 2 and 8 captures what TP 1 captures, with the fusion on and off; the fused path ran."""
    runs = dict(zip(CASES, run_json(python, tree, SCRIPT, json.dumps(CASES))))
    for (tp, fusion), got in runs.items():
        assert not got["errors"], f"TP {tp}, fusion {fusion}: {got['errors'][0]}"
        want = runs[(1, fusion)]["captures"][0]
        if tp > 1:
            assert got["fused"] == (5 if fusion == "on" else 0), f"TP {tp}: fused all-reduces that ran: {got['fused']}"
        for rank, rows in enumerate(got["captures"]):
            for layer, (a, b) in enumerate(zip(rows, want)):
                assert all(abs(x - y) <= 1e-9 * max(1.0, abs(y)) for x, y in zip(a, b)), \
                    f"TP {tp} rank {rank}, fusion {fusion}: capture {layer} is {a}, TP 1 captures {b}"


def test_the_proof_fails_on_a_capture_before_the_all_reduce(upstream_python, trees, tmp_path):
    """The proof can fail: a copy of the boundary that captures before its prepare step (0.5.9's place) is caught."""
    pristine, _ = trees
    tree = tmp_path / "site"
    shutil.copytree(pristine / "sglang", tree / "sglang", copy_function=shutil.copyfile,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    for so in (pristine / "sglang").rglob("*.so"):
        (tree / so.relative_to(pristine)).symlink_to(so)
    source = (tree / STAGE).read_text()
    start = "        hidden_states, steps = self._select(hidden_states, forward_batch)\n        hidden_states, stream = self._prepare(\n"
    assert source.count(start) == 1, "StageBoundary._prepare_attention moved: update this test"
    early = ("        if capture_gathered is not None:  # before the all-reduce: the layer input as each rank holds it\n"
             "            pending = stream.pending\n"
             "            share = pending.value if pending is not None else hidden_states\n"
             "            capture_gathered.capture(share + stream.residual if stream.residual is not None else share)\n"
             "            capture_gathered = None\n")
    (tree / STAGE).write_text(source.replace(start, early + start))
    with pytest.raises(AssertionError, match="fusion on: capture 1 is"):
        prove(upstream_python, tree)
