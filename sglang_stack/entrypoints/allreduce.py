"""What SGLang itself will do for all-reduce at a TP size on a topology, by running its own start-up code.

    python3 -m sglang_stack.entrypoints.allreduce --tp N --nvlink yes|no --p2p yes|no

At start-up every tensor-parallel rank builds SGLang's ``CustomAllreduce`` on its CPU (gloo) group; the
constructor applies SGLang's rules (the world size, one node, NVLink on every pair or at most two PCIe GPUs,
P2P) and either returns disabled, with a warning that says why, or goes on to allocate its IPC buffers.
This runs exactly that: N processes joined in a gloo group on loopback, each constructing the installed
SGLang's ``CustomAllreduce``. Stood in for are only the hardware answers `invoke doctor` reads from
``nvidia-smi topo`` (NVLink on every pair: ``is_full_nvlink``; P2P on every pair: ``can_p2p``), the GPU count,
one node, and the kernel library's presence; reaching the buffer allocation means every rule passed.

Prints one JSON object: the SGLang version, ``custom_all_reduce`` ("on", "off" or "not needed"), whether
SGLang counts the GPUs as fully NVLinked, and SGLang's own words where it said no. Without it, every
all-reduce is NCCL's. Runs inside the image (the standard library plus the image's SGLang and torch).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import socket
import subprocess
import sys

MODULE = "sglang.srt.distributed.device_communicators.custom_all_reduce"
TIMEOUT_S = 180


class Reached(Exception):
    """``CustomAllreduce`` went past every rule to allocate its buffers: it would be on."""


def rank(index: int, world: int, port: int, nvlink: bool, p2p: bool) -> dict:
    """One rank: join the gloo group, construct SGLang's CustomAllreduce with the hardware answers given."""
    import torch
    import torch.distributed as dist

    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                said.append(record.getMessage())

    logging.getLogger().addHandler(Keep())
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=index, world_size=world)
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
    try:
        car.CustomAllreduce(group=dist.group.WORLD, device=torch.device("cuda", index))
        outcome = {"on": False, "why": said[-1] if said else ""}
    except Reached:
        outcome = {"on": True, "why": ""}
    dist.destroy_process_group()
    return outcome


def decide(tp: int, nvlink: bool, p2p: bool) -> dict:
    from importlib import metadata

    out = {"sglang": metadata.version("sglang"), "tp": tp, "nvlink": nvlink, "p2p": p2p}
    if tp < 2:
        return {**out, "custom_all_reduce": "not needed", "why": "one GPU: no all-reduce"}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = [sys.executable, "-m", __spec__.name if __spec__ else "sglang_stack.entrypoints.allreduce",
            "--rank", "", "--tp", str(tp), "--port", str(port), "--nvlink", "yes" if nvlink else "no",
            "--p2p", "yes" if p2p else "no"]
    procs = []
    for index in range(tp):
        argv[4] = str(index)
        procs.append(subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1"}))
    answers = []
    for proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise SystemExit(f"error: allreduce: the {tp} ranks did not finish within {TIMEOUT_S} s")
        if proc.returncode != 0:
            for other in procs:
                other.kill()
            lines = stderr.strip().splitlines()
            raise SystemExit(f"error: allreduce: a rank failed: {lines[-1] if lines else f'exit {proc.returncode}'}")
        answers.append(json.loads(stdout.strip().splitlines()[-1]))
    on = answers[0]["on"]
    if any(a["on"] != on for a in answers):
        raise SystemExit(f"error: allreduce: the ranks disagree: {answers}")
    return {**out, "custom_all_reduce": "on" if on else "off", "full_nvlink": nvlink if on else None,
            "why": answers[0]["why"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", type=int, required=True, help="the tensor-parallel size")
    parser.add_argument("--nvlink", choices=("yes", "no"), required=True, help="NVLink between every pair")
    parser.add_argument("--p2p", choices=("yes", "no"), required=True, help="peer-to-peer between every pair")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tp < 1:
        parser.error("--tp: at least 1")
    nvlink, p2p = args.nvlink == "yes", args.p2p == "yes"
    if args.rank is not None:
        print(json.dumps(rank(args.rank, args.tp, args.port, nvlink, p2p)))
        return 0
    print(json.dumps(decide(args.tp, nvlink, p2p)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
