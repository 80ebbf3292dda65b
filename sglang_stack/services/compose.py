"""The `docker compose` commands that run the services: up (with progress while the model loads), down, logs,
status and ps.

Compose v2 has no Python API, so these run its CLI, print each command, and parse
``docker compose ps --format json``. What compose.yaml resolves to: ``composefile``.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from typing import Callable

from sglang_stack import ROOT, shell
from sglang_stack.engine import Engine
from sglang_stack.errors import UserError
from sglang_stack.services import composefile
from sglang_stack.services.composefile import ROUTER
from sglang_stack.services.progress import describe, failure_reason, format_elapsed, latest_state, parse_ps, progress_line


def compose_argv(engine: Engine, proj: composefile.Project, *args: str) -> list[str]:
    """``docker compose`` for this project from any working directory; Compose picks the files (COMPOSE_FILE).

    Every profile of the project is named: a service in an inactive profile is invisible to
    ``down``, ``ps`` and ``logs``.
    """
    argv = [engine.runner, "compose", "--project-directory", str(ROOT)]
    profiles = sorted({p for spec in proj.config["services"].values() for p in spec.get("profiles") or ()})
    for profile in profiles:
        argv += ["--profile", profile]
    return argv + list(args)


def require_engine(engine: Engine) -> None:
    """One line naming the fix when the engine does not answer or has no compose plugin."""
    if engine.daemon:
        from sglang_stack import engine as engine_mod

        engine_mod.require_plugin("compose")
        engine_mod.reachable()


def ps(engine: Engine, proj: composefile.Project, services: tuple[str, ...] | list[str] = (), quiet: bool = False) -> list[dict]:
    argv = compose_argv(engine, proj, "ps", "--all", "--format", "json", *(services or proj.names()))
    proc = shell.run(argv, capture=True, quiet=quiet, what="docker compose ps", timeout=30)
    return parse_ps(proc.stdout)



def last_log_line(engine: Engine, proj: composefile.Project, name: str) -> str:
    """The newest line the service logged, as ``latest_state`` reduces it."""
    argv = compose_argv(engine, proj, "logs", "--no-color", "--no-log-prefix", "--tail", "1", name)
    try:
        proc = shell.run(argv, capture=True, check=False, quiet=True, timeout=15)
    except UserError:
        return ""
    return latest_state(proc.stdout or "")


def up(
    engine: Engine,
    svc: "composefile.Service | composefile.RouterService",
    wait_timeout: int,
    interval: float = 15.0,
    out: Callable[[str], None] = lambda line: print(line, flush=True),
) -> None:
    """``docker compose up --detach --wait NAME``, with a progress line while the model loads.

    Compose returns once the healthcheck passes (the server generated a token),
    or fails when the container exits or turns unhealthy, or after
    ``wait_timeout`` seconds. Progress comes from ``ps`` and the last log line.
    """
    name = svc.name
    proj = composefile.project(svc.env)
    router = proj.role(name) == ROUTER
    require_engine(engine)
    argv = compose_argv(engine, proj, "up", "--detach", "--wait", "--wait-timeout", str(wait_timeout), name)
    shell.show(argv)
    what = "a worker to be healthy" if router else "/health to generate a token"
    out(f"{name}: waiting for {what} (start period {svc.healthcheck.get('start_period', '?')}); "
        f"progress every {interval:g}s, full log: invoke logs {name}")
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv)
    except FileNotFoundError:
        raise UserError(f"{engine.runner}: not found on PATH: install Docker Engine with the compose plugin") from None
    last_key: tuple | None = None
    last_time = 0.0
    try:
        while True:
            try:
                code = proc.wait(timeout=interval)
                break
            except subprocess.TimeoutExpired:
                pass
            try:
                rows = [r for r in ps(engine, proj, [name], quiet=True) if r.get("Service") == name]
            except UserError:
                rows = []
            row = rows[0] if rows else None
            log_line = last_log_line(engine, proj, name)
            # A line when something changed, and at least once a minute while nothing does.
            key = ((row or {}).get("State"), (row or {}).get("Health"), log_line)
            if key != last_key or time.monotonic() - last_time >= 60:
                out(progress_line(name, time.monotonic() - start, row, log_line))
                last_key, last_time = key, time.monotonic()
    except KeyboardInterrupt:
        proc.wait()
        raise UserError(
            f"stopped waiting; {name} goes on starting in the background: invoke status, invoke logs {name}, invoke down",
            code=130,
        ) from None
    elapsed = format_elapsed(time.monotonic() - start)
    if code == 0:
        out(f"{name}: healthy after {elapsed}: {svc.url} (OpenAI-compatible API under {svc.url}/v1)")
        return
    reason = "did not become ready: no worker answered /health" if router else "did not become healthy"
    try:
        rows = [r for r in ps(engine, proj, [name], quiet=True) if r.get("Service") == name]
        if rows:
            reason = failure_reason(rows[0])
        shell.run(compose_argv(engine, proj, "logs", "--no-color", "--tail", "40", name), check=False, timeout=30)
    except UserError:
        pass
    raise UserError(f"{name} {reason} after {elapsed} (docker compose exit {code}): see the log above, or invoke logs {name}")


PROBE_START_S = 120  # what the container's start may take beyond the probe's own deadline (pulling nothing: --pull never)


def probe(engine: Engine, svc: composefile.Service, deadline: float = 60, sizes: str = "", *, if_needed: bool = False,
          record: bool = True) -> int:
    """``sglang_stack.entrypoints.probe`` in SERVICE's image, with its GPUs, /dev/shm, ulimits, NCCL environment and
    cache volume (``docker compose run``): one rank per GPU of the node, all-reducing through NCCL and, where SGLang
    would pick it, PCIe-IPC, under ``deadline``; the verdict is recorded in the cache volume for PCIE_ALLREDUCE=auto.
    ``if_needed``: only where auto needs a verdict and none is recorded. Its exit code; a container still there after
    the deadline and the start's allowance is removed, whatever it holds."""
    from sglang_stack.entrypoints import allreduce

    require_engine(engine)
    proj = composefile.project(svc.env)
    name = f"sglang-stack-probe-{svc.name}-{int(time.time())}"
    gpus = svc.tp_size // max(svc.nnodes, 1)
    deterministic = "yes" if "--enable-deterministic-inference" in svc.argv else "no"
    argv = compose_argv(engine, proj, "run", "--rm", "--no-deps", "--pull", "never", "--name", name, "--entrypoint",
                        "python3", svc.name, "-m", "sglang_stack.entrypoints.probe", "--gpus", str(gpus),
                        "--deadline", f"{deadline:g}", "--deterministic", deterministic,
                        *(["--sizes", sizes] if sizes else []), *(["--record"] if record else []),
                        *(["--if-needed"] if if_needed else []))
    # SGLang's own choice runs first in the container (its ranks import SGLang): its deadline on top of the probe's.
    allowance = deadline + PROBE_START_S + allreduce.TIMEOUT_S * max(1.0, gpus / 8)
    try:
        return shell.run(argv, check=False, timeout=allowance, what="the probe").returncode
    except UserError as err:
        if err.code != 124:  # not the timeout: a CLI that is missing, named in the error
            raise
        shell.run([engine.runner, "rm", "--force", name], capture=True, check=False)
        raise UserError(f"probe: {svc.name}: the container did not end within {allowance:g} s; "
                        f"removed it ({name})") from None


def down(engine: Engine, volumes: bool = False) -> None:
    """Stop and remove every service's containers (and the cache volume with ``volumes``)."""
    proj = composefile.project()
    require_engine(engine)
    shell.run(compose_argv(engine, proj, "down", *(["--volumes"] if volumes else [])), what="docker compose down")


def check_services(proj: composefile.Project) -> None:
    """Resolve each service's settings, so a bad .env value is named before Compose trips on it."""
    for name in proj.names():
        if proj.role(name) == ROUTER:
            composefile.router_service(proj.env, name=name, need_workers=False)
        else:
            composefile.service(name, proj.env)


def logs(engine: Engine, name: str, follow: bool, tail: str) -> None:
    proj = composefile.project()
    proj.check(name)
    tail = str(tail).strip()
    if tail != "all" and not tail.isdigit():
        raise UserError(f"--tail {tail!r}: a number of lines, or 'all'")
    check_services(proj)  # compose interpolates every service, so any bad value stops it
    require_engine(engine)  # after the user's own input: a mistake there is named first
    if not any(row.get("Service") == name for row in ps(engine, proj, [name], quiet=True)):
        raise UserError(f"{name}: no container (never started, or removed by `invoke down`): invoke up {name}", code=1)
    args = ["logs", "--tail", str(tail)] + (["--follow"] if follow else []) + [name]
    shell.run(compose_argv(engine, proj, *args), what="docker compose logs")


def status(engine: Engine, out: Callable[[str], None] = print, only: str | None = None) -> list[dict]:
    """One line per service container (or for ``only``); a service that is not up says how to start it.

    A router that is not running says it is down in so many words: clients of its
    address get connection refused even while every worker is healthy. A running server names the
    PCIe-IPC autotune files its cache volume holds (what the next start reuses).
    """
    proj = composefile.project()
    if only is not None:
        proj.check(only)
    check_services(proj)
    require_engine(engine)
    rows = [row for row in ps(engine, proj) if only is None or row.get("Service") == only]
    seen = {row.get("Service") for row in rows}
    width = max(9, *(len(n) for n in proj.names()))
    for row in rows:
        line = describe(row, width)
        name = row.get("Service")
        if proj.role(name) == ROUTER and (row.get("State") != "running" or row.get("Health") == "unhealthy"):
            why = "no worker answers /health" if row.get("State") == "running" else "clients get connection refused"
            line += f"  -- router DOWN: {why}; invoke logs {name}, invoke up {name}"
        out(line)
        if proj.role(name) != ROUTER and row.get("State") == "running" and row.get("Name"):
            for tuned in autotune_files(engine, row["Name"]):
                out(f"{'':<{width}} autotune: {tuned}")
    for name in proj.names() if only is None else (only,):
        if name not in seen:
            hint = f"router down (not created): invoke up {name}" if proj.role(name) == ROUTER else f"invoke up {name}"
            out(f"{name:<{width}} {'not created':<22} {'-':<26} {hint}")
    return rows


def autotune_files(engine: Engine, container: str) -> list[str]:
    """The PCIe-IPC autotune files in a running server's cache volume, as the image's own code lists them; none
    where the container cannot answer (an older image, a stopped one): status goes on without them."""
    argv = [engine.runner, "exec", container, "python3", "-m", "sglang_stack.entrypoints.pcie_ipc"]
    try:
        proc = shell.run(argv, capture=True, check=False, timeout=30)
    except UserError:
        return []
    return proc.stdout.splitlines() if proc.returncode == 0 else []


def main(argv: list[str] | None = None) -> int:
    """``python -m sglang_stack.services.compose [SERVICE]``: print what compose.yaml resolves to."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sglang_stack.services.compose", description=main.__doc__)
    parser.add_argument("service", nargs="?", default=None)
    args = parser.parse_args(argv)
    proj = composefile.project()
    for name in [proj.check(args.service, composefile.SERVER)] if args.service else proj.names(composefile.SERVER):
        svc = composefile.service(name, proj.env)
        print(f"{name}: {svc.url}  image {svc.image}  tp {svc.tp_size}  gpus {svc.gpu_ids}")
        print(f"  model {svc.model_dir}" + (f"  drafter {svc.draft_dir}" if svc.draft_dir else ""))
        print(f"  sglang {shlex.join(_redacted(svc.argv))}")
    return 0


def _redacted(argv: list[str]) -> list[str]:
    from sglang_stack.services.variables import redactor

    return redactor().argv(argv)


if __name__ == "__main__":
    from sglang_stack.errors import run_main

    run_main(main)
