"""Patch 0007 (profile 0.5.23): a drafter whose first layer id is -1 gets the embedding output, not a crash.

0.5.23's own code runs, in a Python of the profile's pins (torch included): ``DeepseekV2ForCausalLM.
set_eagle3_layers_to_capture`` (Kimi-K2.5's text model) with the drafter's ids, then ``DeepseekV2Model.forward``
with its real ``AuxHiddenStatePacker``. What stands in: the decoder layers (a small nonlinear map each, which
capture their input as the layer boundary does: the updated residual, after the all-reduce) and the residual
stream's start, completion and final norm around them (identity here: the stand-in layers hand the whole hidden
state on). Each capture is matched to the layer whose input it is, computed apart: input 0 is the embedding.

Unpatched, ids ``[-1, 2, 4]`` stay ``[-1, 2, 4]``: -1 is no loop index, so the packer refuses the short set on
the first forward (RuntimeError "captured 2 of 3 aux hidden states"), and 2 and 4 would read the inputs of
layers 2 and 4, one layer early for a drafter of the "output of layer X" convention.
"""

from __future__ import annotations

import json

import pytest

from sglang_cpu_env import run_json

pytestmark = [pytest.mark.sglang_env, pytest.mark.network]

LAYERS = 6

SCRIPT = r"""
import json, sys
from types import SimpleNamespace as NS
import torch
import sglang.srt.models.deepseek_v2 as dv2

def run(layers, ids):
    torch.manual_seed(0)
    weights = [torch.randn(4, 4) for _ in range(layers)]
    embedding = torch.ones(1, 4) * 0.5

    causal = object.__new__(dv2.DeepseekV2ForCausalLM)
    torch.nn.Module.__init__(causal)
    causal.pp_group, causal.config, causal.model = NS(is_last_rank=True), NS(num_hidden_layers=layers), NS(layers_to_capture=[])
    causal.set_eagle3_layers_to_capture(ids)
    capture = list(causal.model.layers_to_capture)

    class Layer:
        def __init__(self, i):
            self.i = i
        def __call__(self, positions, hidden_states, forward_batch, zero_allocator, gemm_output_zero_allocator,
                     llama_4_scaling, prev_topk_indices=None, captured_last_layer_outputs=None,
                     next_full_attention_layer_id=None):
            if captured_last_layer_outputs is not None:
                captured_last_layer_outputs.capture(hidden_states)
            return torch.tanh(hidden_states @ weights[self.i]) + hidden_states, None

    model = object.__new__(dv2.DeepseekV2Model)
    torch.nn.Module.__init__(model)
    for k, v in dict(start_layer=0, end_layer=layers, pp_group=NS(is_first_rank=True, is_last_rank=True),
                     embed_tokens=lambda ids: embedding, layers=[Layer(i) for i in range(layers)],
                     layers_to_capture=capture, first_k_dense_replace=1, llama_4_scaling_config=None,
                     next_full_attention_layer_id={}, use_dsa=False, norm=lambda h: h, config=NS()).items():
        object.__setattr__(model, k, v)
    dv2.residual_batch = NS(start=lambda fb: None, complete_output=lambda h, fb: h, final_norm=lambda h, fb, norm: norm(h))
    batch = NS(can_run_tbo=False, forward_mode=NS(is_idle=lambda: False))
    out = {"layers_to_capture": capture}
    try:
        hidden, aux = dv2.DeepseekV2Model.forward(model, torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long), batch)
        inputs, h = [], embedding
        for i in range(layers):
            inputs.append(h)
            h = torch.tanh(h @ weights[i]) + h
        rows = aux.reshape(1, -1, 4)[0]
        out["inputs_of"] = [next((i for i, x in enumerate(inputs) if torch.equal(x[0], row)), None) for row in rows]
        out["output_unchanged"] = torch.equal(hidden, h)
    except RuntimeError as err:
        out["error"] = str(err)
    return out

print(json.dumps([run(int(sys.argv[1]), ids) for ids in json.loads(sys.argv[2])]))
"""


IDS = [[-1, 2, 4], [1, 2, 4], [2, 3, 5], [0, 3, 5]]


@pytest.fixture(scope="module")
def runs(upstream_python, trees):
    """What each tree captures for every id list: one run per tree."""
    return [dict(zip(map(str, IDS), run_json(upstream_python, tree, SCRIPT, str(LAYERS), json.dumps(IDS)))) for tree in trees]


def capture(runs, tree: int, ids):
    return runs[tree][str(ids)]


def test_unpatched_a_first_id_of_minus_one_fails_the_first_forward(runs):
    got = capture(runs, 0, [-1, 2, 4])
    assert got["layers_to_capture"] == [-1, 2, 4], f"0.5.23 shifted the ids after all: {got}"
    assert "captured 2 of 3" in got.get("error", ""), f"the embedding's capture should be missing: {got}"


def test_patched_the_embedding_and_the_layers_outputs_are_captured(runs):
    got = capture(runs, 1, [-1, 2, 4])
    assert "error" not in got, f"the patched forward failed: {got}"
    assert got["inputs_of"] == [0, 3, 5], f"captures are the inputs of {got['inputs_of']}: want the embedding (0), " \
                                          "then the outputs of layers 2 and 4 (inputs of 3 and 5)"
    assert got["output_unchanged"], "the capture changed the model's output"


@pytest.mark.parametrize("ids", IDS[1:], ids=["first-1", "first-2", "first-0"])
def test_other_drafters_capture_as_upstream(runs, ids):
    before, after = capture(runs, 0, ids), capture(runs, 1, ids)
    assert before == after, f"ids {ids}: unpatched {before}, patched {after}"
    assert "error" not in after, after
