"""What the patched code does, on the real 0.5.9 functions with small stand-ins (no GPU, no torch).

The Kimi-K2.5 delegation (0001) and the embedding capture (0002), each against the unpatched tree too.
"""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from sglang_source import load_functions
from test_patches import DEEPSEEK, KIMI

# --------------------------------------------------------------------------
# What the patched code does (no GPU, no torch: the real functions, small stand-ins)
# --------------------------------------------------------------------------


class Recorder:
    """A stand-in language model: records each call, returns a marker."""

    def __init__(self, *methods):
        self.calls = []
        for name in methods:
            setattr(self, name, self._method(name))

    def _method(self, name):
        def method(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            return ("returned-by", name)

        return method


def kimi_class(tree: Path):
    methods = ["_language_model_method", "set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head"]
    names = [f"KimiK25ForConditionalGeneration.{m}" for m in methods]
    funcs = load_functions(tree / KIMI, names, {"Optional": typing.Optional, "List": typing.List})
    return type("KimiK25ForConditionalGeneration", (), funcs)


def test_unpatched_kimi_lacks_the_eagle3_methods(sglang_pristine):
    with pytest.raises(LookupError):
        kimi_class(sglang_pristine)


def test_kimi_delegation_forwards_arguments_and_return_values(sglang_patched):
    Kimi = kimi_class(sglang_patched)
    model = Kimi()
    model.language_model = Recorder("set_eagle3_layers_to_capture", "get_embed_and_head", "set_embed_and_head")
    embed, head = object(), object()
    assert model.set_eagle3_layers_to_capture([-1, 30, 58]) == ("returned-by", "set_eagle3_layers_to_capture")
    assert model.set_eagle3_layers_to_capture() == ("returned-by", "set_eagle3_layers_to_capture")
    assert model.get_embed_and_head() == ("returned-by", "get_embed_and_head")
    assert model.set_embed_and_head(embed, head) == ("returned-by", "set_embed_and_head")
    assert model.language_model.calls == [
        ("set_eagle3_layers_to_capture", ([-1, 30, 58],), {}),
        ("set_eagle3_layers_to_capture", (None,), {}),
        ("get_embed_and_head", (), {}),
        ("set_embed_and_head", (embed, head), {}),
    ], f"calls reaching the language model: {model.language_model.calls}"


def test_kimi_delegation_names_a_method_the_language_model_lacks(sglang_patched):
    Kimi = kimi_class(sglang_patched)
    model = Kimi()
    model.language_model = Recorder("get_embed_and_head")
    with pytest.raises(AttributeError) as err:
        model.set_embed_and_head(None, None)
    message = str(err.value)
    assert "set_embed_and_head" in message and "Recorder" in message and "EAGLE-3" in message, f"unclear error: {message}"


class Layer:
    """A decoder layer stand-in: numbers instead of tensors."""

    def __init__(self, i):
        self.i = i

    def __call__(self, positions, hidden_states, forward_batch, residual, *rest, **kwargs):
        new_residual = hidden_states if residual is None else hidden_states + residual
        return (self.i + 1) * 100.0, new_residual


def run_deepseek_forward(tree: Path, layers_to_capture: list[int]):
    """DeepseekV2Model.forward from ``tree``, on a 4-layer stand-in model, first and last PP rank."""
    from contextlib import nullcontext
    from types import SimpleNamespace as NS

    namespace = {
        "torch": NS(float32="float32", Tensor=object, cuda=NS(current_stream=lambda: None)),
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
    embedding = 7.0
    model = NS(
        start_layer=0,
        end_layer=4,
        pp_group=NS(is_first_rank=True, is_last_rank=True),
        embed_tokens=lambda ids: embedding,
        llama_4_scaling_config=None,
        first_k_dense_replace=1,
        enable_a2a_moe=False,
        layers=[Layer(i) for i in range(4)],
        layers_to_capture=layers_to_capture,
        norm=lambda h, r=None: h if r is None else (h + r, None),
        cp_size=1,
    )
    batch = NS(can_run_tbo=False, forward_mode=NS(is_idle=lambda: False))
    return forward(model, NS(device="cpu"), None, batch)


def test_unpatched_capture_of_the_embedding_output_fails(sglang_pristine):
    with pytest.raises(TypeError, match="NoneType"):
        run_deepseek_forward(sglang_pristine, [0, 2])


def test_embedding_capture_works_while_residual_is_none(sglang_patched):
    hidden, aux = run_deepseek_forward(sglang_patched, [0, 2])
    # Layer i outputs (i + 1) * 100 and passes its input on as residual. Before layer 0 the
    # capture is the embedding (7); before layer 2 it is layer 1's output plus residual.
    assert aux == [7.0, 200.0 + 100.0 + 7.0], f"captured {aux}"
    assert hidden == 400.0 + 300.0 + 200.0 + 100.0 + 7.0, f"final norm input changed: {hidden}"


def test_capture_after_the_first_layer_is_unchanged(sglang_pristine, sglang_patched):
    before = run_deepseek_forward(sglang_pristine, [1, 3])
    after = run_deepseek_forward(sglang_patched, [1, 3])
    assert before == after, f"the patch changed captures that worked: {before} vs {after}"
