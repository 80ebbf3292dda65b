"""``invoke bench``: decode speed, latency and acceptance length of running SGLang servers.

Requests go through SGLang's native streaming API (``POST /generate`` with
``"stream": true``). The server answers with Server-Sent Events: one
``data: {json}`` line per step, then ``data: [DONE]``. Each JSON object holds
the text so far and a ``meta_info`` whose ``completion_tokens`` counts the
output tokens so far. The last one carries ``finish_reason`` and, when
speculative decoding is on, ``spec_verify_ct`` and ``spec_accept_length``
(``completion_tokens / spec_verify_ct``; sglang/srt/managers/tokenizer_manager.py,
``_calculate_spec_decoding_metrics``). Token counts and acceptance length are
taken from that metadata, never estimated from text.

When several endpoints are measured, their rounds alternate (A B, then B A)
per concurrency level and repeat, so that a slow minute on a noisy machine
hits both sides and the ratio stays meaningful. Results are rewritten after
every round, so a failure leaves the rounds already measured on disk,
marked incomplete.
"""

from __future__ import annotations

import os
import platform
import queue
import re
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from sglang_stack import ROOT
from sglang_stack.services import compose, variables
from sglang_stack.bench import report
from sglang_stack.bench.client import Endpoint, RequestFailed, Timing, flush_cache, probe, server_info, stream_generate
from sglang_stack import atomic
from sglang_stack.bench.display import Progress, say, tell  # noqa: F401 (what a run shows while it runs)
from sglang_stack.bench.promptset import (  # noqa: F401 (callers read the prompt set through measure)
    DEFAULT_PROMPTS, PROMPT_FIELDS, PROMPTS_DIR, Prompt, PromptSet, load_prompts,
)
from sglang_stack.errors import UserError
from sglang_stack.flags import parse_count, parse_seconds

DEFAULT_LEVELS = (1, 4, 16)
DEFAULT_RESULTS = ROOT / "bench-results"


# --- endpoints ---------------------------------------------------------------


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def stack_env(environ: Mapping[str, str] | None = None, env_file: Path | None = None) -> variables.Environment:
    """Variables as compose sees them: ``.env``, overlaid by the shell (or ``environ``)."""
    return variables.environment(env_file, environ)


def default_endpoints(env: variables.Environment) -> list[Endpoint]:
    """The compose services on this host, at the address and port compose.yaml publishes them on."""
    return [Endpoint(name, compose.endpoint(name, env)) for name in compose.SERVICES]


def parse_endpoint(spec: str) -> Endpoint:
    """``NAME=URL`` from ``--endpoint``."""
    name, sep, url = spec.partition("=")
    name, url = name.strip(), url.strip().rstrip("/")
    if not sep or not name or not url:
        raise UserError(f"--endpoint {spec!r}: expected NAME=URL, e.g. eagle3=http://127.0.0.1:30001")
    if not _NAME.match(name):
        raise UserError(f"--endpoint {spec!r}: name {name!r} may hold only letters, digits, '.', '_' and '-'")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(f"--endpoint {spec!r}: {url!r} is not an http:// or https:// URL with a host")
    try:
        parts.port
    except ValueError:
        raise UserError(f"--endpoint {spec!r}: bad port in {url!r}") from None
    return Endpoint(name, url)


def parse_endpoints(specs: Iterable[str]) -> list[Endpoint]:
    out: list[Endpoint] = []
    for spec in specs:
        endpoint = parse_endpoint(spec)
        if any(e.name == endpoint.name for e in out):
            raise UserError(f"--endpoint {spec!r}: the name {endpoint.name!r} is given twice")
        out.append(endpoint)
    return out


def parse_levels(text: str | Sequence[int]) -> list[int]:
    """``"1,4,16"`` -> ``[1, 4, 16]``: distinct positive integers, kept in order."""
    items = [str(x).strip() for x in (text.split(",") if isinstance(text, str) else text)]
    levels: list[int] = []
    for item in items:
        if not item.isdigit() or int(item) < 1:
            raise UserError(f"--levels {text!r}: {item!r} is not a positive integer (e.g. --levels 1,4,16)")
        if int(item) not in levels:
            levels.append(int(item))
    if not levels:
        raise UserError("--levels is empty (e.g. --levels 1,4,16)")
    return levels


# --- one request -------------------------------------------------------------


@dataclass(kw_only=True)
class Sample(Timing):
    """One measured request: where it ran, and its ``Timing``. ``started_s`` counts from the start of the run."""

    endpoint: str
    level: int
    repeat: int
    round: int
    prompt_id: str
    error: str | None = None
    started_s: float = 0.0


def request_body(prompt: Prompt, ignore_eos: bool, prompt_template: str | None) -> dict:
    text = prompt_template.replace("{prompt}", prompt.prompt) if prompt_template else prompt.prompt
    return {
        "text": text,
        # Greedy: reproducible, and the setting speculative acceptance is usually quoted for.
        "sampling_params": {"temperature": 0.0, "max_new_tokens": prompt.max_new_tokens, "ignore_eos": ignore_eos},
        "stream": True,
    }

# --- rounds ------------------------------------------------------------------


@dataclass
class Options:
    levels: list[int] = field(default_factory=lambda: list(DEFAULT_LEVELS))
    repeats: int = 3
    warmup: int = 2
    timeout: float = 600.0
    ignore_eos: bool = False
    prompt_template: str | None = None
    flush_cache: bool = True
    reference: str | None = None
    clock: Callable[[], float] = time.perf_counter  # stamps each streamed event; tests inject their own


class Results:
    """Everything ``bench.json`` holds, rewritten to disk after each round."""

    def __init__(self, out_dir: Path, metadata: dict):
        self.out_dir = out_dir
        self.metadata = metadata
        self.samples: list[Sample] = []
        self.rounds: list[dict] = []
        self.sweep: dict | None = None
        self.complete = False
        self.error: str | None = None
        self._t0 = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self._t0

    def document(self) -> dict:
        samples = [asdict(s) for s in self.samples]
        for s in samples:
            s["itl_s"] = [round(x, 6) for x in s["itl_s"]]
        doc = {
            "schema": 1,
            "complete": self.complete,
            "error": self.error,
            "metadata": self.metadata,
            "rounds": self.rounds,
            "samples": samples,
        }
        doc["summary"] = report.summarize(doc)
        if self.sweep is not None:
            doc["sweep"] = self.sweep
        return doc

    def write(self, plot: bool = False) -> dict:
        doc = self.document()
        report.write_results(self.out_dir, doc, plot=plot)
        return doc


def _round_requests(prompts: Sequence[Prompt], level: int) -> list[Prompt]:
    """The prompt set once; cycled when the level is larger, so every slot is busy."""
    count = max(len(prompts), level)
    return [prompts[i % len(prompts)] for i in range(count)]


def run_round(
    endpoint: Endpoint,
    prompts: Sequence[Prompt],
    level: int,
    repeat: int,
    options: Options,
    api_key: str | None,
    results: Results,
) -> dict:
    """One round: the prompt set through ``level`` parallel streams (closed loop).

    On the first failed request no new request starts; those in flight finish.
    The round's samples, failed ones included, are added to ``results``; the
    first failure is raised as ``RequestFailed``.
    """
    index = len(results.rounds)
    flushed = flush_cache(endpoint, api_key, min(options.timeout, 30.0)) if options.flush_cache else False
    work: queue.SimpleQueue = queue.SimpleQueue()
    for prompt in _round_requests(prompts, level):
        work.put(prompt)
    stop = threading.Event()
    lock = threading.Lock()
    done: list[Sample] = []

    def worker() -> None:
        while not stop.is_set():
            try:
                prompt = work.get_nowait()
            except queue.Empty:
                return
            sample = Sample(endpoint=endpoint.name, level=level, repeat=repeat, round=index, prompt_id=prompt.id,
                            started_s=results.elapsed())
            try:
                stream_generate(
                    endpoint.url, request_body(prompt, options.ignore_eos, options.prompt_template),
                    api_key, options.timeout, sample, clock=options.clock,
                )
            except RequestFailed as err:
                sample.error = str(err)
                stop.set()
            with lock:
                done.append(sample)

    started = results.elapsed()
    with ThreadPoolExecutor(max_workers=level, thread_name_prefix=f"bench-{endpoint.name}") as pool:
        workers = [pool.submit(worker) for _ in range(level)]
        try:
            for future in workers:
                future.result()  # a bug in a worker surfaces here, with its traceback
        except BaseException:
            stop.set()  # Ctrl-C or a bug: start nothing new; requests in flight run out
            raise
    wall = results.elapsed() - started
    done.sort(key=lambda s: s.started_s)
    results.samples.extend(done)
    ok = [s for s in done if s.ok]
    tokens = sum(s.output_tokens for s in ok)
    record = {
        "index": index,
        "endpoint": endpoint.name,
        "level": level,
        "repeat": repeat,
        "started_s": round(started, 6),
        "wall_s": round(wall, 6),
        "requests": len(done),
        "ok": len(ok),
        "output_tokens": tokens,
        "aggregate_tps": tokens / wall if wall > 0 and len(ok) == len(done) else None,
        "cache_flushed": flushed,
    }
    results.rounds.append(record)
    failed = next((s for s in done if not s.ok), None)
    if failed is not None:
        raise RequestFailed(
            f"{endpoint.name} ({endpoint.url}) failed at concurrency {level}, repeat {repeat + 1}, "
            f"prompt {failed.prompt_id}: {failed.error}"
        )
    return record


def warm_up(endpoint: Endpoint, prompts: Sequence[Prompt], count: int, options: Options, api_key: str | None) -> None:
    """Unmeasured requests first: the first ones pay for JIT compiles and cold caches."""
    shortest = sorted(prompts, key=lambda p: p.max_new_tokens)
    for i in range(count):
        prompt = shortest[i % len(shortest)]
        try:
            stream_generate(endpoint.url, request_body(prompt, options.ignore_eos, options.prompt_template),
                            api_key, options.timeout, clock=options.clock)
        except RequestFailed as err:
            raise RequestFailed(
                f"{endpoint.name} ({endpoint.url}) failed during warm-up, prompt {prompt.id}: {err}"
            ) from None


def round_order(endpoints: Sequence[Endpoint], repeat: int) -> list[Endpoint]:
    """A B on even repeats, B A on odd ones: neither side always runs first."""
    return list(endpoints) if repeat % 2 == 0 else list(reversed(endpoints))


def run_rounds(
    endpoints: Sequence[Endpoint],
    prompt_set: PromptSet,
    options: Options,
    api_key: str | None,
    results: Results,
    progress: "Progress | None" = None,
) -> None:
    """Warm up every endpoint, then for each level and repeat, one round per endpoint, interleaved."""
    progress = progress or Progress(0, enabled=False)
    for endpoint in endpoints:
        started = time.perf_counter()
        warm_up(endpoint, prompt_set.prompts, options.warmup, options, api_key)
        progress.warmed_up(endpoint.name, options.warmup, time.perf_counter() - started)
    for level in options.levels:
        for repeat in range(options.repeats):
            for endpoint in round_order(endpoints, repeat):
                before = len(results.rounds)
                try:
                    run_round(endpoint, prompt_set.prompts, level, repeat, options, api_key, results)
                finally:
                    results.write()
                    if len(results.rounds) > before:
                        progress.round_done(results.rounds[-1], options.repeats)


def planned_rounds(options: Options, endpoints: int) -> int:
    return len(options.levels) * options.repeats * endpoints


# --- the task ----------------------------------------------------------------


def timestamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def results_dir(out: str | Path | None, root: Path = DEFAULT_RESULTS) -> Path:
    """``out`` or ``bench-results/<UTC timestamp>``; never one that already holds results."""
    path = Path(out) if out else root / timestamp()
    if path.is_dir() and (path / report.JSON_NAME).exists():
        raise UserError(f"{path}: already holds {report.JSON_NAME}; pick another --out or move it away")
    return atomic.prepare_dir(path, "--out")  # before any request: a long run must not fail at its first write


def host_metadata() -> dict:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def resolve_endpoints(
    specs: Sequence[str], env: variables.Environment, api_key: str | None, probe_timeout: float = 30.0
) -> list[Endpoint]:
    """The endpoints to measure, each checked with ``/health``.

    Named with ``--endpoint``: every one must answer. The compose defaults: those
    that answer are measured (on one box only one service can run), and none
    answering is an error.
    """
    if specs:
        endpoints = parse_endpoints(specs)
        for endpoint in endpoints:
            why = probe(endpoint, api_key, probe_timeout)
            if why:
                raise UserError(f"endpoint {endpoint.name} at {endpoint.url} {why}")
        return endpoints
    candidates = default_endpoints(env)
    up, down = [], []
    for endpoint in candidates:
        why = probe(endpoint, api_key, probe_timeout)
        (down if why else up).append((endpoint, why))
    if not up:
        detail = "; ".join(f"{e.name} at {e.url} {why}" for e, why in down)
        raise UserError(
            f"no endpoint answers ({detail}): start a service (invoke up baseline) or pass --endpoint NAME=URL"
        )
    for endpoint, why in down:
        say(f"bench: skipping {endpoint.name} at {endpoint.url}, which {why}; "
            "to compare services that cannot run together, see `invoke bench-compare`")
    return [e for e, _ in up]


def run(
    endpoints: Sequence[str] = (),
    levels: str | Sequence[int] = DEFAULT_LEVELS,
    repeats: int = 3,
    warmup: int = 2,
    prompts: str | Path | None = None,
    out: str | Path | None = None,
    timeout: float = 600.0,
    ignore_eos: bool = False,
    prompt_template: str | None = None,
    flush: bool = True,
    reference: str | None = None,
    environ: Mapping[str, str] | None = None,
    env_file: Path | None = None,
    progress: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> Path:
    """Measure the endpoints and write the results directory; return its path.

    ``environ`` and ``env_file`` stand in for the shell and ``.env``, ``clock`` for the
    time source that stamps each streamed event (tests).
    """
    env = stack_env(environ, env_file)
    options = Options(
        levels=parse_levels(levels),
        repeats=parse_count("--repeats", repeats, 1),
        warmup=parse_count("--warmup", warmup, 0),
        timeout=parse_seconds("--timeout", timeout),
        ignore_eos=bool(ignore_eos),
        prompt_template=check_template(prompt_template),
        flush_cache=bool(flush),
        reference=reference or None,
        clock=clock,
    )
    prompt_set = load_prompts(Path(prompts) if prompts else DEFAULT_PROMPTS)
    if out:
        atomic.check_creatable(Path(out), "--out")  # before the probes: nothing is created for a run that cannot start
    api_key = env.get("SGLANG_API_KEY") or None
    chosen = resolve_endpoints(endpoints, env, api_key, min(timeout, 30.0))
    out_dir = results_dir(out)  # created and proven writable before the first request
    if options.reference and options.reference not in {e.name for e in chosen}:
        names = ", ".join(e.name for e in chosen)
        raise UserError(f"--reference {options.reference!r}: not one of the endpoints ({names})")
    results = Results(out_dir, metadata(chosen, prompt_set, options, api_key, interleaved=len(chosen) > 1))
    bar = Progress(planned_rounds(options, len(chosen)), enabled=progress)
    bar.line(f"bench: {', '.join(f'{e.name} ({e.url})' for e in chosen)}; results in {out_dir}")
    execute(results, lambda: run_rounds(chosen, prompt_set, options, api_key, results, bar))
    return out_dir


def check_template(template: str | None) -> str | None:
    if not template:
        return None
    if "{prompt}" not in template:
        raise UserError(f"--prompt-template {template!r}: must contain {{prompt}}, where each prompt goes")
    return template


def metadata(endpoints: Sequence[Endpoint], prompt_set: PromptSet, options: Options, api_key: str | None,
             interleaved: bool) -> dict:
    return {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "finished": None,
        "endpoints": [
            {"name": e.name, "url": e.url, "server": server_info(e, api_key, min(options.timeout, 30.0))}
            for e in endpoints
        ],
        "reference": options.reference or default_reference([e.name for e in endpoints]),
        "interleaved": interleaved,
        "prompt_set": {
            "path": str(prompt_set.path),
            "version": prompt_set.version,
            "sha256": prompt_set.sha256,
            "prompts": len(prompt_set.prompts),
        },
        "levels": options.levels,
        "repeats": options.repeats,
        "warmup": options.warmup,
        "sampling": {"temperature": 0.0, "ignore_eos": options.ignore_eos},
        "prompt_template": options.prompt_template,
        "flush_cache": options.flush_cache,
        "timeout_s": options.timeout,
        "host": host_metadata(),
    }


def default_reference(names: Sequence[str]) -> str | None:
    """``baseline`` when it is measured, else the first endpoint."""
    if "baseline" in names:
        return "baseline"
    return names[0] if names else None


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


def compare(paths: Sequence[str | Path], out: str | Path | None = None, reference: str | None = None) -> Path:
    """Combine results of separate runs (one service at a time) into one table and plot.

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
    out_dir = results_dir(out)
    first = docs[0]["metadata"]
    versions = {d["metadata"]["prompt_set"]["sha256"] for d in docs}
    if len(versions) > 1:
        say("bench-compare: warning: the runs used different prompt files; their figures are not comparable")
    meta = {
        "started": min(d["metadata"]["started"] for d in docs),
        "finished": max(d["metadata"].get("finished") or d["metadata"]["started"] for d in docs),
        "endpoints": [e for d in docs for e in d["metadata"]["endpoints"]],
        "reference": reference or default_reference(list(names)),
        "interleaved": False,
        "sources": [str(Path(p)) for p in paths],
        "prompt_set": first["prompt_set"],
        "levels": sorted({lvl for d in docs for lvl in d["metadata"]["levels"]}),
        "repeats": min(d["metadata"]["repeats"] for d in docs),
        "warmup": first.get("warmup"),
        "sampling": first.get("sampling"),
        "prompt_template": first.get("prompt_template"),
        "flush_cache": first.get("flush_cache"),
        "host": first.get("host"),
    }
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
    return out_dir
