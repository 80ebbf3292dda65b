"""Patch 0006: with FlashInfer's all-reduce fusion, EAGLE-3 captures reduced activations, not per-rank partial sums.

The real 0.5.9 functions run: ``DeepseekV2Model.forward`` (the capture), ``DeepseekV2DecoderLayer.forward``,
``LayerCommunicator.prepare_attn`` and ``should_fuse_mlp_allreduce_with_next_layer``,
``RMSNorm.forward_with_allreduce_fusion`` and ``DeepseekV2MLP.forward``. What stands in: tensors (small
vectors of floats), the attention, the linear layers (a row-parallel ``down_proj`` leaves a per-rank share
of the output, as a TP shard does) and the collective kernels. Each tensor-parallel rank is a thread with
its own model; the all-reduce and FlashInfer's fused all-reduce + residual + RMSNorm are real collectives
between those threads (a barrier, then every rank sums the same shares in the same order).

The reference is the same model at TP 1, where nothing is fused: every rank at TP 2 and TP 8 must capture
what TP 1 captures, with the fusion on and off.
"""

from __future__ import annotations

import math
import shutil
import sys
import threading
import types
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from sglang_source import Namespace, load_functions
from test_patches import DEEPSEEK, PATCHES

PATCH = "0006-deepseek-v2-eagle3-capture-after-fused-allreduce.patch"

COMMUNICATOR = Path("sglang/srt/layers/communicator.py")
LAYERNORM = Path("sglang/srt/layers/layernorm.py")
LAYERS = 6
CAPTURE = [0, 2, 3, 5]  # set_eagle3_layers_to_capture stores layer id + 1: the embedding (0002) and three layers


class T:
    """A one-token activation: a few floats, with what the code reads of a torch.Tensor (and room for its flags)."""

    def __init__(self, values):
        self.v = tuple(float(x) for x in values)
        self.shape = (1, len(self.v))

    def __add__(self, other):
        return T(a + b for a, b in zip(self.v, other.v))

    def scaled(self, k):
        return T(a * k for a in self.v)

    def clone(self):
        return T(self.v)

    def close_to(self, other, rel=1e-9):
        return all(math.isclose(a, b, rel_tol=rel, abs_tol=1e-12) for a, b in zip(self.v, other.v))

    def __repr__(self):
        return "T(" + ", ".join(f"{x:.6g}" for x in self.v) + ")"


TORCH = NS(Tensor=object, float32="float32", uint8="uint8", float8_e4m3fn="float8_e4m3fn",
           cuda=NS(current_stream=lambda: None))  # dtypes are compared, never used


def rms_norm(x: T, weight: float = 1.0, eps: float = 1e-6) -> T:
    scale = 1 / math.sqrt(sum(a * a for a in x.v) / len(x.v) + eps)
    return x.scaled(scale * weight)


class Group:
    """The tensor-parallel group: the collectives the threads (ranks) meet in."""

    def __init__(self, size: int):
        self.size = size
        self.barrier = threading.Barrier(size, timeout=30)
        self.slots: list = [None] * size
        self.local = threading.local()
        self.fused_calls = 0

    def all_reduce(self, x: T) -> T:
        rank = self.local.rank
        self.slots[rank] = x
        self.barrier.wait()
        total = self.slots[0]
        for share in self.slots[1:]:
            total = total + share
        self.barrier.wait()
        return total

    def fused_allreduce_residual_rmsnorm(self, input_tensor, residual, weight, eps, **_):
        """FlashInfer's fused kernel: (RMSNorm(all_reduce(input) + residual), all_reduce(input) + residual)."""
        if self.local.rank == 0:
            self.fused_calls += 1
        residual_out = self.all_reduce(input_tensor) + residual
        return rms_norm(residual_out, weight, eps), residual_out


def load_layer_classes(tree: Path, group: Group, fusion: bool):
    """The decoder layer, its communicator, its input RMSNorm and its MLP, from ``tree``, for ``group``."""
    comm_ns = Namespace(
        torch=TORCH,
        get_attn_tp_context=lambda: NS(input_scattered=False),
        _use_aiter=False,
        _is_gfx95_supported=False,
        is_dp_attention_enabled=lambda: False,
        apply_flashinfer_allreduce_fusion=lambda batch_size: fusion and 0 < batch_size <= 2048,
    )
    comm = load_functions(tree / COMMUNICATOR, ["LayerCommunicator.prepare_attn",
                                                "LayerCommunicator.should_fuse_mlp_allreduce_with_next_layer"], comm_ns)

    def prepare_mlp(self, hidden_states, residual, forward_batch):
        # The attention output is already reduced (o_proj); the fused add + RMSNorm of post_attention_layernorm.
        residual = hidden_states + residual
        return rms_norm(residual), residual

    def postprocess_layer(self, hidden_states, residual, forward_batch):
        return hidden_states, residual  # TP_ATTN_FULL to TP_ATTN_FULL: nothing to move

    Communicator = type("LayerCommunicator", (), {
        **comm, "prepare_mlp": prepare_mlp, "postprocess_layer": postprocess_layer,
        "should_use_reduce_scatter": lambda self, forward_batch: False,
    })

    # RMSNorm's fused path imports its two helpers inside the function: modules of their own here.
    norm = load_functions(tree / LAYERNORM, ["RMSNorm.forward_with_allreduce_fusion"], Namespace(torch=TORCH))

    def norm_forward(self, x, residual=None, post_residual_addition=None):
        if residual is None:
            return rms_norm(x, self.weight, self.variance_epsilon)
        residual = x + residual
        return rms_norm(residual, self.weight, self.variance_epsilon), residual

    RMSNorm = type("RMSNorm", (), {**norm, "forward": norm_forward, "__call__": norm_forward})

    mlp = load_functions(tree / DEEPSEEK, ["DeepseekV2MLP.forward"], Namespace(torch=TORCH))

    class RowParallelDownProj:
        """A rank's shard of the down projection: its share of the output, summed across ranks unless skipped."""

        def __call__(self, x, skip_all_reduce=False):
            shares = range(1, group.size + 1)
            share = x.scaled(shares[group.local.rank] / sum(shares))
            return (share if skip_all_reduce or group.size == 1 else group.all_reduce(share)), None

    def mlp_init(self):
        self.tp_size = group.size
        self.gate_up_proj = lambda x: (x, None)
        self.act_fn = lambda x: T(a * 0.5 + math.tanh(a) for a in x.v)
        self.down_proj = RowParallelDownProj()

    MLP = type("DeepseekV2MLP", (), {**mlp, "__init__": mlp_init, "__call__": lambda self, *a, **k: self.forward(*a, **k)})

    layer_ns = Namespace(torch=TORCH, _is_gfx95_supported=False,
                         DeepseekV2MLP=MLP)
    layer = load_functions(tree / DEEPSEEK, ["DeepseekV2DecoderLayer.forward"], layer_ns)
    Layer = type("DeepseekV2DecoderLayer", (), {**layer, "__call__": lambda self, *a, **k: self.forward(*a, **k)})
    return Layer, Communicator, RMSNorm, MLP


def build_model(tree: Path, group: Group, fusion: bool):
    Layer, Communicator, RMSNorm, MLP = load_layer_classes(tree, group, fusion)
    layers = []
    for i in range(LAYERS):
        layer = Layer()
        layer.layer_id = i
        layer.nsa_enable_prefill_cp = False
        layer.self_attn = lambda positions, hidden_states, forward_batch, zero_allocator, llama_4_scaling, i=i: \
            T(math.sin(a + i) for a in hidden_states.v)
        layer.mlp = MLP()
        communicator = Communicator()
        communicator.input_layernorm = RMSNorm()
        communicator.input_layernorm.weight = 1.0 + 0.1 * i
        communicator.input_layernorm.variance_epsilon = 1e-6
        communicator._speculative_algo = NS(is_eagle=lambda: True)
        communicator.is_last_layer = i == LAYERS - 1
        communicator._context = NS(tp_size=group.size)
        # TP_ATTN_FULL in, TP_ATTN_FULL to the attention: nothing to move (CommunicateSimpleFn._trivial).
        communicator._communicate_simple_fn = lambda hidden_states, forward_batch, context: hidden_states
        communicator.qkv_latent_func = None
        layer.layer_communicator = communicator
        layers.append(layer)
    namespace = {
        "torch": TORCH,
        "BumpAllocator": lambda **kwargs: NS(**kwargs),
        "get_global_server_args": lambda: NS(enable_piecewise_cuda_graph=False),
        "get_global_expert_distribution_recorder": lambda: NS(with_current_layer=lambda i: nullcontext()),
        "nullcontext": nullcontext,
        "nsa_use_prefill_cp": lambda batch: False,
        "tensor_model_parallel_all_gather": lambda x, dim: pytest.fail("all-gather is for a2a MoE only"),
        "model_forward_maybe_tbo": lambda **kw: pytest.fail("two-batch overlap is off"),
        "PPProxyTensors": dict,
    }
    forward = load_functions(tree / DEEPSEEK, ["DeepseekV2Model.forward"], namespace)["forward"]
    model = NS(
        start_layer=0, end_layer=LAYERS, pp_group=NS(is_first_rank=True, is_last_rank=True),
        embed_tokens=lambda ids: T([0.3, -1.2, 0.7, 2.0]), llama_4_scaling_config=None,
        first_k_dense_replace=1, enable_a2a_moe=False, layers=layers, layers_to_capture=list(CAPTURE),
        norm=lambda h, r=None: rms_norm(h) if r is None else (rms_norm(h + r), None), cp_size=1,
    )
    batch = NS(can_run_tbo=False, forward_mode=NS(is_idle=lambda: False), input_ids=NS(shape=(1,)))
    return lambda: forward(model, NS(device="cpu"), None, batch)


@pytest.fixture(scope="module")
def sglang_before_0006(sglang_pristine, tmp_path_factory) -> Path:
    """The tree with every patch of the series before 0006: what the image had without this fix."""
    from sglang_stack.patching.patches import apply_series

    series = tmp_path_factory.mktemp("series-before-0006")
    names = [n for n in (PATCHES / "series").read_text().splitlines() if n and not n.startswith("#")]
    before = names[: names.index(PATCH)]
    (series / "series").write_text("".join(f"{n}\n" for n in before))
    for name in before:
        shutil.copy(PATCHES / name, series / name)
    dest = tmp_path_factory.mktemp("sglang-before-0006") / "site"
    shutil.copytree(sglang_pristine, dest, copy_function=shutil.copyfile)
    apply_series(dest, series, quiet=True)
    return dest


@pytest.fixture
def fused_modules(monkeypatch):
    """Where RMSNorm's fused path imports its helpers from, pointed at the current group."""
    current: dict = {}
    parents = ["sglang", "sglang.srt", "sglang.srt.layers"]
    for name in parents:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    dist = types.ModuleType("sglang.srt.distributed")
    dist.get_tensor_model_parallel_world_size = lambda: current["group"].size
    fused = types.ModuleType("sglang.srt.layers.flashinfer_comm_fusion")
    fused.flashinfer_allreduce_residual_rmsnorm = lambda **kw: current["group"].fused_allreduce_residual_rmsnorm(**kw)
    monkeypatch.setitem(sys.modules, "sglang.srt.distributed", dist)
    monkeypatch.setitem(sys.modules, "sglang.srt.layers.flashinfer_comm_fusion", fused)
    return current


def run_tp(tree: Path, tp: int, fusion: bool, current: dict):
    """Every rank's (final hidden state, captures), and how many fused all-reduces ran."""
    group = Group(tp)
    current["group"] = group
    results: list = [None] * tp
    errors: list = []

    # Built here, not in the threads: the functions are compiled from the tree's source, and
    # CPython's ast module is not safe to use from several threads at once.
    models = [build_model(tree, group, fusion) for _ in range(tp)]

    def rank_main(rank: int):
        group.local.rank = rank
        try:
            results[rank] = models[rank]()
        except BaseException as err:  # reported by the test, with the rank
            errors.append((rank, err))
            group.barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(tp)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, f"TP {tp}: a rank failed: {errors[0]}"
    return results, group.fused_calls


@pytest.mark.parametrize("tp", [2, 8])
@pytest.mark.parametrize("fusion", [True, False], ids=["fusion-on", "fusion-off"])
def test_patched_captures_the_reduced_layer_inputs(sglang_patched, fused_modules, tp, fusion):
    (ref_hidden, ref_aux), = run_tp(sglang_patched, 1, fusion, fused_modules)[0]
    results, fused = run_tp(sglang_patched, tp, fusion, fused_modules)
    assert fused == ((LAYERS - 1) if fusion else 0), f"fused all-reduces that ran: {fused}"
    for rank, (hidden, aux) in enumerate(results):
        assert len(aux) == len(CAPTURE), f"TP {tp} rank {rank}: {len(aux)} captures, want {len(CAPTURE)}"
        for k, (got, want) in enumerate(zip(aux, ref_aux)):
            assert got.close_to(want), (f"TP {tp} rank {rank}, fusion {'on' if fusion else 'off'}: capture of layer "
                                        f"{CAPTURE[k]} is {got}, TP 1 captures {want}")
        assert hidden.close_to(ref_hidden), f"TP {tp} rank {rank}: the model's output changed: {hidden} vs {ref_hidden}"


@pytest.mark.parametrize("tp", [2, 8])
def test_without_0006_the_fusion_captures_partial_sums(sglang_before_0006, fused_modules, tp):
    """What the patch fixes, shown on the series without it: the same run captures each rank's own partial sums."""
    (_, ref_aux), = run_tp(sglang_before_0006, 1, True, fused_modules)[0]
    results, fused = run_tp(sglang_before_0006, tp, True, fused_modules)
    assert fused == LAYERS - 1, f"the fused path must run: {fused}"
    for rank, (_, aux) in enumerate(results):
        # The embedding (layer 0) has no partial sum before it; every later capture does.
        assert aux[0].close_to(ref_aux[0]), f"rank {rank}: the embedding capture needs no reduction"
        wrong = [CAPTURE[k] for k in range(1, len(CAPTURE)) if not aux[k].close_to(ref_aux[k])]
        assert wrong == CAPTURE[1:], f"TP {tp} rank {rank}: unpatched, layers {CAPTURE[1:]} should capture partial sums"
    assert not results[0][1][1].close_to(results[-1][1][1]), "each rank captures its own partial sum"


@pytest.mark.parametrize("tp", [2, 8])
def test_with_the_fusion_off_the_patch_changes_nothing(sglang_before_0006, sglang_patched, fused_modules, tp):
    before, _ = run_tp(sglang_before_0006, tp, False, fused_modules)
    after, _ = run_tp(sglang_patched, tp, False, fused_modules)
    for rank in range(tp):
        assert [a.v for a in before[rank][1]] == [a.v for a in after[rank][1]], f"rank {rank}: captures changed"
        assert before[rank][0].v == after[rank][0].v, f"rank {rank}: output changed"
