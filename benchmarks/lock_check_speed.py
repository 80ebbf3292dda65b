"""Time the hash check of `invoke lock --check`: cold (records fetched from PyPI) and warm (cache only).

    python benchmarks/lock_check_speed.py [--repeat N]

Cold: an empty records directory, so every pinned release's record is fetched from
PyPI's JSON API (needs PyPI). Warm: the same check N times against the filled
directory, in process, then one `invoke lock --check` subprocess with the project's
cache warm, as a user runs it. Prints each figure, the pin and hash counts, and the
size of the records directory.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_stack import ROOT
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.lock import releases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    lock = lockmod.check()
    with tempfile.TemporaryDirectory(prefix="sglang-stack-bench-releases-") as tmp:
        directory = Path(tmp)
        start = time.perf_counter()
        cold = releases.check_lock(lock, directory)
        cold_s = time.perf_counter() - start
        warm = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            report = releases.check_lock(lock, directory)
            warm.append(time.perf_counter() - start)
        size = sum(p.stat().st_size for p in directory.rglob("*.json"))

    releases.check_lock(lock)  # the project's own cache, warm for the subprocess below
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "invoke", "lock", "--check"], cwd=ROOT, check=True, capture_output=True)
    task_s = time.perf_counter() - start

    print(f"pins: {report.pins}, hashes: {report.hashes}")
    print(f"cold hash check ({cold.fetched} records fetched from PyPI): {cold_s:.2f} s")
    print(f"warm hash check, in process: median {statistics.median(warm) * 1000:.1f} ms, "
          f"best {min(warm) * 1000:.1f} ms ({args.repeat} runs, no network)")
    print(f"`invoke lock --check`, warm cache, subprocess: {task_s * 1000:.0f} ms")
    print(f"records directory: {size / 1e6:.2f} MB in {report.pins} files")


if __name__ == "__main__":
    main()
