"""How long `invoke doctor` takes on this host (target: a few seconds, Docker or not).

    python benchmarks/doctor_speed.py [--runs 5] [--service eagle3]

Runs ``python -m sglang_stack.doctor.checklist`` as a user would, several times, and
prints the wall time of each run, the median and the worst. The report itself
is discarded; its exit code (1 when a check fails) does not matter here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="number of timed runs (default 5)")
    parser.add_argument("--service", default="eagle3", help="service to check (default eagle3)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sglang_stack.doctor.checklist", args.service], env=env, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    print(f"doctor {args.service}: {args.runs} runs, " + ", ".join(f"{t:.2f}s" for t in times))
    print(f"median {statistics.median(times):.2f} s, worst {max(times):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
