"""What SGLang decides at the settings we pass: its own ServerArgs and ports, resolved for a host profile.

    python3 -m sglang_stack.entrypoints.settings --profile h200x8 --model-dir DIR [--draft-dir DIR] -- ARGS...

``ARGS`` is the argument list compose.yaml (or the Kubernetes render) hands to
``sglang.launch_server``. SGLang resolves it exactly as at start-up:
``prepare_server_args(ARGS)`` runs ``ServerArgs.__post_init__``, which picks the attention and
sampling backends, the all-reduce fusion, the MoE runner, the CUDA graph sizes and the
speculative settings from the model's config and the GPU. Then the ports: ``PortArgs.init_new``
as the launcher calls it, and, with TP > 1, the tensor-parallel message queue's writer
(``MessageQueue``, ``shm_broadcast.py``), built for real, which binds ``get_open_port()`` before
the API server binds ``--port``. The API port is then bound as uvicorn would: a collision is
reported, not guessed (the ``SGLANG_PORT`` defect).

Only the GPU is stood in for: torch's device queries (``torch.cuda.is_available``,
``get_device_capability``, ``get_device_name``, ``get_device_properties``, ``device_count``,
``mem_get_info``, ``torch.version.cuda``) answer as the profile's GPUs, and ``nvidia-smi`` on
``PATH`` prints their memory. SGLang's own predicates (``is_cuda``, ``is_sm90_supported``,
``get_device_memory_capacity``, ...) run unchanged on top. Everything else is the installed
SGLang, torch, transformers and FlashInfer.

The model directories hold what ServerArgs reads: ``config.json`` (and the drafter's). Their
paths in ``ARGS`` (``/models/target``, ``/models/draft``) are replaced by ``--model-dir`` and
``--draft-dir``. Prints one JSON object. Runs inside the image (stdlib plus SGLang's own stack).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

TARGET, DRAFT = "/models/target", "/models/draft"


@dataclass(frozen=True)
class Profile:
    title: str
    gpus: int
    capability: tuple[int, int]
    name: str
    memory_mib: int
    multiprocessors: int
    nvlink: bool = False  # NVLink between every pair of its GPUs (else PCIe, with P2P)

    @property
    def arch(self) -> str:
        """The architecture the image's ahead-of-time kernels are named by: ``9.0a``, ``12.0a``."""
        return f"{self.capability[0]}.{self.capability[1]}a"


# Memory and names as nvidia-smi prints them (tests/fixtures/nvidia-smi: the H200 recorded,
# the RTX PRO 6000 from its datasheet).
PROFILES = {
    "h200x8": Profile("8x H200 (SM90, NVLink)", 8, (9, 0), "NVIDIA H200", 143771, 132, nvlink=True),
    "rtxpro6000x8": Profile("8x RTX PRO 6000 Blackwell (SM120, PCIe)", 8, (12, 0),
                            "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, 188),
    "h200x1": Profile("1x H200 (SM90)", 1, (9, 0), "NVIDIA H200", 143771, 132),
}

# The ServerArgs fields the table records: what SGLang chose, by concern.
FIELDS = {
    "attention": ["attention_backend", "prefill_attention_backend", "decode_attention_backend", "page_size",
                  "kv_cache_dtype"],
    "sampling": ["sampling_backend", "grammar_backend"],
    "all-reduce": ["enable_flashinfer_allreduce_fusion", "disable_custom_all_reduce", "enable_torch_symm_mem",
                   "enable_mscclpp", "enable_dp_attention"],
    "moe": ["moe_runner_backend", "moe_a2a_backend", "ep_size", "quantization"],
    "cuda graphs": ["disable_cuda_graph", "cuda_graph_max_bs", "cuda_graph_bs", "enable_piecewise_cuda_graph"],
    "memory": ["mem_fraction_static", "chunked_prefill_size", "max_running_requests"],
    "speculative": ["speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                    "speculative_num_draft_tokens", "speculative_attention_mode", "disable_overlap_schedule"],
}


def install_profile(profile: Profile, workdir: Path) -> None:
    """torch's device queries answer as ``profile``; an ``nvidia-smi`` on PATH prints its memory. Before SGLang imports."""
    import torch

    props = type("DeviceProperties", (), {
        "name": profile.name, "major": profile.capability[0], "minor": profile.capability[1],
        "total_memory": profile.memory_mib << 20, "multi_processor_count": profile.multiprocessors,
        "__repr__": lambda self: f"_CudaDeviceProperties(name='{profile.name}')",
    })()
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: profile.gpus
    cuda.current_device = lambda: 0
    cuda.get_device_capability = lambda device=None: profile.capability
    cuda.get_device_name = lambda device=None: profile.name
    cuda.get_device_properties = lambda device=None: props
    cuda.mem_get_info = lambda device=None: (profile.memory_mib << 20, profile.memory_mib << 20)
    torch.version.cuda = "13.0"
    smi = workdir / "nvidia-smi"
    lines = "\\n".join([str(profile.memory_mib)] * profile.gpus)
    smi.write_text(f"#!/bin/sh\n# {profile.title}: memory.total in MiB, one line a GPU\nprintf '{lines}\\n'\n")
    smi.chmod(0o755)
    os.environ["PATH"] = f"{workdir}{os.pathsep}{os.environ.get('PATH', '')}"


# Imported by SGLang's modules but never called while ServerArgs resolves: GPU kernels, and the
# vision library of unrelated multimodal configs. The real one is used wherever it imports; on a
# host without a GPU (sgl-kernel needs libcuda) or beside a CPU build of torch (torchvision's CUDA
# build cannot load there) a stand-in takes its place, and the result says so.
OPTIONAL_IMPORTS = ("sgl_kernel", "torchvision", "deep_gemm")


class _StandIn:
    """A module or attribute of a stood-in package: importable, callable only to fail loudly."""

    def __init__(self, name: str):
        self.__name__ = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _StandIn(f"{self.__name__}.{attr}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self.__name__} is a stand-in while settings resolve: nothing may call it")

    def __mro_entries__(self, bases):
        return (object,)


def stand_in_missing(names=OPTIONAL_IMPORTS) -> list[str]:
    """Import each of ``names``; put a stand-in where the real one cannot load. Returns the stood-in names."""
    import importlib
    import importlib.abc
    import importlib.machinery
    import types

    stood = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as err:  # ImportError, or OSError from a missing CUDA library
            stood.append(f"{name} ({err.__class__.__name__}: {str(err).splitlines()[0][:80] if str(err) else ''})")
            for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
                del sys.modules[key]

            class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
                def __init__(self, root):
                    self.root = root

                def find_spec(self, fullname, path, target=None):
                    if fullname == self.root or fullname.startswith(self.root + "."):
                        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
                    return None

                def create_module(self, spec):
                    module = types.ModuleType(spec.name)
                    module.__getattr__ = lambda attr, n=spec.name: (_ for _ in ()).throw(AttributeError(attr)) \
                        if attr.startswith("__") else _StandIn(f"{n}.{attr}")
                    return module

                def exec_module(self, module):
                    module.__path__ = []

            sys.meta_path.insert(0, Finder(name))
            if name == "sgl_kernel":
                _skip_fake_kernels(name)
    return stood


def _skip_fake_kernels(namespace: str) -> None:
    """SGLang registers fake (meta) implementations of sgl-kernel's ops at import; without the
    library those ops do not exist, so those registrations are skipped. Nothing runs them here."""
    import torch

    register = torch.library.register_fake

    def register_fake(op, *args, **kwargs):
        if isinstance(op, str) and op.startswith(namespace + "::"):
            try:
                torch._C._dispatch_find_schema_or_throw(op, "")
            except RuntimeError:
                return (lambda fn: fn) if not args else args[0]
        return register(op, *args, **kwargs)

    torch.library.register_fake = register_fake


def substitute(argv: list[str], model_dir: Path, draft_dir: Path | None) -> list[str]:
    out = []
    for arg in argv:
        if arg == TARGET or arg.endswith("=" + TARGET):
            arg = arg.replace(TARGET, str(model_dir))
        elif arg == DRAFT or arg.endswith("=" + DRAFT):
            if draft_dir is None:
                raise SystemExit(f"error: the arguments name {DRAFT}: give --draft-dir")
            arg = arg.replace(DRAFT, str(draft_dir))
        out.append(arg)
    return out


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def fusion_runs(server_args) -> bool:
    """Whether a decoder layer really defers its all-reduce into FlashInfer's fused kernel.

    ServerArgs' flag is not the answer: each layer asks SGLang's gate, which also wants SM90 or SM100,
    and fuses only with TP > 1. The gate is ``apply_flashinfer_allreduce_fusion``
    (``layers/communicator.py``) up to the layer boundary's arrival, and
    ``flashinfer_ar_fusion_applies`` (``layers/layer_boundary/residual/add_norm.py``) after it
    (sgl-project/sglang#28343); whichever this release has runs here, for a one-token batch, with
    these server args published as the scheduler publishes them.
    """
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    set_global_server_args_for_scheduler(server_args)
    try:
        from sglang.srt.layers.communicator import apply_flashinfer_allreduce_fusion as gate
    except ImportError:
        from sglang.srt.layers.layer_boundary.residual.add_norm import flashinfer_ar_fusion_applies as gate
    return bool(gate(1)) and server_args.tp_size > 1


def pcie_ipc_bound(server_args) -> dict:
    """Where the release has the PCIe-IPC all-reduce (0.5.23 on): the widest decode reduction SGLang sizes its
    workspace for, by its own derivation (``pcie_ipc_ar._decode_width``: the largest captured decode batch times the
    draft tokens), with these server args published as the scheduler publishes them, and that times the hidden size.
    The running server may clamp the batches further to its request pool; ``SGLANG_PCIE_IPC_MAX_NUMEL`` overrides."""
    try:
        from sglang.srt.distributed.device_communicators import pcie_ipc_ar
    except ImportError:
        return {"pcie_ipc": False}
    from sglang.srt import runtime_context

    runtime_context.publish(server_args, role="scheduler")
    rows = pcie_ipc_ar._decode_width()
    hidden = server_args.get_model_config().hidden_size if hasattr(server_args, "get_model_config") else None
    if hidden is None:
        from sglang.srt.configs.model_config import ModelConfig

        hidden = ModelConfig.from_server_args(server_args).hidden_size
    return {"pcie_ipc": True, "pcie_ipc_decode_rows": rows, "pcie_ipc_max_numel": rows * hidden if rows else None}


def adaptive(server_args) -> dict:
    """Where the release has adaptive speculation (``--speculative-adaptive``, 0.5.23 on): whether SGLang keeps it at
    these settings, by its own ``adaptive_unsupported_reason`` (which ``SPECULATIVE_ADAPTIVE=1`` meets at start: SGLang
    then warns and falls back to the static steps). Nothing for a release without it or a server that does not
    speculate."""
    try:
        from sglang.srt.speculative.adaptive_spec_params import adaptive_unsupported_reason
    except ImportError:
        return {}
    if not server_args.speculative_algorithm:
        return {"adaptive": None}
    reason = adaptive_unsupported_reason(server_args)
    return {"adaptive": "kept" if reason is None else f"dropped: {reason}"}


def ports(server_args, profile: Profile) -> dict:
    """Every port SGLang binds at these settings, bound here the way it binds them."""
    from sglang.srt.server_args import PortArgs

    port_args = PortArgs.init_new(server_args)
    out = {"api": server_args.port, "nccl": "free port (get_free_port)" if server_args.nccl_port is None else
           server_args.nccl_port}
    held, taken = [], None
    tp = server_args.tp_size // max(server_args.nnodes, 1)
    use_mq = os.environ.get("SGLANG_USE_MESSAGE_QUEUE_BROADCASTER", "true").lower() in ("true", "1")
    if server_args.tp_size > 1 and use_mq:
        from sglang.srt.distributed.device_communicators.shm_broadcast import MessageQueue

        writer = MessageQueue(n_reader=tp, n_local_reader=max(tp - 1, 0))
        held.append(writer)
        handle = writer.export_handle()
        # get_open_port() returns $SGLANG_PORT when it is set and free, else any free port.
        taken = handle.local_subscribe_port
        out["tp_message_queue"] = taken if os.environ.get("SGLANG_PORT") else "a free port (get_open_port)"
    out["ipc"] = "unix sockets" if port_args.tokenizer_ipc_name.startswith("ipc://") else port_args.tokenizer_ipc_name
    # Last, as uvicorn does after the model load: does the API port still bind?
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((server_args.host, server_args.port))
        out["api_binds"] = True
    except OSError as err:
        out["api_binds"] = f"no: {err.strerror} (taken by the message queue)" if held and taken == \
            server_args.port else f"no: {err.strerror}"
    for writer in held:
        with contextlib.suppress(Exception):
            writer.local_socket.close(linger=0)
    return out


@contextlib.contextmanager
def temporary_files_in(directory: str):
    """What SGLang makes with ``tempfile`` meanwhile goes into ``directory``, and with it. PortArgs names each IPC
    socket after a file it makes with NamedTemporaryFile(delete=False), five per call, and never removes (the server
    binds the socket there); nothing binds them here."""
    saved, tempfile.tempdir = tempfile.tempdir, directory
    try:
        yield
    finally:
        tempfile.tempdir = saved


def resolve(profile: Profile, argv: list[str], model_dir: Path, draft_dir: Path | None) -> dict:
    """SGLang's own resolution of ``argv`` on ``profile``: the chosen settings and the ports."""
    with tempfile.TemporaryDirectory(prefix="sglang-stack-settings-") as tmp, temporary_files_in(tmp):
        install_profile(profile, Path(tmp))
        stood = stand_in_missing()
        logging.disable(logging.WARNING)  # SGLang's advice lines would interleave with the JSON
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            from sglang.srt.server_args import prepare_server_args

            server_args = prepare_server_args(substitute(argv, model_dir, draft_dir))
            # Later releases leave the parsed arguments unresolved until the launcher calls resolve_once(), and
            # then read the result through resolved_dict() (what the start-up line logs): as the launcher does.
            if hasattr(server_args, "resolve_once"):
                server_args.resolve_once()
            resolved = server_args.resolved_dict() if hasattr(server_args, "resolved_dict") else vars(server_args)
            chosen = {concern: {f: _plain(resolved.get(f)) for f in fields} for concern, fields in FIELDS.items()}
            chosen["all-reduce"]["fusion_runs"] = fusion_runs(server_args)
            chosen["all-reduce"].update(pcie_ipc_bound(server_args))
            chosen["speculative"].update(adaptive(server_args))
            bound = ports(server_args, profile)
    import sglang

    return {"profile": profile.title, "arch": profile.arch, "sglang": sglang.__version__,
            "tp_size": server_args.tp_size, "settings": chosen, "ports": bound, "stood_in": stood}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m sglang_stack.entrypoints.settings",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", required=True, choices=sorted(PROFILES))
    parser.add_argument("--model-dir", type=Path, required=True, help=f"holds the target's config.json (for {TARGET})")
    parser.add_argument("--draft-dir", type=Path, help=f"holds the drafter's config.json (for {DRAFT})")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then launch_server's arguments")
    args = parser.parse_args(argv)
    server_argv = args.args[1:] if args.args[:1] == ["--"] else args.args
    for path in (args.model_dir, args.draft_dir):
        if path is not None and not (path / "config.json").is_file():
            print(f"error: {path}: no config.json", file=sys.stderr)
            return 2
    result = resolve(PROFILES[args.profile], server_argv, args.model_dir, args.draft_dir)
    print(json.dumps(result, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
