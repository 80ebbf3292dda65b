"""On a GPU: a CUDA graph replays the EAGLE-3 layers that were set when it was captured.

This is the premise of patch 0004. A model in the shape of SGLang's
``DeepseekV2Model.forward`` picks the layers whose hidden states it hands to the
drafter from a Python attribute (``layers_to_capture``) while the layer loop runs.
A CUDA graph records the kernels that loop launched, not the loop, so changing the
attribute after capture changes nothing at replay: the order of ``set_eagle3_layers_to_capture``
and graph capture decides what every graph-replayed verify pass hands the drafter.
tests/patching/test_patch_graph_capture.py drives the real 0.5.9 functions without a GPU;
this test shows, on real CUDA, why their order matters.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

LAYERS = 8
DEFAULTS = [2, LAYERS // 2, LAYERS - 3]  # SGLang's default EAGLE-3 layers: [2, n/2, n-3]
DRAFTER = [-1, 3, 5]  # a drafter that also takes the embedding output (layer id -1, patch 0002)


class Target(torch.nn.Module):
    """The capture loop of deepseek_v2.py, without attention: aux states come from a Python list."""

    def __init__(self, width: int = 64):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(LAYERS))
        self.layers_to_capture: list[int] = []

    def set_eagle3_layers_to_capture(self, layer_ids=None):
        # As deepseek_v2.py: the defaults as they are, a drafter's ids shifted by one.
        self.layers_to_capture = list(DEFAULTS) if layer_ids is None else [i + 1 for i in layer_ids]

    def forward(self, hidden):
        aux = []
        for i, layer in enumerate(self.layers):
            if i in self.layers_to_capture:
                aux.append(hidden)
            hidden = torch.tanh(layer(hidden))
        return torch.cat(aux, dim=-1)


def _captured(model: Target, static_in: torch.Tensor):
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        model(static_in)  # warm-up outside the graph, as SGLang's capture does
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = model(static_in)
    return graph, static_out


@torch.no_grad()
def test_graph_replays_the_layers_set_at_capture_not_those_set_after():
    torch.manual_seed(0)
    model = Target().cuda().eval()
    static_in = torch.randn(4, 64, device="cuda")

    model.set_eagle3_layers_to_capture(DRAFTER)
    want = model(static_in).clone()  # what the drafter was trained on: eager, its own layers
    model.set_eagle3_layers_to_capture()
    defaults = model(static_in).clone()
    assert not torch.equal(want, defaults), "the drafter's layers must differ from the defaults for this test to mean anything"

    # 0.5.9's order: capture with the defaults (cuda_graph_runner.py:365), set the drafter's after (model_runner.py:622).
    model.set_eagle3_layers_to_capture()
    graph, out = _captured(model, static_in)
    model.set_eagle3_layers_to_capture(DRAFTER)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, defaults), "a graph captured before the drafter's ids were set replays the defaults"
    assert not torch.equal(out, want), "so the drafter does not get the hidden states it asked for"

    # Patch 0004's order: the drafter's ids first, then capture.
    model.set_eagle3_layers_to_capture(DRAFTER)
    graph, out = _captured(model, static_in)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, want), "captured after the drafter's ids are set, replay hands the drafter its own layers"
