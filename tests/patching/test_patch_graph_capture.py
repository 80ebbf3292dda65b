"""Which EAGLE-3 layers the target model captures, in every forward and every graph capture.

A CUDA graph replays the kernels recorded while it was captured, so the hidden states a
target-verify pass hands to the drafter come from the layers that were set at capture
time, whatever is set later. These tests run the tree's own code for every place that
captures a graph or sets the layers, with torch stubbed and no GPU:

- model_runner.py: ``ModelRunner.initialize``, ``kernel_warmup`` and the FlashInfer
  autotune ``_dummy_run``, ``init_device_graphs``, ``init_piecewise_cuda_graphs`` and
  ``update_weights_from_disk`` (which captures again);
- cuda_graph_runner.py: ``CudaGraphRunner.__init__``, ``capture``,
  ``capture_one_batch_size``, ``_capture_graph`` and ``patch_model``;
- the target model's ``set_eagle3_layers_to_capture``: Kimi-K2.5's delegation (patch
  0001) over ``DeepseekV2ForCausalLM``'s.

The stand-in model's forward records the layers it would capture and whether a graph
was being captured at the time. The piecewise and CPU graph runners are stand-ins that
capture by running the forward once (they trace the Python forward, as torch.compile
does); NPUGraphRunner inherits ``CudaGraphRunner.__init__`` (npu_graph_runner.py:73).
"""

from __future__ import annotations

import sys
import types
import typing
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from sglang_source import Anything, Namespace, load_functions

MODEL_RUNNER = "sglang/srt/model_executor/model_runner.py"
GRAPH_RUNNER = "sglang/srt/model_executor/cuda_graph_runner.py"
KIMI = "sglang/srt/models/kimi_k25.py"
DEEPSEEK = "sglang/srt/models/deepseek_v2.py"

NUM_LAYERS = 61  # Kimi-K2.5's text model (DeepSeek-V3)
DEFAULT_LAYERS = (2, NUM_LAYERS // 2, NUM_LAYERS - 3)  # what set_eagle3_layers_to_capture() picks without ids
BATCH_SIZES = [1, 2, 4]


class Graph:
    """A CUDA graph: the layers each forward captured while it was being recorded."""

    def __init__(self):
        self.layers = []

    def replay(self):
        assert len(self.layers) == 1, f"one forward per captured graph, got {self.layers}"
        return self.layers[0]


class Device(Anything):
    """``torch.cuda`` as the capture code uses it; ``graph()`` marks a capture in progress."""

    def __init__(self):
        super().__init__("torch.cuda")
        self.capturing: Graph | None = None

    def CUDAGraph(self):
        return Graph()

    @contextmanager
    def graph(self, cuda_graph, pool=None, stream=None):
        self.capturing = cuda_graph
        try:
            yield
        finally:
            self.capturing = None

    def get_device_capability(self, device=None):
        return (12, 0)


class Torch(Anything):
    def __init__(self, device: Device):
        super().__init__("torch")
        self.cuda = device
        self.get_device_module = lambda name=None: device


class Given(Anything):
    """``server_args``, ``model_config``: the given values; every other one an ``Anything`` (a flag: off)."""

    def __init__(self, name: str, **values):
        super().__init__(name)
        self.__dict__.update(values)


class Target:
    """The target model: the tree's set_eagle3_layers_to_capture, and a forward that records."""

    def __init__(self, tree: Path, device: Device, kimi: bool = True):
        self.device = device
        self.events: list[tuple[str, tuple | None]] = []
        deepseek = load_functions(
            tree / DEEPSEEK, ["DeepseekV2ForCausalLM.set_eagle3_layers_to_capture"], {"Optional": typing.Optional, "List": typing.List}
        )
        language_model = type("DeepseekV3ForCausalLM", (), deepseek)()
        language_model.pp_group = NS(is_last_rank=True)
        language_model.config = NS(num_hidden_layers=NUM_LAYERS)
        language_model.capture_aux_hidden_states = False
        language_model.model = NS(layers_to_capture=[], layers=[NS(self_attn=NS(attn=i)) for i in range(NUM_LAYERS)])
        language_model.forward = self.forward
        self.language_model = language_model
        self.model = language_model  # DeepSeek-V3 itself
        try:
            delegation = load_functions(
                tree / KIMI,
                [f"KimiK25ForConditionalGeneration.{m}" for m in ("_language_model_method", "set_eagle3_layers_to_capture")],
                {"Optional": typing.Optional, "List": typing.List},
            )
        except LookupError:  # an unpatched tree: Kimi-K2.5 cannot run EAGLE-3 there
            return
        if kimi:
            self.model = type("KimiK25ForConditionalGeneration", (), delegation)()
            self.model.language_model = language_model
            self.model.forward = self.forward

    def active(self) -> tuple | None:
        lm = self.language_model
        return tuple(lm.model.layers_to_capture) if lm.capture_aux_hidden_states else None

    def forward(self, input_ids, positions, forward_batch, **kwargs):
        graph = self.device.capturing
        if graph is not None:
            graph.layers.append(self.active())
        self.events.append(("capture" if graph is not None else "eager", self.active()))
        return Anything("logits")


def stand_in_runner(kind: str):
    """A graph runner that captures the way torch.compile traces: one forward, under capture."""

    class Runner:
        def __init__(self, model_runner):
            self.graphs = {}
            graph = model_runner.model_device.CUDAGraph()
            with model_runner.model_device.graph(graph):
                model_runner.model.forward(Anything("input_ids"), Anything("positions"), Anything(kind))
            self.graphs[kind] = graph

    Runner.__name__ = kind
    return Runner


class Loader:
    """The default model loader: loads no weights."""

    Source = Anything("Source")

    def _get_weights_iterator(self, source):
        return iter(())

    def load_weights_and_postprocess(self, model, weights, device):
        pass


def model_runner(tree: Path, monkeypatch, *, layer_ids, device_kind="cuda", piecewise=False, kimi=True):
    """A ModelRunner of ``tree`` set up as ModelRunner.__init__ sets it up for an EAGLE-3 target.

    The target is Kimi-K2.5 where the tree can run it (patch 0001) and ``kimi`` is set,
    else DeepSeek-V3.
    """
    device = Device()
    torch = Torch(device)
    target = Target(tree, device, kimi)
    for name, attrs in (
        ("flashinfer", {}),
        ("flashinfer.autotuner", {"autotune": lambda *a, **k: nullcontext()}),
        ("sglang.srt.speculative.eagle_info", {"EagleVerifyInput": Anything("EagleVerifyInput")}),
    ):
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, module)

    graph_ns = Namespace(
        torch=torch,
        contextmanager=contextmanager,
        get_batch_sizes_to_capture=lambda runner, num_tokens_per_bs: (list(BATCH_SIZES), []),
        DllmConfig=NS(from_server_args=lambda args: None),
    )
    graph_funcs = load_functions(
        tree / GRAPH_RUNNER,
        ["patch_model"] + [f"CudaGraphRunner.{m}" for m in ("__init__", "capture", "capture_one_batch_size", "_capture_graph", "_create_device_graph")],
        graph_ns,
    )
    graph_funcs.pop("patch_model")
    cuda_graph_runner = type("CudaGraphRunner", (Anything,), graph_funcs)

    runner_ns = Namespace(
        torch=torch,
        defaultdict=defaultdict,
        CudaGraphRunner=cuda_graph_runner,
        NPUGraphRunner=cuda_graph_runner,  # a subclass that keeps CudaGraphRunner.__init__
        CPUGraphRunner=stand_in_runner("cpu graph"),
        PiecewiseCudaGraphRunner=stand_in_runner("piecewise graph"),
        DefaultModelLoader=Loader,
        get_model_loader=lambda load_config, model_config: Loader(),
    )
    methods = [
        "initialize", "kernel_warmup", "_should_run_flashinfer_autotune", "_flashinfer_autotune", "_dummy_run",
        "init_device_graphs", "init_piecewise_cuda_graphs", "can_run_piecewise_cuda_graph", "update_weights_from_disk",
    ]
    runner_funcs = load_functions(tree / MODEL_RUNNER, ["resolve_language_model"] + [f"ModelRunner.{m}" for m in methods], runner_ns)
    runner_funcs.pop("resolve_language_model")
    runner = type("ModelRunner", (Anything,), runner_funcs)()
    runner.__dict__.update(
        server_args=Given(
            "server_args",
            moe_runner_backend="flashinfer_trtllm",  # runs the FlashInfer autotune warm-up (_dummy_run)
            speculative_num_draft_tokens=4,
            enable_piecewise_cuda_graph=piecewise,
            enable_torch_compile=device_kind == "cpu",  # CPU graphs need it
        ),
        model_config=Given(
            "model_config",
            num_nextn_predict_layers=None,
            num_hidden_layers=NUM_LAYERS,
            num_attention_layers=NUM_LAYERS,
            hf_config=NS(architectures=[type(target.model).__name__]),
            dtype="bfloat16",
        ),
        spec_algorithm=NS(
            is_eagle3=lambda: True, is_eagle=lambda: True, is_none=lambda: False, is_standalone=lambda: False, is_ngram=lambda: False
        ),
        model=target.model,
        model_device=device,
        device=device_kind,
        is_draft_worker=False,
        is_generation=True,
        tp_size=1,
        # What ModelRunner.__init__ (model_runner.py:344-368) reads from the drafter's eagle_config.
        eagle_use_aux_hidden_state=True,
        eagle_aux_hidden_state_layer_ids=layer_ids,
    )
    return runner, target


def graphs(runner) -> dict:
    """Every graph captured so far, by runner and batch size."""
    out = {}
    for name in ("graph_runner", "piecewise_cuda_graph_runner"):
        holder = runner.__dict__.get(name)
        if holder is not None:
            out.update({(name, key): graph for key, graph in holder.graphs.items()})
    return out


def expected(layer_ids) -> tuple:
    # set_eagle3_layers_to_capture stores layer_id + 1: layer i takes layer i-1's output.
    return DEFAULT_LAYERS if layer_ids is None else tuple(i + 1 for i in layer_ids)


# --------------------------------------------------------------------------
# The finding, on the unpatched 0.5.9 code
# --------------------------------------------------------------------------


def test_unpatched_graphs_replay_the_default_layers_while_prefill_uses_the_drafters(sglang_pristine, monkeypatch):
    """model_runner.py:609 captures (cuda_graph_runner.py:365 sets the defaults); :622 sets the drafter's after."""
    ids = [-1, 29, 57]
    runner, target = model_runner(sglang_pristine, monkeypatch, layer_ids=ids)
    runner.initialize(min_per_gpu_memory=0)
    captured = graphs(runner)
    assert sorted(key for _, key in captured) == BATCH_SIZES, f"graphs captured: {sorted(captured)}"
    verify = {graph.replay() for graph in captured.values()}
    target.forward(None, None, None)  # a prefill after start-up: eager
    prefill = target.events[-1]
    assert verify == {DEFAULT_LAYERS}, f"the unpatched graphs captured {verify}"
    assert prefill == ("eager", expected(ids)), f"the unpatched prefill captured {prefill}"
    warmup = target.events[0]
    assert warmup == ("eager", DEFAULT_LAYERS), f"the autotune warm-up (_dummy_run, model_runner.py:1906) ran {warmup}"


# --------------------------------------------------------------------------
# The series: the drafter's layers everywhere
# --------------------------------------------------------------------------


@pytest.mark.parametrize("layer_ids", [[-1, 29, 57], [1, 29, 57], [5, 17, 40], None], ids=["embedding", "defaults", "other", "no-ids"])
@pytest.mark.parametrize(
    "device_kind, piecewise, kimi",
    [("cuda", False, True), ("cpu", False, True), ("cuda", False, False), ("cuda", True, False)],
    ids=["kimi-cuda-graphs", "kimi-cpu-graphs", "deepseek-cuda-graphs", "deepseek-cuda+piecewise"],
)
def test_every_capture_and_every_forward_uses_the_drafters_layers(sglang_patched, monkeypatch, layer_ids, device_kind, piecewise, kimi):
    runner, target = model_runner(
        sglang_patched, monkeypatch, layer_ids=layer_ids, device_kind=device_kind, piecewise=piecewise, kimi=kimi
    )
    runner.initialize(min_per_gpu_memory=0)
    want = expected(layer_ids)
    captured = graphs(runner)
    kinds = {name for name, _ in captured}
    assert kinds == ({"graph_runner", "piecewise_cuda_graph_runner"} if piecewise else {"graph_runner"}), f"captured: {sorted(captured)}"
    if device_kind == "cuda":
        assert sorted(k for n, k in captured if n == "graph_runner") == BATCH_SIZES, f"CUDA graphs: {sorted(captured)}"
    for key, graph in captured.items():
        assert graph.replay() == want, f"graph {key} replays layers {graph.replay()}, the drafter asked for {want}"
    target.forward(None, None, None)  # a prefill after start-up
    wrong = [event for event in target.events if event[1] != want]
    assert not wrong, f"forwards that captured other layers than the drafter's {want}: {wrong}"
    assert any(kind == "capture" for kind, _ in target.events), "no forward ran under a graph capture"


def test_a_weight_update_that_captures_again_keeps_the_drafters_layers(sglang_patched, monkeypatch):
    """update_weights_from_disk(recapture_cuda_graph=True) runs init_device_graphs() again (model_runner.py:1173)."""
    ids = [-1, 29, 57]
    runner, target = model_runner(sglang_patched, monkeypatch, layer_ids=ids)
    runner.initialize(min_per_gpu_memory=0)
    first = runner.graph_runner
    ok, message = runner.update_weights_from_disk("/models/new", "auto", recapture_cuda_graph=True)
    assert ok, f"the stand-in weight update failed: {message}"
    assert runner.graph_runner is not first, "the weight update did not capture the graphs again"
    replays = {graph.replay() for graph in runner.graph_runner.graphs.values()}
    target.forward(None, None, None)
    assert replays == {expected(ids)}, f"graphs captured after the weight update: {replays}"
    assert target.events[-1] == ("eager", expected(ids)), f"prefill after the weight update: {target.events[-1]}"


def test_piecewise_graphs_cannot_start_on_kimi_k25_in_0_5_9(sglang_patched, monkeypatch):
    """Upstream, not the series: init_piecewise_cuda_graphs reads model.model (model_runner.py:255),
    which KimiK25ForConditionalGeneration lacks; --enable-piecewise-cuda-graph (off by default) stops there."""
    runner, _ = model_runner(sglang_patched, monkeypatch, layer_ids=[-1, 29, 57], piecewise=True)
    with pytest.raises(AttributeError, match="'KimiK25ForConditionalGeneration' object has no attribute 'model'"):
        runner.initialize(min_per_gpu_memory=0)
