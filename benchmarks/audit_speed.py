"""Time the EAGLE-3 audit on the full sglang tree, against the crash it replaces.

    python benchmarks/audit_speed.py [--repeat N] [--wheel URL SHA256]

Fetches the pinned wheel (versions.lock, hash-verified, cached), unpacks it, and
prints: the wall time of a cold `python3 -m sglang_stack.audit.eagle3` subprocess (what
the image build runs: interpreter start, imports, every file read and parsed) on
the unpatched and on the patched tree, median and worst of N; the median and best
in-process time over N runs; the files in the tree and the files the audit parsed;
the patch series' apply time; what the run half (the probe) did and its own time; and the ratio to the 485 s that the reference EAGLE-3
server spent loading Kimi-K2.5 before it died on the first missing method.
--wheel times one more release, unpatched (for example the latest on PyPI).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_stack import ROOT
from sglang_stack import download
from sglang_stack.patching import patches
from sglang_stack.audit import eagle3 as audit
from sglang_stack.lock import lockfile as lockmod

CRASH_SECONDS = 485  # the reference EAGLE-3 run: Kimi-K2.5's load until the AttributeError
ARCH = "KimiK25ForConditionalGeneration"


def cold(site: Path, repeat: int) -> tuple[float, float, int, str]:
    """Median and worst wall time of ``repeat`` fresh interpreters running the audit, its exit code and last line."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "sglang_stack.audit.eagle3", "--sglang-src", str(site), "--arch", ARCH],
            cwd=ROOT, capture_output=True, text=True,
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times), max(times), proc.returncode, (proc.stdout.strip().splitlines() or [""])[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="runs of each measurement (default 5)")
    parser.add_argument("--wheel", nargs=2, metavar=("URL", "SHA256"), help="also time this sglang wheel, unpatched")
    args = parser.parse_args()

    table = lockmod.load()["sglang"]
    wheel = download.fetch(table["url"], table["sha256"])
    with tempfile.TemporaryDirectory(prefix="sglang-stack-bench-") as tmp:
        site = patches.unpack_wheel(wheel, Path(tmp) / "site")
        n_files = sum(1 for p in (site / "sglang").rglob("*.py"))

        unpatched_s, unpatched_max, unpatched_rc, unpatched_line = cold(site, args.repeat)

        start = time.perf_counter()
        patches.apply_series(site, ROOT / "patches", quiet=True)
        apply_s = time.perf_counter() - start

        patched_s, patched_max, patched_rc, patched_line = cold(site, args.repeat)

        times = []
        report = None
        for _ in range(args.repeat):
            start = time.perf_counter()
            report = audit.audit(site, ARCH)
            times.append(time.perf_counter() - start)
        # What reading the whole tree would cost: ast.parse of every file, in process (the goal is 0.2x of it).
        import ast

        sources = [(p, p.read_bytes()) for p in sorted((site / "sglang").rglob("*.py"))]
        start = time.perf_counter()
        for path, data in sources:
            ast.parse(data, filename=str(path))
        parse_all_s = time.perf_counter() - start
        if args.wheel:
            other = patches.unpack_wheel(download.fetch(*args.wheel), Path(tmp) / "other")
            other_s, other_max, other_rc, other_line = cold(other, args.repeat)

    print(f"machine: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}")
    print(f"tree: sglang {report.sglang_version}, {n_files} .py files; the audit parsed {report.files_read}")
    print(f"audit, cold subprocess, unpatched: median {unpatched_s:.2f} s, worst {unpatched_max:.2f} s, exit {unpatched_rc}: {unpatched_line}")
    print(f"apply the patch series: {apply_s * 1000:.0f} ms")
    print(f"audit, cold subprocess, patched: median {patched_s:.2f} s, worst {patched_max:.2f} s, exit {patched_rc}: {patched_line}")
    print(f"audit, in process: median {statistics.median(times):.2f} s, best {min(times):.2f} s ({args.repeat} runs)")
    print(f"its run half, in a subprocess beside the source reading (its own time): {report.run.removeprefix('run: ')}")
    print(f"ast.parse of all {n_files} files, in process: {parse_all_s:.2f} s; the audit's median is "
          f"{statistics.median(times) / parse_all_s:.2f}x of it")
    if args.wheel:
        print(f"audit, cold subprocess, {Path(args.wheel[0]).name}: median {other_s:.2f} s, worst {other_max:.2f} s, exit {other_rc}: {other_line}")
    worst = max(unpatched_max, patched_max)
    print(
        f"against the crash: {worst:.2f} s before the build fails, instead of {CRASH_SECONDS} s of model "
        f"loading before the server dies: {CRASH_SECONDS / worst:.0f}x sooner, and before any GPU is touched"
    )


if __name__ == "__main__":
    main()
