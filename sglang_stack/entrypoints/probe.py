"""An all-reduce probe of the GPUs a server gets, under a hard deadline: do they talk, and how fast?

    python3 -m sglang_stack.entrypoints.probe --gpus N [--deadline 60] [--sizes 1M,16M,64M,256M] [--backend nccl]

Starts one process per GPU (rank r on GPU r of those the container sees), joins them with
torch.distributed over loopback TCP, and runs a few all-reduces of each size in turn, as tensor
parallelism does on every layer. Rank 0 prints one line per size with the bus bandwidth (NCCL's
tests' definition: algorithm bandwidth times 2 (n - 1) / n). A set that does not finish within the
deadline, the hang a PCIe box with broken peer-to-peer shows on its first all-reduce, is killed
whole, every rank, and reported as "hung at size S after T s"; exit 1. Exit 0 once every size
completed.

The ranks run in process groups of their own, so the deadline ends them and whatever they started.
``--join K`` starts only the first K ranks: a set that can never complete, for testing the deadline.
torch is the image's; the rest is the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

SIZES = "1M,16M,64M,256M"
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
ITERS = 5


def parse_sizes(text: str) -> list[int]:
    out = []
    for item in text.split(","):
        item = item.strip().upper()
        if not item or not (item[:-1] if item[-1] in UNITS else item).isdigit():
            raise SystemExit(f"error: --sizes {text!r}: {item!r} is not a byte count such as 1M or 256M")
        out.append(int(item[:-1]) * UNITS[item[-1]] if item[-1] in UNITS else int(item))
    return out


def shown(size: int) -> str:
    for unit in ("G", "M", "K"):
        if size >= UNITS[unit] and size % UNITS[unit] == 0:
            return f"{size // UNITS[unit]}{unit}"
    return f"{size}B"


def worker(rank: int, world: int, port: int, sizes: list[int], backend: str) -> int:
    """One rank: join, then all-reduce each size; rank 0 prints a JSON line per size as it completes."""
    import datetime

    import torch
    import torch.distributed as dist

    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", world_size=world, rank=rank,
                            timeout=datetime.timedelta(hours=1))  # the parent's deadline decides, not torch's
    try:
        for size in sizes:
            x = torch.ones(size // 4, dtype=torch.float32, device=device)
            dist.all_reduce(x)  # warm-up: the first call sets up the communicator and its channels
            if backend == "nccl":
                torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(ITERS):
                dist.all_reduce(x)
            if backend == "nccl":
                torch.cuda.synchronize()
            seconds = (time.perf_counter() - start) / ITERS
            if rank == 0:
                algbw = size / seconds / 1e9
                print(json.dumps({"size": size, "ms": round(seconds * 1e3, 3), "algbw_gbps": round(algbw, 2),
                                  "busbw_gbps": round(algbw * 2 * (world - 1) / world, 2) if world > 1 else None}),
                      flush=True)
    finally:
        dist.destroy_process_group()
    return 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(gpus: int, sizes: list[int], deadline: float, backend: str, join: int | None = None) -> int:
    """Start the ranks, follow rank 0's lines, end every rank at the deadline; the exit code."""
    port = free_port()
    argv = [sys.executable, "-m", "sglang_stack.entrypoints.probe", "--worker", "--gpus", str(gpus), "--port", str(port),
            "--sizes", ",".join(map(str, sizes)), "--backend", backend]
    ranks = [subprocess.Popen([*argv, "--rank", str(r)], stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                              text=True, start_new_session=True) for r in range(join if join is not None else gpus)]
    print(f"probe: {gpus} ranks ({backend}), all-reduce of {', '.join(shown(s) for s in sizes)}, deadline {deadline:g} s",
          flush=True)
    started, done = time.monotonic(), 0
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in ranks[0].stdout], daemon=True)
    reader.start()
    try:
        while time.monotonic() - started < deadline:
            exited = all(p.poll() is not None for p in ranks)
            if exited:
                reader.join(timeout=5)  # rank 0's last lines, before they are judged
            while not lines.empty():
                try:
                    row = json.loads(lines.get())
                except json.JSONDecodeError:
                    continue
                done += 1
                bus = f", bus {row['busbw_gbps']:.1f} GB/s" if row.get("busbw_gbps") is not None else ""
                print(f"probe: {shown(row['size'])}: {row['ms']:.3f} ms, algorithm {row['algbw_gbps']:.1f} GB/s{bus}",
                      flush=True)
            if exited:
                codes = [p.poll() for p in ranks]
                failed = [(r, c) for r, c in enumerate(codes) if c != 0]
                if failed:
                    print(f"error: probe: rank {failed[0][0]} exited {failed[0][1]} after "
                          f"{time.monotonic() - started:.0f} s", file=sys.stderr)
                    return 1
                if done == len(sizes):
                    print(f"probe: ok: {len(sizes)} sizes in {time.monotonic() - started:.1f} s", flush=True)
                    return 0
                print(f"error: probe: the ranks ended after {done} of {len(sizes)} sizes", file=sys.stderr)
                return 1
            time.sleep(0.05)
        at = shown(sizes[done]) if done < len(sizes) else "the end"
        stage = "joining" if done == 0 else "all-reduce"
        print(f"error: probe: hung at size {at} ({stage}) after {deadline:g} s: the GPUs did not complete an "
              "all-reduce; check peer-to-peer (`invoke doctor`: topology) and NCCL_P2P_DISABLE", file=sys.stderr)
        return 1
    finally:
        for p in ranks:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # the rank and anything it started
                except ProcessLookupError:
                    pass
            p.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, required=True, help="ranks: one per GPU the container sees")
    parser.add_argument("--sizes", default=SIZES, help=f"all-reduce sizes in bytes, K/M/G (default {SIZES})")
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds for the whole set (default 60)")
    parser.add_argument("--backend", default="nccl", choices=("nccl", "gloo"), help="nccl on GPUs; gloo on the CPU")
    parser.add_argument("--join", type=int, default=None, help="start only the first K ranks (a set that never completes)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.gpus < 1:
        raise SystemExit(f"error: --gpus {args.gpus}: at least 1")
    sizes = parse_sizes(args.sizes)
    if args.worker:
        return worker(args.rank, args.gpus, args.port, sizes, args.backend)
    return run(args.gpus, sizes, args.deadline, args.backend, args.join)


if __name__ == "__main__":
    sys.exit(main())
