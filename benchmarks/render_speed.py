"""Time `lock --check` (offline) plus render, and print the figures the README quotes.

    python benchmarks/render_speed.py [--repeat N]

Prints: median and best wall time of validate+render over N runs (in-process, warm
imports), the same for one cold `invoke render --check` subprocess, the rendered
Dockerfile's line count and the number of pinned distributions.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_stack import ROOT
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.image import render


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        lock, _ = lockmod.check_all(download=False)
        text = render.render_text(lock)
        times.append(time.perf_counter() - start)

    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "invoke", "render", "--check"], cwd=ROOT, check=True, capture_output=True)
    cold = time.perf_counter() - start

    print(f"validate + render, in process: median {statistics.median(times) * 1000:.1f} ms, best {min(times) * 1000:.1f} ms ({args.repeat} runs)")
    print(f"`invoke render --check`, cold subprocess: {cold * 1000:.0f} ms")
    print(f"docker/Dockerfile: {len(text.splitlines())} lines")
    pins = lock.pins()
    print(f"pinned distributions: {len(pins)} ({len(lock.wheels)} by URL, {len(lock.requirements)} from PyPI, sglang)")


if __name__ == "__main__":
    main()
