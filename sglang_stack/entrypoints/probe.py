"""An all-reduce probe of the GPUs a server gets, under a hard deadline: do they talk, how fast, and which backend wins?

    python3 -m sglang_stack.entrypoints.probe --gpus N [--deadline 60] [--sizes 12K,96K,384K,64M]
        [--backend nccl] [--pcie-ipc auto|on|off] [--deterministic yes|no] [--record] [--if-needed]

Starts one process per GPU (rank r on GPU r of those the container sees), joins them with torch.distributed over
loopback TCP, and all-reduces each size in turn, as tensor parallelism does on every layer: bf16 rows whose values
make every sum exact, so each result is compared with the reference sum element for element. The default sizes are
SGLang's decode reductions (12, 96 and 384 KiB: the sizes its PCIe-IPC docstring measured) and one prefill size.

Two backends: NCCL (``dist.all_reduce``), and, where SGLang would turn it on, FlashInfer's PCIe-IPC all-reduce
(``PcieIpcAllReduceWorkspace``, the kernels SGLang 0.5.23's ``pcie_ipc_ar`` drives). ``--pcie-ipc auto`` measures
it where SGLang's own code picks it for this topology (``entrypoints/allreduce.py``, run here with what
``nvidia-smi topo`` says); ``on`` always (a release that has it); ``off`` never. Rank 0 prints one line per size:
the microseconds of each backend, the ratio, and whether the sums were exact. Then one line: which backend the
service will use. With ``--record`` that verdict is written to the cache volume for ``PCIE_ALLREDUCE=auto``
(``entrypoints/pcie_ipc.py``): PCIe-IPC only when its sums were exact at every size and it beat NCCL at every decode
size. ``--if-needed`` first checks whether ``auto`` needs a verdict here and none is recorded, and exits 0 if not.

A set that does not finish within the deadline, the hang a PCIe box with broken peer-to-peer shows on its first
all-reduce, is killed whole, every rank, and reported as "hung at size S (backend)"; exit 1. The ranks run in
process groups of their own, so the deadline ends them and whatever they started. ``--join K`` starts only the
first K ranks: a set that can never complete, for testing the deadline. torch (and FlashInfer for PCIe-IPC) are the
image's; the rest is the standard library.
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

SIZES = "12K,96K,384K,64M"
DECODE_MAX = 384 << 10  # the sizes up to this are decode reductions: where PCIe-IPC must win
UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
MIN_SIZE, MAX_SIZE = 16, 8 << 30  # one 16-byte pack of bf16; 8 GiB, beyond any reduction SGLang issues
MAX_DEADLINE = 3600.0
WARMUP, ITERS = 3, 20
PATTERN = 7  # element i of rank r holds (i % 7) + r: every sum of up to 8 ranks is an exact small integer in bf16


def parse_sizes(text: str) -> list[int]:
    """Byte counts such as ``12K,64M``, each a whole number of 16-byte packs between 16 B and 8 G; SystemExit otherwise."""
    out = []
    for item in str(text).split(","):
        item = item.strip().upper()
        digits = item[:-1] if item[-1:] in UNITS else item
        if not digits.isdigit() or len(digits) > 12:
            raise SystemExit(f"error: --sizes {text!r}: {item!r} is not a byte count such as 12K or 64M")
        size = int(digits) * UNITS.get(item[-1:], 1)
        if not MIN_SIZE <= size <= MAX_SIZE or size % MIN_SIZE:
            raise SystemExit(f"error: --sizes {text!r}: {item!r} must be a multiple of 16 bytes from 16 to 8G")
        out.append(size)
    return out


def parse_deadline(text) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not 0 < value <= MAX_DEADLINE:
        raise SystemExit(f"error: --deadline {text!r}: seconds, more than 0 and at most {MAX_DEADLINE:g}")
    return value


def shown(size: int) -> str:
    for unit in ("G", "M", "K"):
        if size >= UNITS[unit] and size % UNITS[unit] == 0:
            return f"{size // UNITS[unit]}{unit}"
    return f"{size}B"


def worker(rank: int, world: int, port: int, sizes: list[int], backend: str, pcie: bool) -> int:
    """One rank: join, then all-reduce each size through each backend; rank 0 prints a JSON line per result."""
    import datetime

    import torch
    import torch.distributed as dist

    gpu = backend == "nccl"
    device = torch.device("cuda", rank) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", world_size=world, rank=rank,
                            timeout=datetime.timedelta(hours=1))  # the parent's deadline decides, not torch's
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    workspace = None
    try:
        if pcie:
            from flashinfer.comm import PcieIpcAllReduceWorkspace

            workspace = PcieIpcAllReduceWorkspace(group=dist.group.WORLD, max_numel=max(sizes) // 2,
                                                  dtype=torch.bfloat16)
        for size in sizes:
            numel = size // 2
            index = torch.arange(numel, device=device) % PATTERN
            data = (index + rank).to(torch.bfloat16).reshape(1, numel)
            expected = (index * world + world * (world - 1) // 2).to(torch.bfloat16).reshape(1, numel)
            ways = {backend: lambda x: (dist.all_reduce(x), x)[1]}
            if workspace is not None:
                ways["pcie_ipc"] = workspace.all_reduce
            for name, reduce in ways.items():
                if name == "pcie_ipc" and not workspace.supports(data):
                    _emit(rank, {"size": size, "backend": name, "unsupported": True})
                    continue
                exact = torch.tensor([int(torch.equal(reduce(data.clone()), expected))], device=device)
                dist.all_reduce(exact, op=dist.ReduceOp.MIN)
                scratch = data.clone()
                for _ in range(WARMUP):
                    reduce(scratch)
                sync()
                start = time.perf_counter()
                for _ in range(ITERS):
                    reduce(scratch)
                sync()
                seconds = (time.perf_counter() - start) / ITERS
                _emit(rank, {"size": size, "backend": name, "us": round(seconds * 1e6, 1), "exact": bool(exact.item()),
                             "busbw_gbps": round(size / seconds / 1e9 * 2 * (world - 1) / world, 2)})
    finally:
        if workspace is not None:
            workspace.destroy()
        dist.destroy_process_group()
    return 0


def _emit(rank: int, row: dict) -> None:
    if rank == 0:
        print(json.dumps(row), flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def judge(rows: list[dict], backend: str) -> tuple[str, str]:
    """(the backend the service will use, why) from the measured rows: PCIe-IPC only with exact sums at every size
    and faster than NCCL at every decode size."""
    pcie = {r["size"]: r for r in rows if r["backend"] == "pcie_ipc"}
    nccl = {r["size"]: r for r in rows if r["backend"] == backend}
    bad = [shown(s) for s, r in sorted(pcie.items()) if r.get("exact") is False]
    if bad:
        return "nccl", f"PCIe-IPC's sums were wrong at {', '.join(bad)}"
    decode = sorted(s for s in nccl if s <= DECODE_MAX)
    if not decode:
        return "nccl", "no decode size was measured"
    missing = [shown(s) for s in decode if s not in pcie or pcie[s].get("unsupported")]
    if missing:
        return "nccl", f"PCIe-IPC declined {', '.join(missing)}"
    slower = [shown(s) for s in decode if pcie[s]["us"] >= nccl[s]["us"]]
    ratios = ", ".join(f"{shown(s)} {nccl[s]['us'] / max(pcie[s]['us'], 0.1):.1f}x" for s in decode)
    if slower:
        return "nccl", f"PCIe-IPC was not faster than NCCL at {', '.join(slower)} ({ratios})"
    return "pcie_ipc", f"exact sums, faster than NCCL at every decode size ({ratios})"


def line_of(size: int, rows: list[dict], backend: str) -> str:
    """One size's line: each backend's microseconds, the ratio, and whether its sums were exact."""
    mine = {r["backend"]: r for r in rows if r["size"] == size}
    parts = []
    for name, row in mine.items():
        parts.append(f"{name} declined" if row.get("unsupported") else f"{name} {row['us']:.1f} us")
    base, other = mine.get(backend), mine.get("pcie_ipc")
    if base and other and not other.get("unsupported"):
        parts[-1] += f" ({base['us'] / max(other['us'], 0.1):.1f}x NCCL's speed)"
    elif base and base.get("busbw_gbps") is not None:
        parts[-1] += f", bus {base['busbw_gbps']:.1f} GB/s"
    exact = [r.get("exact") for r in mine.values() if not r.get("unsupported")]
    return f"probe: {shown(size)}: {', '.join(parts)}; " + ("sums exact" if all(exact) else "SUMS WRONG")


def run(gpus: int, sizes: list[int], deadline: float, backend: str, pcie: bool, join: int | None = None) -> tuple[int, list]:
    """Start the ranks, follow rank 0's lines, end every rank at the deadline: (exit code, the measured rows)."""
    port = free_port()
    argv = [sys.executable, "-m", "sglang_stack.entrypoints.probe", "--worker", "--gpus", str(gpus), "--port", str(port),
            "--sizes", ",".join(map(str, sizes)), "--backend", backend, "--pcie-ipc", "on" if pcie else "off"]
    ranks = [subprocess.Popen([*argv, "--rank", str(r)], stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                              text=True, start_new_session=True) for r in range(join if join is not None else gpus)]
    ways = [backend] + (["pcie_ipc"] if pcie else [])
    print(f"probe: {gpus} ranks ({' and '.join(ways)}), all-reduce of {', '.join(shown(s) for s in sizes)}, "
          f"deadline {deadline:g} s", flush=True)
    started, rows = time.monotonic(), []
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in ranks[0].stdout], daemon=True)
    reader.start()
    expected = len(sizes) * len(ways)
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
                rows.append(row)
                if sum(r["size"] == row["size"] for r in rows) == len(ways):
                    print(line_of(row["size"], rows, backend), flush=True)
            if exited:
                codes = [p.poll() for p in ranks]
                failed = [(r, c) for r, c in enumerate(codes) if c != 0]
                if failed:
                    print(f"error: probe: rank {failed[0][0]} exited {failed[0][1]} after "
                          f"{time.monotonic() - started:.0f} s", file=sys.stderr)
                    return 1, rows
                if len(rows) == expected:
                    wrong = any(r.get("exact") is False for r in rows if r["backend"] == backend)
                    if wrong:
                        print(f"error: probe: {backend}'s sums were wrong (lines above)", file=sys.stderr)
                        return 1, rows
                    print(f"probe: ok: {len(sizes)} sizes in {time.monotonic() - started:.1f} s", flush=True)
                    return 0, rows
                print(f"error: probe: the ranks ended after {len(rows)} of {expected} results", file=sys.stderr)
                return 1, rows
            time.sleep(0.05)
        at = shown(sizes[len(rows) // len(ways)]) if len(rows) < expected else "the end"
        way = ways[len(rows) % len(ways)] if len(rows) < expected else ways[-1]
        stage = "joining" if not rows else "all-reduce"
        print(f"error: probe: hung at size {at} ({way}, {stage}) after {deadline:g} s: the GPUs did not complete an "
              "all-reduce; check peer-to-peer (`invoke doctor`: topology) and NCCL_P2P_DISABLE", file=sys.stderr)
        return 1, rows
    finally:
        for p in ranks:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # the rank and anything it started
                except ProcessLookupError:
                    pass
            p.wait()


def plan(gpus: int, mode: str, deterministic: bool) -> tuple[bool, dict | None, str, dict | None]:
    """(measure PCIe-IPC, SGLang's decision or None, why not, the topology read) for ``--pcie-ipc`` ``mode``."""
    from sglang_stack.entrypoints import allreduce, installed, peers, pcie_ipc

    has_it, version = installed.sglang_has(pcie_ipc.MODULE_FILE)
    if mode == "off":
        return False, None, "--pcie-ipc off", None
    if not has_it:
        return False, None, f"SGLang {version or '(none)'} has no PCIe-IPC all-reduce", None
    if gpus not in pcie_ipc.SIZES:
        return False, None, f"{gpus} ranks (FlashInfer's kernels exist for 2, 4 and 8)", None
    try:
        topology = peers.read(gpus)
    except ValueError as err:
        return False, None, f"the topology could not be read ({err})", None
    if mode == "on":
        return True, None, "", topology
    decided = allreduce.decide(gpus, topology["nvlink"], topology["p2p"], deterministic)
    if decided["backend"] != "pcie_ipc":
        said = decided["pcie_ipc"].get("why") or decided.get("why") or ""
        return False, decided, f"SGLang {version} takes decode reductions through {decided['backend']} here" + \
            (f" ({said})" if said else ""), topology
    return True, decided, "", topology


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, required=True, help="ranks: one per GPU the container sees")
    parser.add_argument("--sizes", default=SIZES, help=f"all-reduce sizes in bytes, K/M/G (default {SIZES})")
    parser.add_argument("--deadline", default="60", help="seconds for the whole set (default 60)")
    parser.add_argument("--backend", default="nccl", choices=("nccl", "gloo"), help="nccl on GPUs; gloo on the CPU")
    parser.add_argument("--pcie-ipc", default="auto", choices=("auto", "on", "off"),
                        help="also measure FlashInfer's PCIe-IPC all-reduce: where SGLang picks it (auto), always, never")
    parser.add_argument("--deterministic", choices=("yes", "no"), default="no",
                        help="the server runs with --enable-deterministic-inference (default no)")
    parser.add_argument("--record", action="store_true", help="write the verdict where PCIE_ALLREDUCE=auto reads it")
    parser.add_argument("--if-needed", action="store_true",
                        help="only when PCIE_ALLREDUCE=auto needs a verdict here and none is recorded")
    parser.add_argument("--join", type=int, default=None, help="start only the first K ranks (a set that never completes)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not 1 <= args.gpus <= 64:
        raise SystemExit(f"error: --gpus {args.gpus}: from 1 to 64")
    sizes = parse_sizes(args.sizes)
    if args.worker:
        return worker(args.rank, args.gpus, args.port, sizes, args.backend, args.pcie_ipc == "on")
    deadline = parse_deadline(args.deadline)
    return probe(args, sizes, deadline)


def probe(args, sizes: list[int], deadline: float) -> int:
    """The parent: decide what to measure, measure it, say (and record) which backend the service will use."""
    from sglang_stack.entrypoints import installed, pcie_ipc

    deterministic = args.deterministic == "yes"
    mode = args.pcie_ipc
    if args.if_needed or args.record:
        value, warning = pcie_ipc.setting(os.environ)
        if warning:
            print(f"probe: warning: {warning}", flush=True)
        if args.if_needed and value != "auto":
            print(f"probe: not needed: {pcie_ipc.SETTING}={value} needs no verdict", flush=True)
            return 0
    measure_pcie, decided, why_not, topology = (False, None, "", None)
    if args.backend == "nccl":
        measure_pcie, decided, why_not, topology = plan(args.gpus, mode, deterministic)
    svc = pcie_ipc.Service(tp=args.gpus, deterministic=deterministic)
    _, version = installed.sglang_has(pcie_ipc.MODULE_FILE)
    if args.if_needed:
        verdict, _ = pcie_ipc.read_verdict()
        if topology is None:
            print(f"probe: not needed: {why_not}", flush=True)
            return 0
        if verdict is not None and verdict.get("key") == pcie_ipc.key(svc, topology, version):
            print(f"probe: not needed: a verdict for this topology is recorded ({verdict['verdict']}, "
                  f"{verdict.get('when', '?')})", flush=True)
            return 0
    code, rows = run(args.gpus, sizes, deadline, args.backend, measure_pcie, args.join)
    if code:
        return code
    if measure_pcie:
        chosen, why = judge(rows, args.backend)
    else:
        chosen = (decided or {}).get("backend", "nccl")
        chosen, why = ("nccl" if chosen in ("nccl", "none") else chosen), why_not
    if args.backend != "nccl":
        return 0  # the CPU's gloo: the deadline and the sums, nothing to say about a GPU backend
    print(f"probe: the service will use {chosen}: {why}", flush=True)
    if args.record and topology is not None:
        record = {"key": pcie_ipc.key(svc, topology, version), "verdict": chosen, "why": why, "rows": rows,
                  "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "uuids": topology["uuids"]}
        try:
            path = pcie_ipc.write_verdict(record)
        except OSError as err:
            print(f"error: probe: could not record the verdict ({err.strerror or err}): {pcie_ipc.verdict_path()}",
                  file=sys.stderr)
            return 1
        print(f"probe: recorded in {path} for PCIE_ALLREDUCE=auto", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
