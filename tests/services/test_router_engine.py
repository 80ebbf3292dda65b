"""SGLang's router on the real Docker Engine, in front of two stand-in workers.

The user's own commands: `invoke build --target router`, `docker compose --profile router
up -d --wait router`, `invoke status`, `invoke up router`, `invoke bench --endpoint router=URL`.
The router image, its entrypoint, compose.yaml's `router` service and its healthcheck are the
shipped ones. Two CPU stand-ins for SGLang (tests/engine.py) play the replicas, as services of
tests/compose.router.yaml on the project network; each logs one line per /generate it serves,
so the workers themselves say who answered.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import wait_until
from sglang_stack.engine import DOCKER
from sglang_stack import ROOT
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.image import store

import engine

pytestmark = pytest.mark.engine

UP = ("--profile", "router", "up", "-d", "--wait", "router")  # the literal command of docs/scaling.md
# Worker health checks every second, two failures in a row: a dead worker leaves rotation within
# about 2 x (1 s + 2 s). compose.yaml's defaults (15 s, 30 s, 3) suit SGLang's generating /health.
FAST_CHECKS = {"interval": 1, "timeout": 2, "threshold": 2}
FAST_ARGS = (f"--health-check-interval-secs {FAST_CHECKS['interval']} --health-check-timeout-secs {FAST_CHECKS['timeout']} "
             f"--health-failure-threshold {FAST_CHECKS['threshold']}")
WORKER_A = "http://worker-a:30000"


def generate(url: str, i: int) -> dict:
    return engine.generate(url, engine.unrelated_prompt(i), 64)


def generate_many(url: str, numbers: range, concurrency: int = 8) -> list[dict]:
    """Requests in flight together: each stand-in request takes a quarter second (64 tokens)."""
    with ThreadPoolExecutor(concurrency) as pool:
        return list(pool.map(lambda i: generate(url, i), numbers))


def failures(answers: list[dict]) -> list[str]:
    return [a.get("error") or f"meta_info {a.get('meta_info')}" for a in answers
            if "error" in a or a.get("meta_info", {}).get("completion_tokens") != 64]


def served(project) -> dict[str, int]:
    return {worker: engine.served(project.logs(worker)) for worker in engine.WORKERS}


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture
def router_project(standin_image, router_image, compose_project):
    """Factory: a project of compose.yaml + tests/compose.router.yaml, the router pointed at both workers."""

    def make(**env):
        return compose_project(engine.ROUTER_OVERRIDE, env={
            "SGLANG_STACK_IMAGE": standin_image, "SGLANG_ROUTER_IMAGE": router_image[0],
            "ROUTER_WORKER_URLS": engine.WORKER_URLS, **env})

    return make


# --- invoke build --target router ----------------------------------------------------------------


def test_invoke_build_target_router_builds_the_router_stage(router_image, docker_base):
    tag, proc, seconds = router_image
    assert "$ docker buildx build --load" in proc.stderr and "--target router" in proc.stderr, proc.stderr[:2000]
    assert f"ROUTER_BASE_IMAGE={docker_base}" in proc.stderr, "--base-image must replace the router's base"
    assert f"built {tag} (sha256:" in proc.stdout, proc.stdout[-2000:]
    lock = lockmod.check()
    labels = store.labels(DOCKER, tag)
    assert labels.get("io.sglang-stack.router.version") == lock.router.version, f"labels: {labels}"
    assert labels.get("io.sglang-stack.base.used") == docker_base, f"labels: {labels}"
    # The OCI labels name the base this build used, not the lock's pin that --base-image replaced.
    assert labels.get("org.opencontainers.image.base.name") == docker_base, f"labels: {labels}"
    assert labels.get("org.opencontainers.image.base.digest") == docker_base.partition("@")[2], f"labels: {labels}"
    version = engine.docker("run", "--rm", "--network", "none", "--entrypoint", "python3", tag, "-c",
                            "import importlib.metadata as m; print(m.version('sglang-router'))").stdout.strip()
    assert version == lock.router.version, f"the image holds sglang-router {version!r}"
    empty = engine.docker("run", "--rm", "--network", "none", tag, "--worker-urls", "", check=False)
    assert empty.returncode == 2, f"an empty worker list must stop the entrypoint: {empty.returncode} {empty.stderr}"
    assert empty.stderr.startswith("error: ROUTER_WORKER_URLS is empty") and empty.stderr.count("\n") == 1, empty.stderr
    print(f"invoke build --engine docker --target router: {seconds:.1f} s, image {store.size(DOCKER, tag) / 1e6:.0f} MB")


def test_invoke_size_budgets_the_router_stage_within_its_margin(router_image):
    """The budget from the lock (PyPI wheels measured by their zip directories, plus .pyc) against the built layer."""
    tag = router_image[0]
    proc = subprocess.run([*engine.INVOKE, "size", "--target", "router", "--image", tag, "--engine", "docker"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    line = next((ln for ln in proc.stdout.splitlines() if "requirements.router.lock.txt: budget" in ln), None)
    assert line and line.startswith("ok  "), f"the router's Python layer is off its budget: {line}\n{proc.stdout[-2000:]}"
    assert "skip base" in proc.stdout, "the base is whatever --base-image gave; it must not be judged"
    assert proc.stdout.strip().splitlines()[-1].startswith("router: "), proc.stdout[-500:]
    print(line)


# --- docker compose --profile router up -d --wait router --------------------------------------------


def test_compose_up_wait_router_reaches_healthy_and_serves_both_workers(router_project):
    project = router_project()
    start = time.monotonic()
    project.compose(*UP, timeout=300)
    print(f"docker compose --profile router up -d --wait router: healthy after {time.monotonic() - start:.1f} s")
    for service in ("router", *engine.WORKERS):
        assert project.health(service) == "healthy", f"{service} is {project.health(service)} after up --wait"
    url = project.url("router")
    ready = get_json(f"{url}/readiness")
    assert (ready["healthy_workers"], ready["total_workers"]) == (2, 2), f"the router's /readiness: {ready}"

    answers = generate_many(url, range(32))
    assert not failures(answers), f"requests through the router failed: {failures(answers)[:3]}"
    counts = served(project)
    assert sum(counts.values()) == 32, f"the workers served {counts}, 32 requests were sent"
    assert all(counts[w] > 0 for w in engine.WORKERS), f"both workers must serve: {counts}"
    print(f"32 concurrent requests through the router: {counts}")

    status = project.invoke("status").stdout
    line = next((row for row in status.splitlines() if row.startswith("router")), "")
    assert "running (healthy)" in line and f":{project.env['ROUTER_PORT']}->30080" in line, status
    assert "DOWN" not in line, status


# --- a worker dies ---------------------------------------------------------------------------------


def test_a_dead_worker_leaves_rotation_and_requests_keep_succeeding(router_project):
    project = router_project(ROUTER_EXTRA_ARGS=FAST_ARGS)
    project.compose(*UP, timeout=300)
    url = project.url("router")
    assert not failures(generate_many(url, range(16))), "both workers serve before one dies"
    assert all(served(project).values()), f"both workers take requests before one dies: {served(project)}"

    # Clients keep sending while the worker dies: what they see during detection is reported.
    during: list[tuple[float, dict]] = []
    stop = threading.Event()

    def client(k: int) -> None:
        i = 1000 * (k + 1)
        while not stop.is_set():
            during.append((time.monotonic(), generate(url, i)))
            i += 1

    clients = [threading.Thread(target=client, args=(k,)) for k in range(4)]
    for thread in clients:
        thread.start()
    try:
        project.compose("kill", "worker-a")
        killed = time.monotonic()
        gone = wait_until(lambda: engine.worker_health(url).get(WORKER_A) is False, timeout=60, interval=0.1)
        detected = time.monotonic()
    finally:
        stop.set()
        for thread in clients:
            thread.join()
    detection = detected - killed
    assert gone, f"the router still counts worker-a as healthy {detection:.0f} s after it died: {engine.worker_health(url)}"
    window = FAST_CHECKS["threshold"] * (FAST_CHECKS["interval"] + FAST_CHECKS["timeout"])
    assert detection <= window + 5, f"worker-a left rotation after {detection:.1f} s; its checks allow {window} s"
    in_window = [answer for when, answer in during if killed <= when < detected]
    lost = failures(in_window)

    before = served(project)["worker-b"]
    after = generate_many(url, range(100, 132))
    assert not failures(after), f"requests failed after worker-a left rotation: {failures(after)[:3]}"
    assert served(project)["worker-b"] - before == 32, "every request after detection is worker-b's"
    ready = get_json(f"{url}/readiness")
    assert (ready["healthy_workers"], ready["total_workers"]) == (1, 2), f"/readiness: {ready}"
    assert project.health("router") == "healthy", "one worker left: the router still serves"
    print(f"worker-a killed: out of rotation after {detection:.1f} s (checks every {FAST_CHECKS['interval']} s, "
          f"{FAST_CHECKS['threshold']} failures); {len(lost)} of {len(in_window)} requests sent meanwhile failed"
          + (f" ({lost[0]})" if lost else "") + "; 32 of 32 after it succeeded")


# --- a worker that comes up after the router ----------------------------------------------------------


def _late_worker(project) -> tuple[dict[str, int], dict]:
    """The router restarted while worker-b is down, worker-b started 8 s later: what each worker then serves."""
    project.compose(*UP, timeout=300)
    url = project.url("router")
    project.compose("stop", "worker-b")
    project.compose("restart", "router")
    assert wait_until(lambda: project.health("router") == "healthy", timeout=120, interval=0.5), "the router came back"
    assert not failures(generate_many(url, range(8))), "worker-a serves while worker-b is down"
    time.sleep(8)  # past a 5 s --worker-startup-timeout-secs
    project.compose("start", "worker-b")
    assert wait_until(lambda: project.health("worker-b") == "healthy", timeout=120, interval=0.5)
    time.sleep(3 * (FAST_CHECKS["interval"] + FAST_CHECKS["timeout"]))  # a few of the router's health checks
    before = served(project)
    assert not failures(generate_many(url, range(200, 232))), "requests succeed either way"
    after = served(project)
    return {w: after[w] - before[w] for w in engine.WORKERS}, get_json(f"{url}/readiness")


def test_a_short_startup_timeout_loses_a_late_worker_for_good(router_project):
    """The pinned sglang-router's own behaviour, kept as a fact: why compose.yaml waits a week, not 30 minutes."""
    counts, ready = _late_worker(router_project(ROUTER_EXTRA_ARGS=FAST_ARGS, ROUTER_WORKER_STARTUP_TIMEOUT="5"))
    print(f"startup timeout 5 s, worker-b up after 8 s: {counts}, /readiness {ready}")
    assert counts["worker-b"] == 0 and counts["worker-a"] == 32, f"worker-b was expected to be dropped: {counts}"


def test_the_project_setting_serves_a_worker_that_comes_up_late(router_project):
    counts, ready = _late_worker(router_project(ROUTER_EXTRA_ARGS=FAST_ARGS))
    print(f"compose.yaml's startup timeout, worker-b up after 8 s: {counts}, /readiness {ready}")
    assert counts["worker-b"] > 0 and counts["worker-a"] > 0, f"both workers must serve once worker-b is up: {counts}"


# --- the router itself down ---------------------------------------------------------------------------


def test_invoke_status_says_the_router_is_down_and_invoke_up_brings_it_back(router_project):
    project = router_project()
    project.compose(*UP, timeout=300)
    url = project.url("router")
    # These leave the published port in TIME_WAIT for a minute: the preflight must not take
    # that for a port in use when `invoke up router` starts the router again.
    assert not failures(generate_many(url, range(8))), "the router serves before it is stopped"
    project.compose("stop", "router")

    status = project.invoke("status").stdout
    line = next((row for row in status.splitlines() if row.startswith("router")), "")
    assert "exited" in line and "router DOWN" in line and "invoke up router" in line, status
    for worker in engine.WORKERS:
        assert project.health(worker) == "healthy", f"{worker} must keep running without the router"
    with pytest.raises(urllib.error.URLError) as refused:
        urllib.request.urlopen(f"{url}/readiness", timeout=5)
    assert isinstance(refused.value.reason, ConnectionError), f"clients of a stopped router are refused: {refused.value}"

    up = project.invoke("up", "router", "--interval", "1", timeout=300)
    assert "preflight:" in up.stdout and "0 FAIL" in up.stdout, f"the router's preflight must pass: {up.stdout}"
    assert "router: healthy after" in up.stdout and url in up.stdout, up.stdout
    line = next((row for row in project.invoke("status").stdout.splitlines() if row.startswith("router")), "")
    assert "running (healthy)" in line and "DOWN" not in line, line
    assert not failures(generate_many(url, range(8, 16))), "the router serves again"


# --- invoke bench through the router ---------------------------------------------------------------------


def test_bench_measures_through_the_router_with_an_api_key(router_project, run_id, tmp_path, sglang_generator):
    # As docs/scaling.md sets up replicas: one key file for the router and its workers.
    # invoke bench reads the same file, as a user's .env names it.
    key_file = tmp_path / "sglang_api_key"
    key_file.write_text(f"key-{run_id}\n")
    key_file.chmod(0o644)  # the images' user (uid 10001) reads the bind-mounted file
    project = router_project(SGLANG_API_KEY_FILE=str(key_file))
    project.compose(*UP, timeout=300)
    url = project.url("router")
    refused = generate(url, 0)
    assert refused.get("error", "").startswith("HTTP 401"), f"a request without the key must be refused: {refused}"
    before = sum(served(project).values())
    out = tmp_path / "bench"
    project.invoke("bench", "--endpoint", f"router={url}", "--levels", "1", "--repeats", "1", "--warmup", "1",
                   "--python", sglang_generator["python"], "--tokenizer", sglang_generator["tokenizer"], "--out",
                   str(out), timeout=600)
    results = json.loads((out / "bench.json").read_text())
    endpoints = results["metadata"]["endpoints"]
    assert [(e["name"], e["url"]) for e in endpoints] == [("router", url)], f"bench measured {endpoints}"
    rows = {(r["endpoint"], r["level"]): r for r in results["summary"]["rows"]}
    row = rows.get(("router", 1))
    assert row and row["decode_tps_p50"] > 0 and row["failed"] == 0 and row["requests"] > 0, f"no measurement: {rows}"
    sent = row["requests"] + results["metadata"]["warmup"]
    assert sum(served(project).values()) - before == sent, f"the workers must have served the {sent} requests bench sent"
    print(f"invoke bench through the router: {row['requests']} requests, decode {row['decode_tps_p50']:.0f} tok/s p50, "
          f"TTFT {row['ttft_ms_p50']:.0f} ms p50")
