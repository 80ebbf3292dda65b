"""The router's figures on the Docker Engine: `invoke build --engine docker --target router`, cold
and warm, and the image's size; the time from `docker compose --profile router up -d --wait router`
to healthy in front of two stand-in workers; and how long the router takes to drop a killed worker.

    python benchmarks/router_times.py [--rounds N] [--base-image REF] [--shipped-checks]

Needs a Docker Engine with buildx and Compose v2, debootstrap and PyPI (as .ci/run has).
Everything it makes carries a name of this run's own and is removed at the end.
Cold is `--no-cache` (BuildKit's pip cache mount may still be warm); warm re-runs the same build.
Detection is the time from `docker compose kill worker-a` until the router's /workers says the
worker is unhealthy, with worker checks every second and two failures to drop it
(ROUTER_EXTRA_ARGS); --shipped-checks adds one round at compose.yaml's own settings
(every 15 s, three failures), which takes up to a minute. Four clients keep sending requests
with unrelated prompts through the router meanwhile; the failed ones are counted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

import engine  # noqa: E402  (tests/engine.py: the stand-in image, compose projects, the router override)
from sglang_stack.image import store  # noqa: E402

FAST_ARGS = "--health-check-interval-secs 1 --health-check-timeout-secs 2 --health-failure-threshold 2"
WORKER_A = "http://worker-a:30000"


def round_trip(name: str, env: dict[str, str]) -> tuple[float, float, int, int]:
    """One fresh project: seconds to healthy, seconds until the router drops a killed worker,
    and how many of the requests that four clients sent meanwhile failed, of how many."""
    project = engine.ComposeProject(name, [engine.ROUTER_OVERRIDE], env)
    sent: list[tuple[float, dict]] = []
    stop = threading.Event()

    def client(k: int) -> None:
        i = 1000 * (k + 1)
        while not stop.is_set():
            sent.append((time.monotonic(), engine.generate(project.url("router"), engine.unrelated_prompt(i))))
            i += 1

    clients = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    try:
        start = time.monotonic()
        project.compose("--profile", "router", "up", "-d", "--wait", "router")
        healthy = time.monotonic() - start
        for thread in clients:
            thread.start()
        project.compose("kill", "worker-a")
        killed = time.monotonic()
        while engine.worker_health(project.url("router")).get(WORKER_A) is not False:
            if time.monotonic() - killed > 120:
                sys.exit(f"{name}: the router still counts worker-a as healthy after 120 s")
            time.sleep(0.1)
        dropped = time.monotonic()
    finally:
        stop.set()
        for thread in clients:
            if thread.is_alive():
                thread.join()
        project.down()
    during = [answer for when, answer in sent if killed <= when < dropped]
    return healthy, dropped - killed, sum(1 for a in during if "error" in a), len(during)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="compose up and worker-kill rounds (default 3)")
    parser.add_argument("--base-image", default=None, help="Debian-like base with python3 3.11 and venv (default: make one)")
    parser.add_argument("--shipped-checks", action="store_true", help="also one round at compose.yaml's worker checks")
    args = parser.parse_args()
    run_id = store.run_id()
    base = args.base_image or f"localhost/sglang-stack-bench-{run_id}-base:bookworm"
    router, sglang, standin = (f"sglang-stack-bench-{run_id}:{stage}" for stage in ("router", "sglang", "standin"))
    made = [router, sglang, standin] + ([] if args.base_image else [base])
    build = [*engine.INVOKE, "build", "--engine", "docker", "--base-image", base]
    try:
        if not args.base_image:
            store.make_debian_base("docker", base)
        cold_s = engine.timed(build + ["--target", "router", "--tag", router, "--no-cache"])
        warm_s = engine.timed(build + ["--target", "router", "--tag", router])
        size = store.size("docker", router)
        engine.timed(build + ["--target", "sglang", "--tag", sglang])
        with tempfile.TemporaryDirectory(prefix="sglang-stack-bench-") as tmp:
            engine.build_standin(sglang, standin, Path(tmp))
        env = {"SGLANG_STACK_IMAGE": standin, "SGLANG_ROUTER_IMAGE": router, "ROUTER_WORKER_URLS": engine.WORKER_URLS}
        rounds = [round_trip(f"sgs-bench-{run_id}-{i}", {**env, "ROUTER_EXTRA_ARGS": FAST_ARGS}) for i in range(args.rounds)]
        shipped = round_trip(f"sgs-bench-{run_id}-shipped", env) if args.shipped_checks else None
    finally:
        store.remove("docker", *made)
    ups, drops = [r[0] for r in rounds], [r[1] for r in rounds]
    lost, during = sum(r[2] for r in rounds), sum(r[3] for r in rounds)
    print(f"invoke build --engine docker --target router: cold (--no-cache) {cold_s:.1f} s, warm {warm_s:.1f} s; "
          f"image {size / 1e6:.0f} MB ({size} bytes)")
    print(f"docker compose --profile router up -d --wait router (two stand-in workers, 1 s load) to healthy: "
          f"median {statistics.median(ups):.1f} s over {len(ups)} rounds ({', '.join(f'{u:.1f}' for u in ups)})")
    print(f"killed worker out of rotation (checks every 1 s, 2 failures): median {statistics.median(drops):.1f} s "
          f"({', '.join(f'{d:.1f}' for d in drops)}); {lost} of {during} requests sent meanwhile failed")
    if shipped:
        print(f"killed worker out of rotation at compose.yaml's checks (every 15 s, 3 failures): {shipped[1]:.1f} s; "
              f"{shipped[2]} of {shipped[3]} requests sent meanwhile failed")

if __name__ == "__main__":
    main()
