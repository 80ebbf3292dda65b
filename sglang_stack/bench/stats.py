"""The arithmetic of a benchmark, pure and exact: distributions, concurrency over a window, acceptance.

Everything here works on plain numbers and the sample dictionaries of bench.json, so
every figure of a report can be recomputed from the raw samples, and each function
can be checked to the digit.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

DEFAULT_PERCENTILES = (50, 90, 95, 99)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100), interpolating between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def distribution(values: Sequence[float], percentiles: Sequence[float] = DEFAULT_PERCENTILES, scale: float = 1.0) -> dict:
    """``{"n", "mean", "std", "p50", ...}`` of ``values`` times ``scale``; the std is the population's, as vLLM reports it."""
    values = [v * scale for v in values if v is not None]
    out: dict = {"n": len(values), "mean": mean(values)}
    out["std"] = math.sqrt(sum((v - out["mean"]) ** 2 for v in values) / len(values)) if values else None
    for q in percentiles:
        out[f"p{q:g}"] = percentile(values, q)
    return out


def tpot(sample: dict) -> float | None:
    """Time per output token after the first: (latency - TTFT) / (tokens - 1), as vLLM and SGLang define it."""
    tokens, ttft, latency = sample.get("output_tokens"), sample.get("ttft_s"), sample.get("latency_s")
    if not tokens or tokens < 2 or ttft is None or latency is None:
        return None
    return (latency - ttft) / (tokens - 1)


def in_flight(intervals: Iterable[tuple[float, float]], start: float, end: float, full: int) -> dict:
    """Time-weighted mean number of requests in flight over ``[start, end]``, and the share of it at ``full`` or more.

    ``intervals`` are each request's (start, end). A request counts from the moment it is
    sent until its last byte arrives; the curve is a step function, integrated exactly.
    """
    if end <= start:
        return {"mean": None, "full_share": None, "window_s": 0.0}
    edges: list[tuple[float, int]] = []
    for a, b in intervals:
        a, b = max(a, start), min(b, end)
        if b > a:
            edges += [(a, 1), (b, -1)]
    edges.sort()
    area = full_time = 0.0
    level, last = 0, start
    for at, step in edges:
        area += level * (at - last)
        full_time += (at - last) if level >= full else 0.0
        level, last = level + step, at
    area += level * (end - last)
    full_time += (end - last) if level >= full else 0.0
    span = end - start
    return {"mean": area / span, "full_share": full_time / span, "window_s": span}


def token_times(sample: dict) -> list[float]:
    """When each output token arrived, in seconds from the round's start, from the sample's TTFT and ITLs.

    The first event's tokens arrive together at ``start + ttft``; each later token at the
    running sum of the inter-token latencies, which split an event's gap evenly over the
    tokens it carried, so every event boundary falls where the event arrived.
    """
    start, ttft = sample.get("round_start_s"), sample.get("ttft_s")
    if start is None or ttft is None:
        return []
    at = start + ttft
    times = [at] * (sample.get("first_chunk_tokens") or 1)
    for gap in sample.get("itl_s") or []:
        at += gap
        times.append(at)
    return times


def tokens_between(samples: Iterable[dict], start: float, end: float) -> int:
    """Output tokens that arrived in ``[start, end]`` (round seconds), over every sample, finished or not."""
    return sum(1 for s in samples for t in token_times(s) if start <= t <= end)


def accept_by_position(histograms: Iterable[Sequence[int]]) -> list[float] | None:
    """P(at least k draft tokens accepted in a verify step), for k = 1, 2, ..., pooled over requests.

    SGLang's ``spec_accept_histogram`` counts, per request, the verify steps that
    accepted 0, 1, 2, ... draft tokens (index = accepted count). Pooled: the histograms are
    summed position by position first, so a long answer weighs by its steps.
    """
    pooled: list[int] = []
    for hist in histograms:
        if not hist:
            continue
        if len(pooled) < len(hist):
            pooled += [0] * (len(hist) - len(pooled))
        for j, count in enumerate(hist):
            pooled[j] += int(count)
    steps = sum(pooled)
    if not steps or len(pooled) < 2:
        return None
    return [sum(pooled[k:]) / steps for k in range(1, len(pooled))]


def parse_slo(text: str | None) -> dict[str, float]:
    """``ttft:500,tpot:50,e2e:20000`` (milliseconds) -> ``{"ttft": 0.5, "tpot": 0.05, "e2e": 20.0}`` in seconds."""
    from sglang_stack.errors import UserError

    out: dict[str, float] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition(":")
        name = name.strip().lower()
        if not sep or name not in ("ttft", "tpot", "e2e", "itl"):
            raise UserError(f"--slo {text!r}: {part!r} is not NAME:MS with NAME one of ttft, tpot, itl, e2e")
        try:
            ms = float(value)
        except ValueError:
            raise UserError(f"--slo {text!r}: {value!r} is not a number of milliseconds") from None
        if ms <= 0:
            raise UserError(f"--slo {text!r}: {name} must be above 0 ms")
        out[name] = ms / 1e3
    return out


def meets(sample: dict, slo: dict[str, float]) -> bool:
    """Whether one finished request met every objective (a figure it lacks fails the objective)."""
    figures = {"ttft": sample.get("ttft_s"), "tpot": tpot(sample), "e2e": sample.get("latency_s"),
               "itl": max(sample.get("itl_s") or [0.0])}
    return all(figures[k] is not None and figures[k] <= limit for k, limit in slo.items())
