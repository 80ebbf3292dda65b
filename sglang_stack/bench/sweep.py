"""``invoke bench --sweep``: restart the EAGLE service once per speculative setting and keep the fastest.

compose.yaml turns ``SGLANG_SPEC_NUM_STEPS``, ``SGLANG_SPEC_EAGLE_TOPK`` and
``SGLANG_SPEC_NUM_DRAFT_TOKENS`` into ``--speculative-num-steps``,
``--speculative-eagle-topk`` and ``--speculative-num-draft-tokens``. Each grid
point recreates the service with those variables set in compose's environment
(they win over ``.env``), waits for its healthcheck and ``/health``,
checks with ``/server_info`` that the server really runs the setting, and then
measures it like ``invoke bench`` does. A point whose server does not come up
is recorded as failed and the sweep goes on: a setting that does not fit the
box is a result too.

Restarts reload the model (minutes for a 1T-parameter model), so grid points
run one after the other, not interleaved: compare them with the repeats'
spread in mind.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from sglang_stack.engine import Engine
from sglang_stack.bench import client, display, promptset, report, rounds, upstream
from sglang_stack.bench import measure as bench
from sglang_stack.services import compose
from sglang_stack.services import composefile
from sglang_stack import shell
from sglang_stack.bench.request import Request
from sglang_stack.bench.rounds import Options, Results
from sglang_stack.bench.display import Progress
from sglang_stack.bench.promptset import PromptSet
from sglang_stack.bench.client import Endpoint
from sglang_stack.serverapi import RequestFailed
from sglang_stack.errors import UserError
from sglang_stack.flags import INTEGER
from sglang_stack.services.variables import redact

ENV_STEPS = "SGLANG_SPEC_NUM_STEPS"
ENV_TOPK = "SGLANG_SPEC_EAGLE_TOPK"
ENV_DRAFT = "SGLANG_SPEC_NUM_DRAFT_TOKENS"


@dataclass(frozen=True)
class GridPoint:
    steps: int
    topk: int
    draft_tokens: int

    def label(self, service: str) -> str:
        return f"{service} s{self.steps} k{self.topk} d{self.draft_tokens}"

    def env(self) -> dict[str, str]:
        return {ENV_STEPS: str(self.steps), ENV_TOPK: str(self.topk), ENV_DRAFT: str(self.draft_tokens)}


class PointFailed(Exception):
    """This grid point's server did not come up; the sweep records it and goes on."""


MAX_GRID = 256  # server restarts in one sweep: each is minutes of model load
MAX_STEPS, MAX_TOPK, MAX_DRAFT_TOKENS = 32, 64, 1024


def parse_ints(flag: str, text: str | int | Sequence[int], minimum: int = 1, maximum: int = MAX_DRAFT_TOKENS) -> list[int]:
    """Distinct integers in ``[minimum, maximum]``, in the order given."""
    items = [str(x).strip() for x in (text.split(",") if isinstance(text, str) else
                                      text if isinstance(text, (list, tuple)) else [text])]
    items = [x for x in items if x]
    if len(items) > MAX_GRID:
        raise UserError(f"{flag} {text!r}: {len(items)} values; a sweep takes at most {MAX_GRID} points")
    out: dict[int, None] = {}
    for item in items:
        if not INTEGER.fullmatch(item) or not minimum <= int(item) <= maximum:
            raise UserError(f"{flag} {text!r}: {item!r} is not an integer from {minimum} to {maximum}")
        out[int(item)] = None
    return list(out)


def max_draft_tokens(steps: int, topk: int) -> int:
    """The most draft tokens a tree of ``steps`` x ``topk`` can offer the verifier.

    SGLang picks ``num_draft_tokens - 1`` candidates by top-k over ``topk`` scores
    from the first step plus ``topk * topk`` from each later one
    (sglang/srt/speculative/eagle_utils.py, ``organize_draft_results``); asking for
    more fails inside ``torch.topk``.
    """
    return 1 + topk + (steps - 1) * topk * topk


def grid(steps: Sequence[int], topks: Sequence[int], draft_tokens: Sequence[int]) -> list[GridPoint]:
    """Every valid (steps, topk, draft tokens) combination, in the order given.

    With topk 1 the draft-token count is always steps + 1: SGLang overrides any
    other value (server_args.py: "speculative_num_draft_tokens is adjusted to
    speculative_num_steps + 1 when speculative_eagle_topk == 1"), so measuring
    others would repeat the same setting. With topk above 1 the draft-token
    counts come from ``--sweep-draft-tokens``; counts the tree cannot offer are dropped.
    """
    if not steps:
        raise UserError("--sweep-steps is empty (e.g. --sweep-steps 1,2,3,4)")
    if not topks:
        raise UserError("--sweep-topk is empty (e.g. --sweep-topk 1)")
    if any(k > 1 for k in topks) and not draft_tokens:
        raise UserError(
            f"--sweep-topk {','.join(map(str, topks))}: a topk above 1 needs --sweep-draft-tokens (e.g. 4,8,16)"
        )
    size = len(steps) * len(topks) * max(1, len(draft_tokens))
    if size > MAX_GRID:  # before the points are built: a sweep this large would restart the server for days
        raise UserError(f"--sweep-steps x --sweep-topk x --sweep-draft-tokens: {len(steps)} x {len(topks)} x "
                        f"{max(1, len(draft_tokens))} = {size} points; a sweep takes at most {MAX_GRID}")
    points: dict[GridPoint, None] = {}
    for s in steps:
        for k in topks:
            counts = [s + 1] if k == 1 else [d for d in draft_tokens if 2 <= d <= max_draft_tokens(s, k)]
            for d in counts:
                points[GridPoint(s, k, d)] = None
    points = list(points)
    if not points:
        raise UserError(
            f"--sweep-draft-tokens {','.join(map(str, draft_tokens))}: no count fits the trees of "
            f"--sweep-steps {','.join(map(str, steps))} and --sweep-topk {','.join(map(str, topks))} "
            "(at most 1 + topk + (steps - 1) * topk^2)"
        )
    return points


def compose_argv(engine: Engine, proj: composefile.Project, service: str, wait_timeout: float = 1800) -> list[str]:
    """The command that recreates ``service`` and waits until its healthcheck passes; it never builds."""
    return compose.compose_argv(
        engine, proj, "up", "--detach", "--wait", "--wait-timeout", str(int(wait_timeout)), "--force-recreate",
        "--no-build", service,
    )


def compose_env(point: GridPoint, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with the grid point's three variables (they win over ``.env``)."""
    return {**base, **point.env()}


def compose_restart(engine: Engine, proj: composefile.Project, service: str, wait_timeout: float = 1800
                    ) -> Callable[[GridPoint], None]:
    """A restart function that runs ``docker compose up`` for each grid point."""
    shell.require(engine.runner, f"the sweep restarts {service} with {engine.runner} compose; install it with its compose plugin")

    def restart(point: GridPoint) -> None:
        shell.run(compose_argv(engine, proj, service, wait_timeout), env=compose_env(point, dict(os.environ)),
                  what=f"{engine.runner} compose up {service} ({point.label(service)})")

    return restart


def compose_log_tail(engine: Engine, proj: composefile.Project, service: str, lines: int = 15) -> str:
    """The service's last log lines (``docker compose logs --tail``), or "" when they cannot be read."""
    argv = compose.compose_argv(engine, proj, "logs", "--no-color", "--no-log-prefix", "--tail", str(lines), service)
    try:
        proc = shell.run(argv, capture=True, check=False, quiet=True, timeout=30)
    except UserError:
        return ""
    return (proc.stdout or "").strip()


def preflight(engine: Engine, service: str) -> None:
    """The checks `invoke up` runs, once, before the first grid point; and the image must exist.

    A host that cannot serve fails here, in one line, not after one compose run per grid point.
    The sweep never builds or pulls an image (compose would, without `invoke build`'s lock checks).
    """
    from sglang_stack.doctor import checklist as doctor
    from sglang_stack.doctor.checks import OK

    checks = doctor.preflight(engine, service)
    image = next((c for c in checks if c.name == "image"), None)
    if image is not None and image.status != OK and "is not built" in image.detail:
        raise UserError(f"--sweep: {image.detail}; the sweep never builds or pulls an image: run `invoke build` first")


def mismatch(info: Mapping, point: GridPoint) -> str | None:
    """What the server runs that differs from ``point``; ``None`` when it matches or does not say."""
    wanted = {
        "speculative_num_steps": point.steps,
        "speculative_eagle_topk": point.topk,
        "speculative_num_draft_tokens": point.draft_tokens,
    }
    wrong = [
        f"{key}={info[key]} (wanted {value})" for key, value in wanted.items() if key in info and info[key] != value
    ]
    return ", ".join(wrong) or None


def select_best(summary: dict, points: Sequence[dict], level: int) -> str | None:
    """The label of the measured point with the highest aggregate tok/s at ``level``.

    Ties go to fewer draft tokens, then fewer steps: the same speed for less
    verify work leaves more headroom under load.
    """
    rows = {r["endpoint"]: r for r in summary["rows"] if r["level"] == level}
    ranked = []
    for point in points:
        row = rows.get(point["label"])
        if point.get("error") or not row or row["aggregate_tps_mean"] is None:
            continue
        ranked.append((-row["aggregate_tps_mean"], point["draft_tokens"], point["steps"], point["label"]))
    return min(ranked)[3] if ranked else None


def run_points(
    endpoint: Endpoint,
    points: Sequence[GridPoint],
    prompt_set: PromptSet,
    options: Options,
    api_key: str | None,
    results: Results,
    restart: Callable[[GridPoint], None],
    ready_timeout: float,
    level: int,
    service: str,
    progress: Progress | None = None,
    ready_interval: float = 5.0,
    log_tail: Callable[[], str] | None = None,
) -> None:
    """Restart, check and measure each point; then leave the service on the best one.

    A point that fails records why: the error, and ``log_tail()`` (the service's last log
    lines) when the server did not come up or died under load.
    """
    progress = progress or Progress(0, enabled=False)
    per_point = rounds.planned_rounds(options, 1)
    sweep = results.sweep
    last_up: str | None = None
    for point in points:
        label = point.label(service)
        entry = {"label": label, "steps": point.steps, "topk": point.topk, "draft_tokens": point.draft_tokens,
                 "error": None}
        sweep["points"].append(entry)
        measured = Endpoint(label, endpoint.url)
        counted = len(results.rounds)
        try:
            progress.line(f"{label}: restarting {service}")
            try:
                restart(point)
                client.wait_ready(measured, api_key, ready_timeout, ready_interval)
            except UserError as err:
                last_up = None  # what runs now is unknown
                raise PointFailed(str(err)) from None
            last_up = label
            info = client.server_info(measured, api_key)
            wrong = mismatch(info, point)
            if wrong:
                raise UserError(
                    f"{service} at {endpoint.url} runs {wrong}: the compose file must pass "
                    f"{ENV_STEPS}, {ENV_TOPK} and {ENV_DRAFT} to --speculative-num-steps, "
                    "--speculative-eagle-topk and --speculative-num-draft-tokens"
                )
            entry["verified"] = bool(info) and all(
                k in info for k in ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")
            )
            results.metadata["endpoints"].append({"name": label, "url": endpoint.url, "server": info})
            rounds.run_rounds([measured], prompt_set, options, api_key, results, progress)
        except (PointFailed, RequestFailed) as err:
            entry["error"] = str(err)
            entry["log_tail"] = log_tail() if log_tail else None
            display.say(f"bench: sweep point {label} failed: {err}")
            if entry["log_tail"]:
                display.say(f"bench: last lines of {service}'s log:\n" + entry["log_tail"])
            # Its remaining rounds will never run: keep the count of planned rounds honest.
            progress.drop(per_point - (len(results.rounds) - counted))
        finally:
            results.write()
    summary = report.summarize(results.document())
    best = select_best(summary, sweep["points"], level)
    sweep["best"] = best
    results.write()
    if best is None:
        raise UserError(f"every sweep point failed; see {results.out_dir / report.MARKDOWN_NAME}")
    point = next(p for p in points if p.label(service) == best)
    display.tell(f"bench: best setting {best}: " + " ".join(f"{k}={v}" for k, v in point.env().items()))
    if last_up != best:
        progress.line(f"bench: recreating {service} with the best setting")
        restart(point)
        client.wait_ready(Endpoint(best, endpoint.url), api_key, ready_timeout, ready_interval)


def run(
    request: Request,
    *,
    service: str | None = None,
    environ: Mapping[str, str] | None = None,
    env_file: Path | None = None,
    restart: Callable[[GridPoint], None] | None = None,
    progress: bool = True,
    ready_interval: float = 5.0,
    log_tail: Callable[[], str] | None = None,
) -> Path:
    """Sweep ``service`` (default: compose.yaml's default service, which must speculate with EAGLE) over the grid
    of ``request`` and write the results directory; return its path.

    The sweep always measures SGLang's native API in closed loop, which is what acceptance is read from.
    ``restart``, ``log_tail`` and ``ready_interval`` stand in for Compose (tests).
    """
    if request.api != "native" or request.request_rate not in (None, ""):
        raise UserError("--sweep measures SGLang's native API in closed loop: drop --api and --request-rate")
    env = bench.stack_env(environ, env_file)
    options = Options(
        levels=bench.parse_levels(request.levels),
        repeats=bench.parse_count("--repeats", request.repeats, 1),
        warmup=bench.parse_count("--warmup", request.warmup, 0),
        timeout=bench.parse_seconds("--timeout", request.timeout),
        ignore_eos=bool(request.ignore_eos),
        prompt_template=bench.check_template(request.prompt_template),
        flush_cache=bool(request.flush),
        seed=bench.parse_count("--seed", request.seed, 0),
        num_requests=bench.parse_count("--num-requests", request.num_requests, 1) if request.num_requests else None,
        percentiles=bench.parse_percentiles(request.percentiles),
    )
    points = grid(parse_ints("--sweep-steps", request.steps, maximum=MAX_STEPS), parse_ints("--sweep-topk", request.topk, maximum=MAX_TOPK),
                  parse_ints("--sweep-draft-tokens", request.draft_tokens, minimum=2))
    rank_level = min(options.levels) if request.level in (None, "") else bench.parse_count("--sweep-level", request.level, 1)
    if rank_level not in options.levels:
        raise UserError(f"--sweep-level {rank_level}: not one of --levels {','.join(map(str, options.levels))}")
    ready = bench.parse_seconds("--ready-timeout", request.ready_timeout)
    source = promptset.parse_dataset(request, options)
    bench.check_generator(request)
    proj = None
    if service is None or not request.endpoints:
        proj = composefile.project(env)
        service = service or proj.default
        algorithm = composefile.service(service, proj.env).speculative
        if not algorithm.startswith("EAGLE"):
            raise UserError(f"--sweep varies EAGLE's steps, top-k and draft tokens, and {service} "
                            f"{'runs ' + algorithm if algorithm else 'does not speculate'}: name an EAGLE service")
    if request.endpoints:
        given = bench.parse_endpoints(request.endpoints)
        if len(given) != 1 or given[0].name != service:
            raise UserError(f"--sweep measures only {service}: pass at most --endpoint {service}=URL")
        endpoint = given[0]
    else:
        endpoint = Endpoint(service, composefile.endpoint(service, proj.env))
    if restart is None:
        proj = proj or composefile.project(env)
        preflight(request.engine, service)
        restart = compose_restart(request.engine, proj, service, ready)
        log_tail = log_tail or (lambda: compose_log_tail(request.engine, proj, service))
    model_dir = promptset.served_model_dir(request.endpoints, env)
    api_key = (proj or composefile.project(env)).api_key()
    place = functools.cache(lambda: bench.generator_place(request, options, model_dir, api_key, env, endpoint))
    prompt_set = source.load(model_dir, place)
    options.benchmark = upstream.start(*place(), api_key)
    out_dir = bench.results_dir(request.out)
    meta = bench.metadata([], options, api_key, interleaved=False)
    meta["prompt_set"] = prompt_set.record()
    meta["reference"] = None
    meta["load"]["generator"] = bench.generator_record(options.benchmark)
    results = Results(out_dir, meta)
    results.sweep = {
        "service": service,
        "url": endpoint.url,
        "level": rank_level,
        "grid": {"steps": sorted({p.steps for p in points}), "topk": sorted({p.topk for p in points}),
                 "draft_tokens": sorted({p.draft_tokens for p in points})},
        "points": [],
        "best": None,
    }
    bar = Progress(rounds.planned_rounds(options, len(points)), enabled=progress)
    bar.line(redact(f"bench: sweeping {service} ({endpoint.url}) over {len(points)} settings; results in {out_dir}"))
    bench.execute(results, lambda: run_points(endpoint, points, prompt_set, options, api_key, results, restart,
                                              ready, rank_level, service, bar, ready_interval, log_tail))
    return out_dir
