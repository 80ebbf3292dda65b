"""Which all-reduce SGLang itself will use for the tensor-parallel group, by running its own start-up and dispatch code.

    python3 -m sglang_stack.entrypoints.allreduce --tp N --nvlink yes|no --p2p yes|no
        [--deterministic yes|no] [--hidden 7168] [--max-rows R]

At start-up every tensor-parallel rank builds, on its ``tp`` group, the backends its settings allow:

- SGLang's ``CustomAllreduce`` (every release), whose constructor applies SGLang's rules (the world size, one
  node, NVLink on every pair or at most two PCIe GPUs, P2P) and either returns disabled, with a warning that says
  why, or goes on to allocate its IPC buffers;
- FlashInfer's PCIe-IPC all-reduce (SGLang 0.5.23 on: ``pcie_ipc_ar.PcieIpcCommunicator``), where SGLang's
  ``eligible_group`` admits the group. It is opt-in (``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE``); here it is evaluated
  as if that were on, so the answer says what turning it on does.

Then each reduction goes through ``GroupCoordinator._resolve_outplace_all_reduce_method``: custom all-reduce where
it takes the tensor, PCIe-IPC next (within its workspace bound), NCCL otherwise. This runs exactly that: N
processes joined in a gloo group on loopback, each constructing the installed SGLang's communicators and asking
its dispatch about a one-token decode reduction (1 x ``--hidden`` bf16), the widest decode reduction
(``--max-rows`` x hidden: SGLang's decode width, its largest captured batch times the draft tokens; unset, SGLang's
own fallback width) and a prefill chunk (8192 rows). Stood in for are only the hardware answers `invoke doctor` reads from ``nvidia-smi topo``
(NVLink on every pair: ``is_full_nvlink``; P2P on every pair: ``can_p2p``), the GPU count, one node, the kernel
library's presence, and the IPC buffers: custom all-reduce stops where it would allocate them (reaching that means
every rule passed), and PCIe-IPC's workspace answers FlashInfer's own launch policy
(``get_pcie_ipc_launch_config``) for the shapes it is asked about, with the bound SGLang's own code computed; it
cannot be built without P2P (CUDA IPC maps each peer's memory), as on the GPUs.

Prints one JSON object: the SGLang version, ``custom_all_reduce`` ("on", "off" or "not needed") and SGLang's words
where it said no, ``pcie_ipc`` (whether this release has it, admits the group, builds it, its workspace bound and
why not), and ``backend``: what a decode reduction takes with PCIe-IPC on (``custom``, ``pcie_ipc``, ``nccl``, or
``none`` at TP 1), ``backend_widest`` and ``backend_prefill`` the same for the wider ones, and ``backend_off``: what a
decode reduction takes without PCIe-IPC. Runs inside the image (the standard library plus the
image's SGLang, torch and FlashInfer).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
import time
from types import SimpleNamespace

MODULE = "sglang.srt.distributed.device_communicators.custom_all_reduce"
PCIE_IPC_MODULE = "sglang.srt.distributed.device_communicators.pcie_ipc_ar"
PCIE_IPC_ENV = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"
# The ranks are given up only when none of them has used any CPU for STALL_S seconds (a hang: a rank waiting on a
# peer that died), not after a fixed time: 8 ranks importing SGLang on 2 busy cores take as long as the machine
# makes them, and a deadline that assumed a quiet machine failed on a loaded CI runner. CAP_S bounds it all.
STALL_S = 120
CAP_S = 3600
# Kimi-K2.5's hidden size (its text_config.hidden_size): the trailing dimension of every tensor-parallel reduction.
HIDDEN = 7168
# A prefill chunk: SGLang's default --chunked-prefill-size on 80 GB-class GPUs, the rows of its widest reduction.
PREFILL_ROWS = 8192
# SGLang's names for what its dispatch returns, and ours.
BACKENDS = {"ca": "custom", "pcie_ipc": "pcie_ipc", None: "nccl", "pynccl": "nccl"}


class Reached(Exception):
    """``CustomAllreduce`` went past every rule to allocate its buffers: it would be on."""


def custom_all_reduce(world: int, index: int, nvlink: bool, p2p: bool, said: list[str]):
    """SGLang's CustomAllreduce built with the hardware answers given: a stand-in for the dispatch, or None (off)."""
    import torch
    import torch.distributed as dist

    car = importlib.import_module(MODULE)
    modules = [car]
    try:
        modules.append(importlib.import_module(MODULE + "_utils"))
    except ImportError:
        pass
    answers = {"in_the_same_node_as": lambda group, source_rank=0: [True] * world,
               "is_full_nvlink": lambda ids, size: nvlink, "can_p2p": lambda r, size: p2p,
               "_can_p2p": lambda r, size: p2p, "_is_cuda": True, "_is_hip": False, "_is_musa": False}
    for module in modules:
        for name, value in answers.items():
            if hasattr(module, name):
                setattr(module, name, value)
    car.ops.IS_CUSTOM_AR_AVAILABLE = True  # the kernel library: present in the image, unloadable without a driver
    car.ops.meta_size = lambda: 0  # what the buffer size adds for it; the allocation is where this stops
    torch.cuda.device_count = lambda: world

    def allocate(*args, **kwargs):
        raise Reached()

    car.CustomAllreduce.create_shared_buffer = staticmethod(allocate)
    before = len(said)
    try:
        car.CustomAllreduce(group=dist.group.WORLD, device=torch.device("cuda", index))
        return None, said[-1] if len(said) > before else ""
    except Reached:
        pass
    # What the dispatch asks of it: SGLang's own should_custom_ar on the fields its constructor had set by then.
    max_size = inspect.signature(car.CustomAllreduce.__init__).parameters["max_size"].default
    state = SimpleNamespace(disabled=False, world_size=world, full_nvlink=nvlink, max_size=max_size,
                            use_amd_deterministic_impl=False)
    state.should_custom_ar = lambda inp: car.CustomAllreduce.should_custom_ar(state, inp)
    return state, ""


class _Workspace:
    """FlashInfer's PCIe-IPC workspace without its IPC slabs: built with the bound SGLang computed, answering
    ``supports`` by FlashInfer's own launch policy (what the real one answers once its slabs exist)."""

    p2p = True  # the hardware answer: CUDA IPC maps every peer's slab, which takes P2P between each pair

    def __init__(self, group, max_numel, dtype, tune_batches=None, tune_cache=None, **kwargs):
        import torch
        import torch.distributed as dist
        from flashinfer.comm.pcie_ipc_collectives._constants import AR_MAX_BLOCKS
        from flashinfer.comm.pcie_ipc_policy import get_pcie_ipc_launch_config

        if not _Workspace.p2p:
            raise RuntimeError("no peer-to-peer access between the GPUs: the peer slabs cannot be mapped")
        if max_numel <= 0 or max_numel % 8:
            raise ValueError(f"max_numel must be a positive multiple of 8 for {dtype}, got {max_numel}")
        self.max_numel, self.world = max_numel, dist.get_world_size(group=group)
        self._policy = lambda inp: (inp.dtype in (torch.bfloat16, torch.float16) and inp.numel() <= self.max_numel
                                    and get_pcie_ipc_launch_config(self.world, inp.numel(), inp.element_size(),
                                                                   AR_MAX_BLOCKS) is not None)

    def supports(self, inp) -> bool:
        return bool(self._policy(inp))


def pcie_ipc(world: int, index: int, p2p: bool, deterministic: bool, hidden: int, max_rows: int | None, said: list[str]):
    """SGLang's PCIe-IPC communicator as its GroupCoordinator builds it for ``tp``, with the env on: (it or None, facts)."""
    import torch
    import torch.distributed as dist

    try:
        module = importlib.import_module(PCIE_IPC_MODULE)
    except ImportError:
        return None, {"available": False, "eligible": False, "built": False, "why": "this SGLang has no PCIe-IPC all-reduce"}
    from sglang.srt.distributed.parallel_state import GroupCoordinator

    os.environ[PCIE_IPC_ENV] = "1"
    os.environ["SGLANG_ENABLE_DETERMINISTIC_INFERENCE"] = "1" if deterministic else "0"  # as ServerArgs sets it
    before = len(said)
    eligible = module.eligible_group(group_name="tp", world_size=world,
                                     deterministic=GroupCoordinator._deterministic_collectives_enabled())
    facts = {"available": True, "eligible": eligible, "built": False, "max_numel": None}
    if not eligible:
        return None, {**facts, "why": said[-1] if len(said) > before else f"SGLang's eligible_group refuses tp at {world} ranks"}
    comm = module.PcieIpcCommunicator(group=dist.group.WORLD, device=torch.device("cuda", index),
                                      cpu_group=dist.group.WORLD)
    if comm.disabled:
        return None, {**facts, "why": said[-1] if len(said) > before else
                      f"PcieIpcCommunicator stays off at world size {world} (kernels for 2, 4 and 8 ranks)"}
    _Workspace.p2p = p2p
    comm._workspace_cls = _Workspace
    comm._device = torch.device("cpu")  # where prepare() makes its one-row probe; the workspace holds no memory here
    comm._tune = lambda hidden: None  # measuring needs the GPUs: the probe's job (entrypoints/probe.py)
    comm.prepare(hidden=hidden, max_rows=max_rows)  # as base_runner's warm-up: the bound from SGLang's own code
    if comm.disabled:
        return None, {**facts, "why": said[-1] if len(said) > before else "its workspace could not be built"}
    return comm, {**facts, "built": True, "max_numel": comm.max_numel, "why": ""}


def dispatch(ca, comm, hidden: int, rows: int) -> str:
    """What SGLang's GroupCoordinator picks for a ``rows`` x ``hidden`` bf16 reduction, by its own dispatch."""
    import torch
    from sglang.srt.distributed.parallel_state import GroupCoordinator

    inp = torch.empty((rows, hidden), dtype=torch.bfloat16)
    resolve = getattr(GroupCoordinator, "_resolve_outplace_all_reduce_method", None)
    if resolve is None:  # releases before PCIe-IPC: custom all-reduce where it takes the tensor, else NCCL
        return "custom" if ca is not None and ca.should_custom_ar(inp) else "nccl"
    me = SimpleNamespace(ca_comm=ca, pcie_ipc_comm=comm, qr_comm=None, pymscclpp_comm=None, torch_symm_mem_comm=None,
                         pynccl_comm=None)
    method = resolve(me, inp)
    return BACKENDS.get(method, str(method))


def rank(index: int, world: int, port: int, nvlink: bool, p2p: bool, deterministic: bool, hidden: int,
         max_rows: int | None) -> dict:
    """One rank: join the gloo group, build SGLang's communicators with the hardware answers given, ask its dispatch."""
    import torch.distributed as dist

    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                said.append(record.getMessage())

    logging.getLogger().addHandler(Keep())
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index, world_size=world)
    ca, why = custom_all_reduce(world, index, nvlink, p2p, said)
    comm, pcie = pcie_ipc(world, index, p2p, deterministic, hidden, max_rows, said)
    widest = max(1, (pcie["max_numel"] // hidden) if pcie.get("max_numel") else (max_rows or 1))
    outcome = {"on": ca is not None, "why": why, "pcie_ipc": pcie,
               "backend": dispatch(ca, comm, hidden, 1), "backend_widest": dispatch(ca, comm, hidden, widest),
               "backend_prefill": dispatch(ca, comm, hidden, PREFILL_ROWS),
               "backend_off": dispatch(ca, None, hidden, 1), "widest_rows": widest}
    dist.destroy_process_group()
    return outcome


def cpu_seconds(pid: int) -> float | None:
    """CPU time ``pid`` has used (user + system, /proc/PID/stat); None where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def wait_working(procs: list, stall_s: float = STALL_S, cap_s: float = CAP_S, poll_s: float = 0.5) -> str:
    """Wait for ``procs`` to exit while they keep working: "" when all have, else why they were given up (none used
    CPU for ``stall_s``, or ``cap_s`` passed)."""
    start = last_progress = time.monotonic()
    used: dict[int, float] = {}
    while any(proc.poll() is None for proc in procs):
        now = time.monotonic()
        for proc in procs:
            seconds = cpu_seconds(proc.pid)
            if seconds is not None and seconds != used.get(proc.pid):
                used[proc.pid] = seconds
                last_progress = now
        if now - last_progress > stall_s:
            return f"used no CPU for {stall_s:.0f} s: a rank hangs"
        if now - start > cap_s:
            return f"did not finish within {cap_s:.0f} s"
        time.sleep(poll_s)
    return ""


def decide(tp: int, nvlink: bool, p2p: bool, deterministic: bool = False, hidden: int = HIDDEN,
           max_rows: int | None = None) -> dict:
    from importlib import metadata

    out = {"sglang": metadata.version("sglang"), "tp": tp, "nvlink": nvlink, "p2p": p2p, "hidden": hidden}
    if tp < 2:
        none = {"available": importlib.util.find_spec(PCIE_IPC_MODULE) is not None, "eligible": False,
                "built": False, "max_numel": None, "why": "one GPU: no all-reduce"}
        return {**out, "custom_all_reduce": "not needed", "why": "one GPU: no all-reduce", "pcie_ipc": none,
                "backend": "none", "backend_off": "none", "backend_widest": "none", "backend_prefill": "none",
                "widest_rows": None}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [sys.executable, "-m", __spec__.name if __spec__ else "sglang_stack.entrypoints.allreduce",
            "--rank", "", "--tp", str(tp), "--port", str(port), "--nvlink", "yes" if nvlink else "no",
            "--p2p", "yes" if p2p else "no", "--deterministic", "yes" if deterministic else "no", "--hidden", str(hidden)]
    argv += ["--max-rows", str(max_rows)] if max_rows else []
    procs, outputs = [], []
    for index in range(tp):
        argv[4] = str(index)
        # Files, not pipes: nothing reads a rank's output until all are done, and a full pipe would stall it.
        stdout_file, stderr_file = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        outputs.append((stdout_file, stderr_file))
        procs.append(subprocess.Popen(list(argv), stdout=stdout_file, stderr=stderr_file, text=True,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"}))
    answers = []
    if why := wait_working(procs):
        for other in procs:
            other.kill()
        raise SystemExit(f"error: allreduce: the {tp} ranks {why}")
    for proc, (stdout_file, stderr_file) in zip(procs, outputs):
        with stdout_file, stderr_file:
            stdout_file.seek(0)
            stderr_file.seek(0)
            stdout, stderr = stdout_file.read(), stderr_file.read()
        if proc.returncode != 0:
            for other in procs:
                other.kill()
            lines = stderr.strip().splitlines()
            raise SystemExit(f"error: allreduce: a rank failed: {lines[-1] if lines else f'exit {proc.returncode}'}")
        answers.append(json.loads(stdout.strip().splitlines()[-1]))
    first = answers[0]
    if any({k: a[k] for k in ("on", "backend", "backend_off")} != {k: first[k] for k in ("on", "backend", "backend_off")}
           for a in answers):
        raise SystemExit(f"error: allreduce: the ranks disagree: {answers}")
    on = first["on"]
    return {**out, "custom_all_reduce": "on" if on else "off", "full_nvlink": nvlink if on else None, "why": first["why"],
            "pcie_ipc": first["pcie_ipc"], "backend": first["backend"], "backend_off": first["backend_off"],
            "backend_widest": first["backend_widest"], "backend_prefill": first["backend_prefill"],
            "widest_rows": first["widest_rows"]}


def _yes(text: str) -> bool:
    return text == "yes"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", type=int, required=True, help="the tensor-parallel size")
    parser.add_argument("--nvlink", choices=("yes", "no"), required=True, help="NVLink between every pair")
    parser.add_argument("--p2p", choices=("yes", "no"), required=True, help="peer-to-peer between every pair")
    parser.add_argument("--deterministic", choices=("yes", "no"), default="no",
                        help="--enable-deterministic-inference among the server's arguments (default no)")
    parser.add_argument("--hidden", type=int, default=HIDDEN, help=f"the model's hidden size (default {HIDDEN}, Kimi-K2.5)")
    parser.add_argument("--max-rows", type=int, default=None,
                        help="SGLang's decode width: largest captured batch x draft tokens (default: SGLang's fallback)")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tp < 1:
        parser.error("--tp: at least 1")
    if args.hidden < 1 or (args.max_rows is not None and args.max_rows < 1):
        parser.error("--hidden and --max-rows: at least 1")
    answers = (_yes(args.nvlink), _yes(args.p2p), _yes(args.deterministic), args.hidden, args.max_rows)
    if args.rank is not None:
        print(json.dumps(rank(args.rank, args.tp, args.port, *answers)))
        return 0
    print(json.dumps(decide(args.tp, *answers)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
