"""One bench round, sent by SGLang's own serving benchmark (bench/upstream.py), and the rounds of a run.

**Closed loop** (``--levels N``): SGLang's benchmark holds at most N requests in flight (its ``--max-concurrency``)
over a list that cycles the prompt set: a round sends ``round_size(len(prompts), N)`` requests, every prompt equally
often. The *measured window* runs from the N-th start (all N busy) to the first end after the last start (from then
on fewer than N are in flight: the drain). Requests that finished inside the window are the round's measured
requests; the others are kept, marked ``in_window: false``. Each round records its window, the mean number in flight
over it and the share of it at full concurrency, from every request's start and end as SGLang recorded them.

**Open loop** (``--request-rate R``): SGLang's benchmark sends requests at Poisson arrivals of rate R, whatever the
server's speed, optionally capped at ``--max-concurrency`` in flight. The window is the whole round. The round
records the offered rate and the achieved one.

Several endpoints alternate rounds (A B, then B A) per level and repeat, so a slow minute on a noisy machine hits
both; results are rewritten after every round.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from sglang_stack.bench import report, stats, upstream
from sglang_stack.bench.client import Endpoint, Timing, flush_cache, keep_spec
from sglang_stack.serverapi import RequestFailed
from sglang_stack.bench.display import Progress, say
from sglang_stack.bench.promptset import Prompt, PromptSet
from sglang_stack.bench.targets import Target

MIN_PER_SLOT = 3  # closed loop: requests per slot of the N in flight in a round, so the drain is a small part of it
OPEN_ROUND_S = 30  # open loop: seconds of arrivals in a round


@dataclass(kw_only=True)
class Sample(Timing):
    """One request: where it ran, its ``Timing``, and when.

    ``started_s`` counts from the start of the run; ``round_start_s`` and ``round_end_s``
    from the start of its round (sent, last byte).
    """

    endpoint: str
    level: int
    repeat: int
    round: int
    prompt_id: str
    error: str | None = None
    started_s: float = 0.0
    round_start_s: float | None = None
    round_end_s: float | None = None
    in_window: bool = True


@dataclass
class Options:
    levels: list[int] = field(default_factory=lambda: [1, 4, 16])
    repeats: int = 3
    warmup: int = 2
    timeout: float = 600.0
    ignore_eos: bool = False
    prompt_template: str | None = None
    flush_cache: bool = True
    reference: str | None = None
    target: Target = field(default_factory=Target)
    request_rate: float | None = None
    """Open loop: requests per second (Poisson arrivals); None: closed loop at each level."""
    seed: int = 0
    num_requests: int | None = None
    """Requests per round; None: round_size (closed loop) or open_round_size (open loop)."""
    percentiles: tuple[float, ...] = stats.DEFAULT_PERCENTILES
    slo: dict = field(default_factory=dict)
    benchmark: upstream.Benchmark | None = None
    """SGLang's benchmark, which sends the rounds; started once the prompts are read or made (measure.run, sweep.run)."""


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
            "schema": report.SCHEMA,
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


def round_size(prompts: int, level: int) -> int:
    """Closed loop: requests in a round, a whole number of passes over the prompts, at least MIN_PER_SLOT per slot."""
    if level <= 1:
        return prompts
    return prompts * math.ceil(MIN_PER_SLOT * level / prompts)


def open_round_size(prompts: int, rate: float) -> int:
    """Open loop: a whole number of passes over the prompts, about OPEN_ROUND_S seconds of arrivals (a burst:
    one pass, all at once)."""
    if math.isinf(rate):
        return prompts
    return prompts * max(1, math.ceil(OPEN_ROUND_S * rate / prompts))


def rate_json(rate: float | None) -> float | str | None:
    """A rate as bench.json holds it: JSON has no infinity, so a burst is the string "inf"."""
    return "inf" if rate is not None and math.isinf(rate) else rate


def _flush(endpoint: Endpoint, api_key: str | None, options: Options) -> tuple[bool | None, str | None]:
    if not options.flush_cache:
        return None, None
    ok, why = flush_cache(endpoint, api_key, min(options.timeout, 30.0))
    if not ok:
        say(f"bench: warning: {endpoint.name}: /flush_cache {why}; this round may hit SGLang's prefix cache, "
            "so its TTFT may measure cache hits")
    return ok, why


def run_round(endpoint: Endpoint, prompts: Sequence[Prompt], level: int, repeat: int, options: Options,
              api_key: str | None, results: Results, progress: Progress | None = None, warmup: int = 0) -> dict:
    """One round at concurrency ``level`` (closed loop) or at ``options.request_rate`` capped at ``level`` (open loop),
    sent by SGLang's benchmark (``options.benchmark``), which first sends ``warmup`` unmeasured requests.

    The round's samples, failed ones included, are added to ``results``; the first failure is raised as
    ``RequestFailed``.
    """
    index = len(results.rounds)
    flushed, flush_error = _flush(endpoint, api_key, options)
    open_loop = options.request_rate is not None
    count = options.num_requests or (open_round_size(len(prompts), options.request_rate) if open_loop
                                     else round_size(len(prompts), level))
    work = [prompts[i % len(prompts)] for i in range(count)]
    run_origin = results.elapsed()
    done, (begin, end), wall = sglang_round(endpoint, work, level, repeat, index, run_origin, options, progress,
                                            warmup, bool(flushed))
    for s in done:
        s.in_window = s.round_end_s is not None and s.round_end_s <= end + 1e-9
    results.samples.extend(done)
    record = round_record(index, endpoint.name, level, repeat, done, (begin, end), wall, open_loop, options)
    record.update(cache_flushed=flushed, flush_error=flush_error, run_start_s=round(run_origin, 6))
    results.rounds.append(record)
    failed = next((s for s in done if not s.ok), None)
    if failed is not None:
        raise RequestFailed(f"{endpoint.name} ({endpoint.url}) failed at {describe(level, options)}, repeat {repeat + 1}, "
                            f"prompt {failed.prompt_id}: {failed.error}")
    return record


def sglang_round(endpoint: Endpoint, work: Sequence[Prompt], level: int, repeat: int, index: int, run_origin: float,
                 options: Options, progress: Progress | None, warmup: int,
                 flushed: bool) -> tuple[list[Sample], tuple[float, float], float]:
    """The round sent by SGLang's benchmark; its samples from what SGLang recorded of each request.

    SGLang's closed loop is a semaphore of ``level`` over the whole list, so the window runs from the ``level``-th
    start (all slots busy) to the first end after the last start (the drain begins).
    Its ``warmup`` requests go first, the first of the round's prompts each, so where the cache was ``flushed`` before
    the round SGLang flushes it again after them (its own ``flush_cache``), or the round's first request would find
    its prompt cached.
    """
    open_loop = options.request_rate is not None
    waves = math.ceil(len(work) / level) if level else 1
    try:
        answer = options.benchmark.round({
            "base_url": endpoint.url, "backend": upstream.BACKENDS[options.target.api], "model": options.target.model,
            "rows": [sglang_row(p, options.prompt_template) for p in work], "max_concurrency": level or None,
            "request_rate": rate_json(options.request_rate) if open_loop else "inf", "warmup": warmup,
            "ignore_eos": options.ignore_eos, "stream": options.target.stream, "seed": options.seed + index,
            "timeout": options.timeout * waves, "flush_cache": flushed and warmup > 0})
    except RequestFailed as err:  # the round did not run: no request to name
        raise RequestFailed(f"{endpoint.name} ({endpoint.url}) failed at {describe(level, options)}, repeat "
                            f"{repeat + 1}: {err}") from None
    outputs = answer["outputs"]
    origin = min(o["start_time"] for o in outputs)
    done = []
    for prompt, out in zip(work, outputs):
        start, ok = out["start_time"] - origin, bool(out["success"])
        sample = Sample(
            endpoint=endpoint.name, level=level, repeat=repeat, round=index, prompt_id=prompt.id, ok=ok,
            error=None if ok else (out["error"] or "failed, with no error recorded"),
            latency_s=out["latency"] if ok else None, output_tokens=int(out["output_len"]) if ok else None,
            token_source=out.get("counted") or "server",
            started_s=run_origin + start, round_start_s=start, round_end_s=start + (out["latency"] if ok else 0.0))
        if ok:
            try:
                keep_spec(sample, out.get("spec") or {})
            except RequestFailed as err:
                sample.ok, sample.error = False, str(err)
        if sample.ok and options.target.stream:  # one answer, unstreamed: no first token to time
            stamps = list(itertools.accumulate(out["itl"], initial=out["ttft"]))
            if options.target.api == "native":  # SGLang split each step's gap over the tokens it added
                first = sample.output_tokens - len(out["itl"])
                sample.time_events([(at, first + i) for i, at in enumerate(stamps)])
            else:  # its OpenAI clients keep one gap per chunk, whatever the chunk carried
                sample.time_chunks(stamps, sample.output_tokens)
        done.append(sample)
    if progress:
        progress.request_done(endpoint.name, len(done), len(done), sum(s.output_tokens or 0 for s in done),
                              max(s.round_end_s for s in done))
    starts = sorted(s.round_start_s for s in done)
    ends = sorted(s.round_end_s for s in done if s.ok)
    wall = max([*ends, *starts])
    if open_loop:
        return done, (0.0, wall), wall
    begin = starts[level - 1] if len(starts) >= level else 0.0
    end = next((e for e in ends if e > starts[-1]), wall)
    return done, (begin, end), wall


def sglang_row(prompt: Prompt, template: str | None) -> dict:
    """What SGLang's benchmark sends for ``prompt``: its text (``template`` applied) or token ids; the length in
    tokens is SGLang's own count where ours is unknown."""
    ids = getattr(prompt, "input_ids", None)
    if ids and not template:
        return {"prompt": list(ids), "prompt_len": len(ids), "output_len": prompt.max_new_tokens}
    text = template.replace("{prompt}", prompt.prompt) if template else prompt.prompt
    return {"prompt": text, "prompt_len": None, "output_len": prompt.max_new_tokens}


def describe(level: int, options: Options) -> str:
    if options.request_rate is None:
        return f"concurrency {level}"
    rate = "a burst" if math.isinf(options.request_rate) else f"{options.request_rate:g} req/s"
    return rate + (f" (at most {level} in flight)" if level else "")


def round_record(index: int, endpoint: str, level: int, repeat: int, done: Sequence[Sample], window: tuple[float, float],
                 wall: float, open_loop: bool, options: Options) -> dict:
    """What a round measured, from its samples alone: window, concurrency, throughput, rates."""
    rows = [asdict(s) for s in done]
    begin, end = window
    measured = [s for s in rows if s["ok"] and s["in_window"]]
    load = stats.in_flight([(s["round_start_s"], s["round_end_s"]) for s in rows], begin, end, level or len(rows))
    tokens = stats.tokens_between(rows, begin, end)
    all_ok = all(s["ok"] for s in rows)
    record = {
        "index": index,
        "endpoint": endpoint,
        "level": level,
        "repeat": repeat,
        "mode": "open" if open_loop else "closed",
        "wall_s": round(wall, 6),
        "window_s": [round(begin, 6), round(end, 6)],
        "requests": len(rows),
        "measured": len(measured),
        "ok": sum(1 for s in rows if s["ok"]),
        "output_tokens": sum(s["output_tokens"] or 0 for s in rows if s["ok"]),
        "window_tokens": tokens,
        # Tokens that arrived in the window over the window: ramp-up and drain excluded.
        "aggregate_tps": tokens / (end - begin) if end > begin and all_ok else None,
        "mean_in_flight": load["mean"],
        "full_share": load["full_share"],
    }
    if open_loop:
        starts = sorted(s["round_start_s"] for s in rows)
        record["offered_rate"] = rate_json(options.request_rate)
        record["sent_rate"] = (len(starts) - 1) / (starts[-1] - starts[0]) if len(starts) > 1 and starts[-1] > starts[0] else None
        record["achieved_rate"] = len(measured) / wall if wall > 0 else None
        if options.slo:
            good = [s for s in measured if stats.meets(s, options.slo)]
            record["goodput_rate"] = len(good) / wall if wall > 0 else None
    return record


def round_order(endpoints: Sequence[Endpoint], repeat: int) -> list[Endpoint]:
    """A B on even repeats, B A on odd ones: neither side always runs first."""
    return list(endpoints) if repeat % 2 == 0 else list(reversed(endpoints))


def run_rounds(endpoints: Sequence[Endpoint], prompt_set: PromptSet, options: Options, api_key: str | None,
               results: Results, progress: Progress | None = None) -> None:
    """For each level and repeat, one round per endpoint, interleaved; each endpoint's first round warms it up first
    (SGLang's benchmark sends ``options.warmup`` unmeasured requests)."""
    progress = progress or Progress(0, enabled=False)
    cold = {endpoint.name for endpoint in endpoints}
    for level in options.levels:
        for repeat in range(options.repeats):
            for endpoint in round_order(endpoints, repeat):
                before = len(results.rounds)
                warmup = options.warmup if endpoint.name in cold else 0
                cold.discard(endpoint.name)
                try:
                    run_round(endpoint, prompt_set.prompts, level, repeat, options, api_key, results, progress, warmup)
                finally:
                    results.write()
                    if len(results.rounds) > before:
                        progress.round_done(results.rounds[-1], options.repeats)


def planned_rounds(options: Options, endpoints: int) -> int:
    return len(options.levels) * options.repeats * endpoints
