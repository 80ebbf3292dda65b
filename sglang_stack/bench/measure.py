"""``invoke bench``: decode speed, latency and acceptance of running SGLang (or OpenAI-compatible) servers.

SGLang's own serving benchmark sends every request (bench/upstream.py), from the image the services run. By default
it streams SGLang's native API (``POST /generate``): each event's ``meta_info`` counts the output tokens so far, and
the last carries ``finish_reason`` and, with speculative decoding, every ``spec_*`` figure
(sglang/srt/managers/tokenizer_manager.py, ``_calculate_spec_decoding_metrics``). Token counts and acceptance are
taken from that metadata, never estimated from text. ``--api chat`` or ``completions`` measures any
OpenAI-compatible server instead (targets.py).

The load is closed-loop at each ``--levels`` concurrency, or open-loop arrivals at
``--request-rate`` (rounds.py). When several endpoints are measured, their rounds alternate
(A B, then B A) per level and repeat, so a slow minute on a noisy machine hits both sides
and the ratio stays meaningful. Results are rewritten after every round, so a failure
leaves the rounds already measured on disk, marked incomplete.
"""

from __future__ import annotations

import functools
import json
import math
import os
import platform
import re
import socket
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from sglang_stack import ROOT
from sglang_stack.services import variables
from sglang_stack.services import composefile
from sglang_stack.bench import report
from sglang_stack.bench import pays, provenance, rounds, stats, upstream
from sglang_stack.bench.client import Endpoint, probe, probe_openai, server_info
from sglang_stack.serverapi import RequestFailed
from sglang_stack.bench.rounds import (
    Options,
    Results,
    planned_rounds,
    run_rounds,
)
from sglang_stack.bench.targets import Target, parse_api, served_model
from sglang_stack import atomic
from sglang_stack.bench.display import Progress, say, tell
from sglang_stack.bench.request import Request
from sglang_stack.bench.tokenizer import check_tokenizer, served_tokenizer, tokenizer_dir
from sglang_stack.bench import promptset
from sglang_stack.errors import UserError
from sglang_stack.services.variables import redact
from sglang_stack.flags import INTEGER, parse_count, parse_positive, parse_seconds, parse_url

# Bounds a run is checked against before anything starts: past them a run would hang the client or
# outlive any timeout (each cap is named in its refusal).
MAX_CONCURRENCY = 10_000  # requests in flight from one client process
MAX_LEVELS = 64
RATE_RANGE = (1e-3, 1e6)  # requests/s: one per 17 minutes up to far past any one server
MAX_REQUESTS = 1_000_000
DEFAULT_RESULTS = ROOT / "bench-results"


# --- endpoints ---------------------------------------------------------------


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def stack_env(environ: Mapping[str, str] | None = None, env_file: Path | None = None) -> variables.Environment:
    """Variables as compose sees them: ``.env``, overlaid by the shell (or ``environ``)."""
    return variables.environment(env_file, environ)


def default_endpoints(env: variables.Environment) -> list[Endpoint]:
    """compose.yaml's servers on this host, at the address and port it publishes them on."""
    proj = composefile.project(env)
    return [Endpoint(name, composefile.endpoint(name, proj.env)) for name in proj.names(composefile.SERVER)]


def parse_endpoint(spec: str) -> Endpoint:
    """``NAME=URL`` from ``--endpoint``."""
    name, sep, url = spec.partition("=")
    name, url = name.strip(), url.strip().rstrip("/")
    if not sep or not name or not url:
        raise UserError(f"--endpoint {spec!r}: expected NAME=URL, e.g. eagle3=http://127.0.0.1:30001")
    if not _NAME.match(name):
        raise UserError(f"--endpoint {spec!r}: name {name!r} may hold only letters, digits, '.', '_' and '-'")
    return Endpoint(name, parse_url("--endpoint", url, shown=spec))


def parse_endpoints(specs: Iterable[str]) -> list[Endpoint]:
    out: list[Endpoint] = []
    for spec in specs:
        endpoint = parse_endpoint(spec)
        if any(e.name == endpoint.name for e in out):
            raise UserError(f"--endpoint {spec!r}: the name {endpoint.name!r} is given twice")
        out.append(endpoint)
    return out


def parse_levels(text: str | int | Sequence[int]) -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]``: distinct positive integers up to ``MAX_CONCURRENCY``, kept in order; a level
    given twice is refused (a typo for another level, most often: measuring it twice would not say which).

    Also a bare number or a list, as invoke.yaml's ``stack.bench.levels`` may hold."""
    if isinstance(text, str):
        items = [x.strip() for x in text.split(",")]
    elif isinstance(text, (list, tuple)):
        items = [str(x).strip() for x in text]
    else:
        items = [str(text).strip()]
    if len(items) > MAX_LEVELS:
        raise UserError(f"--levels {text!r}: {len(items)} levels; at most {MAX_LEVELS} in one run")
    levels: list[int] = []
    for item in items:
        if not INTEGER.fullmatch(item) or not 1 <= int(item) <= MAX_CONCURRENCY:
            raise UserError(f"--levels {text!r}: {item!r} is not an integer from 1 to {MAX_CONCURRENCY} (e.g. --levels 1,4,16)")
        if int(item) in levels:
            raise UserError(f"--levels {text!r}: {int(item)} is given twice (each level once, e.g. --levels 1,4,16)")
        levels.append(int(item))
    if not levels:
        raise UserError("--levels is empty (e.g. --levels 1,4,16)")
    return levels


# --- the task ----------------------------------------------------------------


def timestamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def results_dir(out: str | Path | None, root: Path = DEFAULT_RESULTS) -> Path:
    """``out`` or ``bench-results/<UTC timestamp>``; never one that already holds results."""
    path = atomic.out_path(out) if out is not None else root / timestamp()
    if path.is_dir() and (path / report.JSON_NAME).exists():
        raise UserError(f"{path}: already holds {report.JSON_NAME}; pick another --out or move it away")
    path = atomic.prepare_dir(path, "--out")  # before any request: a long run must not fail at its first write
    _claim(path)
    if (path / report.JSON_NAME).exists():  # a run that finished between the look above and the claim
        raise UserError(f"{path}: already holds {report.JSON_NAME}; pick another --out or move it away")
    return path


def check_untracked(out: Path) -> None:
    """Inside this checkout, results go where git ignores them (bench-results/ is): among tracked files they would
    be committed by the next `git add`, or mixed into the project's own."""
    path = Path(os.path.abspath(out))
    if not path.is_relative_to(ROOT) or not (ROOT / ".git").exists():
        return
    rel = path.relative_to(ROOT)
    try:
        ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", f"{rel}/"],
                                 capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return  # no git here: nothing to keep apart
    if not ignored:
        raise UserError(f"--out {out}: inside the checkout, where git tracks it; results go under bench-results/ "
                        "(the default) or outside the checkout")


_CLAIMED: dict[Path, int] = {}  # results directory -> the open descriptor whose lock this process holds


def _claim(path: Path) -> None:
    """Hold an exclusive lock on the results directory for the rest of this process: a second run into the same
    --out, started before the first wrote anything, is refused instead of mixing its rounds into the first's."""
    import fcntl

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(f"--out {path}: another invoke bench is writing its results there; pick another --out") from None
    old = _CLAIMED.pop(path, None)
    if old is not None:
        os.close(old)
    _CLAIMED[path] = fd


def host_metadata() -> dict:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def resolve_endpoints(
    specs: Sequence[str], env: variables.Environment, api_key: str | None, probe_timeout: float = 30.0,
    target: Target | None = None, only: str | None = None, verdict: bool = False,
) -> list[Endpoint]:
    """The endpoints to measure, each checked with ``/health``.

    Named with ``--endpoint``, or the one compose service ``only`` names: every one must answer. The compose
    defaults: those that answer are measured (on one box only one service can run), and none answering is an
    error; so is one left out of a ``verdict``, which says how to measure each alone and merge them.
    """
    if specs:
        if only is not None:
            raise UserError(f"--only {only} and --endpoint: --only picks a service of compose.yaml, --endpoint names "
                            "servers by URL; choose one")
        endpoints = parse_endpoints(specs)
        for endpoint in endpoints:
            why = (probe if target is None or target.api == "native" else probe_openai)(endpoint, api_key, probe_timeout)
            if why:
                raise UserError(f"endpoint {endpoint.name} at {endpoint.url} {why}")
        return endpoints
    candidates = default_endpoints(env)
    if only is not None:
        candidates = [e for e in candidates if e.name == only]
        if not candidates:
            names = ", ".join(e.name for e in default_endpoints(env))
            raise UserError(f"--only {only!r}: not a server of compose.yaml (its servers: {names})")
        why = probe(candidates[0], api_key, probe_timeout)
        if why:
            raise UserError(redact(f"--only {only}: {only} at {candidates[0].url} {why}: start it (invoke up {only})"))
        return candidates
    up, down = [], []
    for endpoint in candidates:
        why = probe(endpoint, api_key, probe_timeout)
        (down if why else up).append((endpoint, why))
    if not up:
        detail = "; ".join(f"{e.name} at {e.url} {why}" for e, why in down)
        raise UserError(
            f"no endpoint answers ({detail}): start a service (invoke up baseline) or pass --endpoint NAME=URL"
        )
    if verdict and down:
        (alone, _), (gone, why) = up[0], down[0]
        raise UserError(redact(
            f"--verdict: {gone.name} at {gone.url} {why}, and the verdict measures both at once (each on its own "
            f"GPUs: GPU_IDS); where they cannot run together, measure each alone and merge: invoke bench --verdict "
            f"--only {alone.name} --out A; then, with {gone.name} up, invoke bench --verdict --only {gone.name} --out B; "
            "then invoke bench-compare --results A --results B --verdict"))
    for endpoint, why in down:
        say(redact(f"bench: skipping {endpoint.name} at {endpoint.url}, which {why}; "
                   "to compare services that cannot run together, see `invoke bench-compare`"))
    return [e for e, _ in up]


def run(
    request: Request,
    *,
    environ: Mapping[str, str] | None = None,
    env_file: Path | None = None,
    progress: bool = True,
) -> Path:
    """Measure the endpoints and write the results directory; return its path.

    ``request`` holds the user's flags, read here once. ``environ`` and ``env_file`` stand in for the shell
    and ``.env`` (tests).
    """
    env = stack_env(environ, env_file)
    target = Target(parse_api(request.api), stream=bool(request.stream), model=request.model or None)
    rate = parse_rate(request.request_rate)
    options = Options(
        levels=[parse_count("--max-concurrency", request.max_concurrency, 0, MAX_CONCURRENCY) if request.max_concurrency not in (None, "") else 0]
        if rate is not None else parse_levels(request.levels),
        repeats=parse_count("--repeats", request.repeats, 1),
        warmup=parse_count("--warmup", request.warmup, 0),
        timeout=parse_seconds("--timeout", request.timeout),
        ignore_eos=bool(request.ignore_eos),
        prompt_template=check_template(request.prompt_template),
        flush_cache=bool(request.flush),
        reference=request.reference or None,
        target=target,
        request_rate=rate,
        seed=parse_count("--seed", request.seed, 0),
        num_requests=parse_count("--num-requests", request.num_requests, 1, MAX_REQUESTS) if request.num_requests not in (None, "") else None,
        percentiles=parse_percentiles(request.percentiles),
        slo=stats.parse_slo(request.slo),
    )
    source = promptset.parse_dataset(request, options)
    check_generator(request)
    if request.out:
        atomic.check_creatable(Path(request.out), "--out")  # before the probes: nothing is created for a run that cannot start
        check_untracked(Path(request.out))
    api_key = composefile.api_key(env)
    chosen = resolve_endpoints(request.endpoints, env, api_key, min(options.timeout, 30.0), target, request.only,
                               request.verdict)
    if target.api != "native" and target.model is None:
        options.target = target = Target(target.api, target.stream, served_model(chosen[0], api_key, min(options.timeout, 30.0)))
    if options.reference and options.reference not in {e.name for e in chosen}:
        names = ", ".join(e.name for e in chosen)
        raise UserError(f"--reference {options.reference!r}: not one of the endpoints ({names})")
    meta = metadata(chosen, options, api_key, interleaved=len(chosen) > 1)
    if request.verdict:
        # before SGLang's benchmark and the results directory: a verdict that cannot be given starts and writes nothing
        pays.check(meta, half=request.only is not None)
    # once an endpoint answered; a bad file then leaves no results directory behind
    model_dir = promptset.served_model_dir(request.endpoints, env)
    place = functools.cache(lambda: generator_place(request, options, model_dir, api_key, env, chosen[0]))
    prompt_set = source.load(model_dir, place)
    meta["prompt_set"] = prompt_set.record()
    options.benchmark = upstream.start(*place(), api_key)
    meta["load"]["generator"] = generator_record(options.benchmark)
    out_dir = results_dir(request.out)  # created and proven writable before the first request
    meta["provenance"] = provenance.collect(chosen, env, request.engine)
    results = Results(out_dir, meta)
    bar = Progress(planned_rounds(options, len(chosen)), enabled=progress)
    bar.line(redact(f"bench: {', '.join(f'{e.name} ({e.url})' for e in chosen)}; results in {out_dir}"))
    execute(results, lambda: run_rounds(chosen, prompt_set, options, api_key, results, bar))
    if request.verdict and request.only is not None:
        other = " or ".join(e.name for e in default_endpoints(env) if e.name != request.only) or "NAME"
        tell(f"verdict: {request.only} measured alone ({out_dir}); with {other} up, run invoke bench --verdict "
             f"--only {other} --out B, then merge: invoke bench-compare --results {out_dir} --results B --verdict")
    elif request.verdict:
        found = pays.decide(json.loads((out_dir / report.JSON_NAME).read_text()))
        pays.write(out_dir, found)
        tell(f"verdict: {found['line']} ({out_dir / pays.NAME}, {out_dir / pays.PLOT})")
    return out_dir


def check_generator(request: Request) -> None:
    """What SGLang's benchmark cannot be asked, and where it runs, refused before any endpoint is probed."""
    upstream.parse_generator(request.generator)
    # SGLang's benchmark draws exponential gaps only (get_request in both releases): no gamma shape to pass on
    if parse_positive("--burstiness", request.burstiness) != 1.0:
        raise UserError(f"--burstiness {request.burstiness}: SGLang's benchmark sends Poisson arrivals only "
                        "(burstiness 1)")
    if request.tokenizer is not None:
        tokenizer_dir(request.tokenizer)
    upstream.check_place(request.image, request.python)


def generator_place(request: Request, options: Options, model_dir: Path | None, api_key: str | None,
                    env: variables.Environment, first: Endpoint):
    """Where SGLang's benchmark, which sends the rounds, runs (image.derive.Runner), and the tokenizer it counts
    with: by default the image compose runs the services from (``SGLANG_STACK_IMAGE``, else the tag of the profile it
    names); --tokenizer, else the services' model directory ``model_dir``, else the model the ``first`` --endpoint
    serves."""
    # --tokenizer was checked before the probes (check_generator); the others are checked here
    tokenizer = (tokenizer_dir(request.tokenizer) if request.tokenizer
                 else check_tokenizer(model_dir) if model_dir is not None
                 else served_tokenizer(first, api_key, min(options.timeout, 30.0)))
    image, default = request.image, upstream.PROFILE
    if image is None and request.python is None and request.profile is None:
        # compose.yaml's image for the services where one is named, else the tag of the profile they run
        image = env.get("SGLANG_STACK_IMAGE") or None
        if image is None:
            default = services_profile(env)
    return upstream.runner(image, request.python, request.engine, request.profile, "bench", default=default), tokenizer


def services_profile(env: variables.Environment) -> str:
    """The profile compose runs the services of: ``SGLANG_PROFILE`` as compose reads it (``.env``, overlaid by the
    shell), else the default one; one this checkout does not have is one line naming where it was set."""
    from sglang_stack.lock import profiles

    return profiles.get(env.get(profiles.ENV) or None, where=env.where(profiles.ENV)).name


def parse_rate(value) -> float | None:
    """None (closed loop), a rate in requests per second, or ``math.inf``: every request at once, as
    ``sglang.bench_serving --request-rate inf`` sends them (a burst, not the closed loop)."""
    if value in (None, ""):
        return None
    if isinstance(value, str) and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    return parse_positive("--request-rate", value, *RATE_RANGE)


def parse_percentiles(value) -> tuple[float, ...]:
    if value in (None, ""):
        return stats.DEFAULT_PERCENTILES
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in items:
        try:
            q = float(item)
        except (TypeError, ValueError):
            raise UserError(f"--percentiles {value!r}: {item!r} is not a number") from None
        if not 0 < q < 100:
            raise UserError(f"--percentiles {value!r}: {item!r} is not between 0 and 100")
        out.append(q)
    return tuple(sorted(set(out)))


def check_template(template: str | None) -> str | None:
    if not template:
        return None
    if "{prompt}" not in template:
        raise UserError(f"--prompt-template {template!r}: must contain {{prompt}}, where each prompt goes")
    return template


def metadata(endpoints: Sequence[Endpoint], options: Options, api_key: str | None, interleaved: bool) -> dict:
    described = [{"name": e.name, "url": e.url, "server": server_info(e, api_key, min(options.timeout, 30.0))}
                 for e in endpoints]
    return {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "finished": None,
        "endpoints": described,
        "reference": options.reference or default_reference(described),
        "interleaved": interleaved,
        "prompt_set": None,  # PromptSet.record, once the prompts are read or made
        "target": {"api": options.target.api, "stream": options.target.stream, "model": options.target.model},
        "load": {
            "generator": None,  # generator_record, once SGLang's benchmark has started
            "mode": "closed" if options.request_rate is None else "open",
            "request_rate": rounds.rate_json(options.request_rate),
            "burstiness": 1.0 if options.request_rate is not None else None,  # SGLang's arrivals are Poisson
            "seed": options.seed,
            "num_requests": options.num_requests,
            "window": "closed loop: from the moment all N are in flight until the first end after the last start; "
                      "open loop: the whole round",
        },
        "percentiles": list(options.percentiles),
        "slo_s": options.slo,
        "levels": options.levels,
        "repeats": options.repeats,
        "warmup": options.warmup,
        "sampling": {"temperature": 0.0, "ignore_eos": options.ignore_eos},
        "prompt_template": options.prompt_template,
        "flush_cache": options.flush_cache,
        "timeout_s": options.timeout,
        "host": host_metadata(),
    }


def generator_record(benchmark: upstream.Benchmark) -> dict:
    """bench.json's ``metadata.load.generator``: SGLang's release, its benchmark module, where it ran, the tokenizer."""
    return {"name": "sglang", "module": benchmark.module, "sglang": benchmark.version, "where": benchmark.where,
            "tokenizer": benchmark.tokenizer}


def default_reference(endpoints: Sequence[dict]) -> str | None:
    """The first endpoint whose server does not speculate (its ``/server_info``), else the first endpoint."""
    plain = [e["name"] for e in endpoints if not (e.get("server") or {}).get("speculative_algorithm")]
    return (plain or [e["name"] for e in endpoints] or [None])[0]


def execute(results: Results, body: Callable[[], None]) -> None:
    """Run ``body``; whatever happens, write the results, marked complete only on success."""
    try:
        body()
    except RequestFailed as err:
        results.error = str(err)
        finish(results)
        raise UserError(f"{err} (partial results, marked incomplete: {results.out_dir})", code=1) from None
    except UserError as err:
        results.error = str(err)
        finish(results)
        raise UserError(f"{err} (partial results, marked incomplete: {results.out_dir})", code=err.code) from None
    except KeyboardInterrupt:
        results.error = "interrupted"
        finish(results)
        say(f"bench: interrupted; partial results, marked incomplete: {results.out_dir}")
        raise
    results.complete = True
    doc = finish(results)
    tell(report.markdown(doc))
    tell(f"bench: results in {results.out_dir}")


def finish(results: Results) -> dict:
    results.metadata["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return results.write(plot=True)


def apart_s(docs: Sequence[dict]) -> float | None:
    """Seconds between the end of the earliest run and the start of the latest: how much drift a ratio may carry."""
    try:
        starts = [datetime.fromisoformat(d["metadata"]["started"]) for d in docs]
        ends = [datetime.fromisoformat(d["metadata"].get("finished") or d["metadata"]["started"]) for d in docs]
    except (KeyError, TypeError, ValueError):
        return None
    return max(0.0, (max(starts) - min(ends)).total_seconds())


def compare(paths: Sequence[str | Path], out: str | Path | None = None, reference: str | None = None,
            verdict: bool = False) -> Path:
    """Combine results of separate runs (one service at a time) into one table and plot; with ``verdict``, the
    verdict of bench/pays.py over them (its rounds paired by repeat).

    The runs were not interleaved, so their ratio carries the machine's drift
    between them; the combined metadata says so (``interleaved: false``).
    """
    docs = [report.load_results(Path(p)) for p in paths]  # each named file first: a typo is named as such
    if len(paths) < 2:
        raise UserError("bench-compare needs at least two results (--results DIR, repeated)")
    names: dict[str, str] = {}
    for path, doc in zip(paths, docs):
        for endpoint in doc["metadata"]["endpoints"]:
            if endpoint["name"] in names:
                raise UserError(f"{path}: endpoint {endpoint['name']!r} is also in {names[endpoint['name']]}; "
                                "compare results of different endpoints")
            names[endpoint["name"]] = str(path)
    if reference and reference not in names:
        raise UserError(f"--reference {reference!r}: not one of the endpoints ({', '.join(names)})")
    first = docs[0]["metadata"]
    versions = {d["metadata"]["prompt_set"]["sha256"] for d in docs}
    if len(versions) > 1 and verdict:
        raise UserError(f"--verdict: {paths[0]} and the others used different prompt files "
                        f"({', '.join(sorted(v[:12] for v in versions))}): measure each service with the same prompts")
    if len(versions) > 1:
        say("bench-compare: warning: the runs used different prompt files; their figures are not comparable")
    meta = {
        "started": min(d["metadata"]["started"] for d in docs),
        "finished": max(d["metadata"].get("finished") or d["metadata"]["started"] for d in docs),
        "endpoints": [e for d in docs for e in d["metadata"]["endpoints"]],
        "reference": reference or default_reference([e for d in docs for e in d["metadata"]["endpoints"]]),
        "interleaved": False,
        "sources": [str(Path(p)) for p in paths],
        "taken": [{"source": str(Path(p)), "started": d["metadata"]["started"], "finished": d["metadata"].get("finished")}
                  for p, d in zip(paths, docs)],
        "apart_s": apart_s(docs),
        "prompt_set": first["prompt_set"],
        "levels": sorted({lvl for d in docs for lvl in d["metadata"]["levels"]}),
        "repeats": min(d["metadata"]["repeats"] for d in docs),
        "warmup": first.get("warmup"),
        "sampling": first.get("sampling"),
        "prompt_template": first.get("prompt_template"),
        "flush_cache": first.get("flush_cache"),
        "host": first.get("host"),
        "load": first.get("load") or {"mode": "closed"},
        "provenance": {str(Path(p)): d["metadata"].get("provenance") for p, d in zip(paths, docs)},
    }
    if verdict:
        for path, d in zip(paths, docs):
            if (d["metadata"].get("load") or {}).get("mode", "closed") != "closed":
                raise UserError(f"--verdict: {path} was an open-loop run (--request-rate); the verdict is per "
                                "concurrency level: measure each service in the closed loop")
            if sorted(d["metadata"]["levels"]) != sorted(first["levels"]):
                # a level one side lacks has no pairs, and would read as "cannot be told apart"
                shown = lambda levels: ",".join(map(str, sorted(levels)))  # noqa: E731
                raise UserError(f"--verdict: {paths[0]} measured levels {shown(first['levels'])} and {path} "
                                f"{shown(d['metadata']['levels'])}: the verdict pairs each level's rounds; measure "
                                "every service at the same --levels (--verdict's default is the same for each)")
            ours, theirs = report.generator(first)["name"], report.generator(d["metadata"])["name"]
            if theirs != ours:
                raise UserError(f"--verdict: {paths[0]} was measured by the {ours} generator and {path} by "
                                f"the {theirs} one: measure every service with SGLang's benchmark")
        pays.check(meta)  # before the results directory: a verdict that cannot be given writes nothing
    out_dir = results_dir(out)
    doc = {
        "schema": 1,
        "complete": all(d["complete"] for d in docs),
        "error": "; ".join(f"{p}: {d['error']}" for p, d in zip(paths, docs) if d.get("error")) or None,
        "metadata": meta,
        "rounds": [r for d in docs for r in d["rounds"]],
        "samples": [s for d in docs for s in d["samples"]],
    }
    doc["summary"] = report.summarize(doc)
    report.write_results(out_dir, doc, plot=True)
    tell(report.markdown(doc))
    tell(f"bench-compare: results in {out_dir}")
    if verdict:
        found = pays.decide(doc)
        pays.write(out_dir, found)
        tell(f"verdict: {found['line']} ({out_dir / pays.NAME}, {out_dir / pays.PLOT})")
    return out_dir
