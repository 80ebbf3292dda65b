"""Benchmark results: summary statistics, the Markdown table, and the files on disk.

``summarize`` works from the raw samples and rounds alone, so a results file
can be summarised again (``invoke bench-compare``) and the table and plot
always say what the JSON says. Every file is written to a temporary name and
renamed into place: a reader never sees half a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Sequence

from sglang_stack import atomic
from sglang_stack.bench import stats
from sglang_stack.bench.stats import mean, percentile
from sglang_stack.errors import UserError, read_text

JSON_NAME = "bench.json"
MARKDOWN_NAME = "bench.md"
PLOT_NAME = "bench.png"
SCHEMA = 2
SCHEMAS = (1, 2)  # 1: before per-request windows, every spec_* field and provenance; still read

# --- statistics ----------------------------------------------------------------


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _spread(values: Sequence[float]) -> float | None:
    return max(values) - min(values) if len(values) > 1 else None


def summarize_group(samples: Sequence[dict], rounds: Sequence[dict], percentiles: Sequence[float] = stats.DEFAULT_PERCENTILES) -> dict:
    """Figures for one endpoint at one level, from the requests inside each round's measured window."""
    ok = [s for s in samples if s["ok"] and s.get("in_window", True)]
    itl = [x for s in ok for x in s["itl_s"]]
    ttft = [s["ttft_s"] for s in ok if s["ttft_s"] is not None]
    latency = [s["latency_s"] for s in ok if s["latency_s"] is not None]
    decode = [s["decode_tps"] for s in ok if s["decode_tps"] is not None]
    tpots = [t for t in (stats.tpot(s) for s in ok) if t is not None]
    complete_rounds = [r for r in rounds if r.get("aggregate_tps") is not None]
    aggregate = [r["aggregate_tps"] for r in complete_rounds]
    # Verify passes per request: SGLang's count, or, where only the accept length came back (SGLang's benchmark
    # keeps nothing else of meta_info), the count it implies: accept length = output tokens / verify passes.
    passes = {id(s): s.get("spec_verify_ct") or (s["output_tokens"] / s["spec_accept_length"]
                                                 if s.get("spec_accept_length") else 0) for s in ok}
    spec = [s for s in ok if passes[id(s)]]
    verify = sum(passes[id(s)] for s in spec)
    drafted = sum(s.get("spec_draft_token_num") or 0 for s in spec)
    accepted = sum(s.get("spec_accept_token_num") or 0 for s in spec)
    flushes = [r.get("cache_flushed") for r in rounds if r.get("cache_flushed") is not None]
    loads = [r["mean_in_flight"] for r in complete_rounds if r.get("mean_in_flight") is not None]
    full = [r["full_share"] for r in complete_rounds if r.get("full_share") is not None]
    row = {
        "requests": len(ok),
        "failed": sum(1 for s in samples if not s["ok"]),
        "drain_requests": sum(1 for s in samples if s["ok"] and not s.get("in_window", True)),
        "rounds": len(complete_rounds),
        "output_tokens": sum(s["output_tokens"] for s in ok),
        "token_source": sorted({s.get("token_source", "server") for s in ok}),
        "mean_in_flight": mean(loads),
        "full_share": mean(full),
        "decode_tps_mean": mean(decode),
        "decode_tps_p50": percentile(decode, 50),
        "aggregate_tps_mean": mean(aggregate),
        "aggregate_tps_min": min(aggregate) if aggregate else None,
        "aggregate_tps_max": max(aggregate) if aggregate else None,
        "aggregate_tps_spread": _spread(aggregate),
        "ttft_ms_p50": _scaled(percentile(ttft, 50), 1e3),
        "ttft_ms_p99": _scaled(percentile(ttft, 99), 1e3),
        "itl_ms_p50": _scaled(percentile(itl, 50), 1e3),
        "itl_ms_p99": _scaled(percentile(itl, 99), 1e3),
        "latency_s_p50": percentile(latency, 50),
        "latency_s_p99": percentile(latency, 99),
        # As the field reports them (vLLM, SGLang's bench_serving, AIPerf): mean, std, percentiles.
        "ttft_ms": stats.distribution(ttft, percentiles, 1e3),
        "tpot_ms": stats.distribution(tpots, percentiles, 1e3),
        "itl_ms": stats.distribution(itl, percentiles, 1e3),
        "e2e_s": stats.distribution(latency, percentiles),
        "decode_tps": stats.distribution(decode, percentiles),
        # SGLang's own definition, pooled: all output tokens over all verify passes
        # (both from meta_info). The per-request mean weights short answers like long ones.
        "accept_length": sum(s["output_tokens"] for s in spec) / verify if verify else None,
        "accept_length_request_mean": mean([s["spec_accept_length"] for s in spec if s.get("spec_accept_length")]),
        "accept_rate": accepted / drafted if drafted else None,
        "accept_by_position": stats.accept_by_position(s.get("spec_accept_histogram") for s in spec),
        "spec_requests": len(spec),
        "cache_flushed": f"{sum(1 for f in flushes if f)}/{len(flushes)}" if flushes else None,
    }
    open_rounds = [r for r in rounds if r.get("mode") == "open"]
    if open_rounds:
        for key in ("offered_rate", "sent_rate", "achieved_rate", "goodput_rate"):
            values = [r[key] for r in open_rounds if r.get(key) is not None]
            row[key] = "inf" if "inf" in values else mean(values)  # a burst (rounds.rate_json)
    return row


def summarize(doc: dict) -> dict:
    """Rows per endpoint and level, and each endpoint's ratio to the reference."""
    meta = doc["metadata"]
    names = [e["name"] for e in meta["endpoints"]]
    rows = []
    for name in names:
        for level in meta["levels"]:
            samples = [s for s in doc["samples"] if s["endpoint"] == name and s["level"] == level]
            if not any(s["ok"] for s in samples):
                continue
            rounds = [r for r in doc["rounds"] if r["endpoint"] == name and r["level"] == level]
            rows.append({"endpoint": name, "level": level,
                         **summarize_group(samples, rounds, meta.get("percentiles") or stats.DEFAULT_PERCENTILES)})
    reference = meta.get("reference")
    return {
        "reference": reference,
        "interleaved": meta.get("interleaved", False),
        "rows": rows,
        "ratios": ratios(rows, doc["rounds"], reference, names),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def ratios(rows: Sequence[dict], rounds: Sequence[dict], reference: str | None, names: Sequence[str]) -> list[dict]:
    """Each endpoint over the reference, per level.

    ``paired_aggregate`` divides the rounds that ran next to each other (same
    level and repeat); with interleaved rounds this cancels most of a noisy
    machine's drift, and its spread shows how much is left.
    """
    by_key = {(r["endpoint"], r["level"]): r for r in rows}
    out = []
    for name in names:
        if name == reference:
            continue
        for (endpoint, level), row in by_key.items():
            if endpoint != name or (reference, level) not in by_key:
                continue
            ref = by_key[(reference, level)]
            pairs = []
            mine = {r["repeat"]: r for r in rounds if r["endpoint"] == name and r["level"] == level}
            theirs = {r["repeat"]: r for r in rounds if r["endpoint"] == reference and r["level"] == level}
            for repeat in sorted(set(mine) & set(theirs)):
                value = _ratio(mine[repeat].get("aggregate_tps"), theirs[repeat].get("aggregate_tps"))
                if value is not None:
                    pairs.append(value)
            out.append(
                {
                    "endpoint": name,
                    "reference": reference,
                    "level": level,
                    "decode_tps_p50": _ratio(row["decode_tps_p50"], ref["decode_tps_p50"]),
                    "aggregate_tps": _ratio(row["aggregate_tps_mean"], ref["aggregate_tps_mean"]),
                    "itl_ms_p50": _ratio(row["itl_ms_p50"], ref["itl_ms_p50"]),
                    "paired_aggregate": {
                        "pairs": len(pairs),
                        "values": pairs,  # by repeat: what the verdict's interval is taken over (bench/pays.py)
                        "median": percentile(pairs, 50),
                        "min": min(pairs) if pairs else None,
                        "max": max(pairs) if pairs else None,
                    },
                }
            )
    return out


# --- Markdown ------------------------------------------------------------------

# (heading, row key, decimals): the table the tests read back. A key with a dot reaches into a distribution.
COLUMNS = (
    ("endpoint", "endpoint", None),
    ("concurrency", "level", None),
    ("in flight", "mean_in_flight", 1),
    ("requests", "requests", None),
    ("decode tok/s p50", "decode_tps_p50", 1),
    ("aggregate tok/s", "aggregate_tps_mean", 1),
    ("spread", "aggregate_tps_spread", 1),
    ("TTFT p50 (ms)", "ttft_ms_p50", 1),
    ("TTFT p99 (ms)", "ttft_ms_p99", 1),
    ("TPOT p50 (ms)", "tpot_ms.p50", 2),
    ("ITL p50 (ms)", "itl_ms_p50", 2),
    ("ITL p99 (ms)", "itl_ms_p99", 2),
    ("latency p50 (s)", "latency_s_p50", 2),
    ("latency p99 (s)", "latency_s_p99", 2),
    ("accept length", "accept_length", 2),
    ("cache flushed", "cache_flushed", None),
)


def value(row: dict, key: str):
    """``row[key]``, or a distribution's figure for ``name.stat``."""
    head, _, tail = key.partition(".")
    got = row.get(head)
    return (got or {}).get(tail) if tail else got


def fmt(value, decimals: int | None) -> str:
    if value is None:
        return "-"
    if decimals is None or isinstance(value, str):
        return str(value)
    return f"{value:.{decimals}f}"


def _table(headings: Sequence[str], rows: Iterable[Sequence[str]], right_from: int = 1) -> list[str]:
    lines = ["| " + " | ".join(headings) + " |"]
    lines.append("|" + "|".join("---" if i < right_from else "---:" for i in range(len(headings))) + "|")
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _server_line(endpoint: dict) -> str:
    info = endpoint.get("server") or {}
    bits = [f"`{endpoint['url']}`"]
    if info.get("version"):
        bits.append(f"SGLang {info['version']}")
    if info.get("model_path"):
        bits.append(str(info["model_path"]))
    if info.get("tp_size"):
        bits.append(f"TP {info['tp_size']}")
    if info.get("speculative_algorithm"):
        bits.append(
            f"{info['speculative_algorithm']} steps {info.get('speculative_num_steps')}, "
            f"topk {info.get('speculative_eagle_topk')}, draft tokens {info.get('speculative_num_draft_tokens')}"
        )
    return f"- **{endpoint['name']}**: " + ", ".join(bits)


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def prompt_set_label(ps: dict) -> str:
    """What the prompts were, in a few words: the report's line and the plot's title say it."""
    kind = ps.get("kind", "jsonl")
    if kind == "jsonl":
        return f"prompt set v{ps['version']}"
    if kind == "speed-bench":
        category = (ps.get("made") or {}).get("category")
        return f"SPEED-Bench{' ' + category if category else ''} prompts, chat-templated by SGLang's adapter"
    return f"{kind} prompts"


def generator(meta: dict) -> dict:
    """Who sent a run's requests (bench.json ``metadata.load.generator``); results files from before it was recorded
    were measured by the checkout's own client, named ``builtin``."""
    return (meta.get("load") or {}).get("generator") or {"name": "builtin"}


def markdown(doc: dict) -> str:
    meta, summary = doc["metadata"], doc["summary"]
    lines = ["# sglang-stack bench", ""]
    if not doc["complete"]:
        why = doc.get("error") or "the run did not finish"
        lines += [f"**INCOMPLETE**: {why}. Only the rounds below were measured.", ""]
    lines += [_server_line(e) for e in meta["endpoints"]]
    ps = meta["prompt_set"]
    sampling = meta.get("sampling") or {}
    lines += [
        f"- {prompt_set_label(ps)} ({ps['prompts']} prompts, sha256 {ps['sha256'][:12]}), greedy, "
        f"ignore_eos {'on' if sampling.get('ignore_eos') else 'off'}",
        f"- concurrency {', '.join(map(str, meta['levels']))}; {meta['repeats']} measured repeats"
        f" after {meta.get('warmup', 0)} warm-up requests per endpoint; rounds "
        + ("interleaved" if meta.get("interleaved") else "not interleaved"),
        f"- started {meta['started']}, finished {meta.get('finished') or '-'}",
        *([f"- sent by SGLang's own serving benchmark ({made['module']} {made['sglang']}, {made['where']})"
           + (f", tokenizer {made['tokenizer']}" if made.get("tokenizer") else "")]
          if (made := generator(meta))["name"] == "sglang" else []),
        "",
    ]
    lines += _table(
        [c[0] for c in COLUMNS],
        ([fmt(value(row, key), dec) for _, key, dec in COLUMNS] for row in summary["rows"]),
    )
    closed = (meta.get("load") or {}).get("mode", "closed") == "closed"
    lines += [
        "",
        ("concurrency N: N requests in flight; each round cycles the prompts and is measured from the moment all N "
         "are in flight until the first end after the last start (the drain after it is not measured); "
         if closed else "open loop: requests sent at the arrival times, the whole round measured; concurrency is "
         "the cap on requests in flight (0: none); ")
        + "in flight: the time-weighted mean over that window; "
        "decode tok/s: per request, output tokens after the first over the time from the first to the last; "
        "aggregate tok/s: output tokens that arrived in the window over its length (mean of rounds; spread: "
        "max - min); TPOT: (latency - TTFT) / (tokens - 1); accept length: SGLang's completion_tokens / "
        "spec_verify_ct, pooled over requests.",
    ]
    sources = sorted({src for row in summary["rows"] for src in row.get("token_source") or []})
    if sources and sources != ["server"]:
        lines += ["", "Token counts came from: " + ", ".join(sources) + " (chunks: one per streamed chunk, an estimate, "
                  "because the target sent no usage; requested: the length asked for, which SGLang's OpenAI clients "
                  "count where no chunk carries usage, so an answer that ended at its EOS counts too many: measure "
                  "such a server with --ignore-eos)."]
    lines += ["", *latency_markdown(summary["rows"], meta.get("percentiles") or stats.DEFAULT_PERCENTILES)]
    if any(row.get("accept_length") for row in summary["rows"]):
        lines += ["", *acceptance_markdown(summary["rows"])]
    if not closed:
        lines += ["", *open_loop_markdown(summary["rows"], meta)]
    by_pair: dict[tuple[str, str], list[dict]] = {}
    for ratio in summary["ratios"]:
        by_pair.setdefault((ratio["endpoint"], ratio["reference"]), []).append(ratio)
    for (name, reference), items in by_pair.items():
        lines += ["", f"## {name} / {reference}", ""]
        rows = []
        for r in items:
            paired = r["paired_aggregate"]
            spread = (
                f"{_x(paired['median'])} ({paired['min']:.2f}-{paired['max']:.2f}, {paired['pairs']} pairs)"
                if paired["pairs"]
                else "-"
            )
            rows.append([str(r["level"]), _x(r["decode_tps_p50"]), _x(r["aggregate_tps"]), _x(r["itl_ms_p50"]), spread])
        paired = "aggregate, paired rounds" if summary["interleaved"] else "aggregate, by repeat (not paired)"
        headings = ["concurrency", "decode tok/s p50", "aggregate tok/s", "ITL p50", paired]
        lines += _table(headings, rows)
        if not summary["interleaved"]:
            apart = meta.get("apart_s")
            when = f", taken {_duration(apart)} apart" if apart is not None else ""
            lines += ["", f"These runs were not interleaved{when}: the ratio includes any drift of the machine "
                          "between them, and their rounds are not pairs."]
    if doc.get("sweep"):
        lines += ["", *sweep_markdown(doc["sweep"], summary)]
    return "\n".join(lines) + "\n"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def latency_markdown(rows: Sequence[dict], percentiles: Sequence[float]) -> list[str]:
    """TTFT, TPOT, ITL (ms) and E2E (s): mean, std and the percentiles, per row."""
    stats_names = ["mean", "std", *(f"p{q:g}" for q in percentiles)]
    lines = ["## Latency", ""]
    table = []
    for row in rows:
        for key, label, decimals in (("ttft_ms", "TTFT (ms)", 1), ("tpot_ms", "TPOT (ms)", 2), ("itl_ms", "ITL (ms)", 2),
                                     ("e2e_s", "E2E (s)", 3)):
            dist = row.get(key) or {}
            table.append([row["endpoint"], str(row["level"]), label, *(fmt(dist.get(n), decimals) for n in stats_names)])
    return lines + _table(["endpoint", "concurrency", "figure", *stats_names], table, right_from=3)


def acceptance_markdown(rows: Sequence[dict]) -> list[str]:
    """Accept length and rate, and P(at least k draft tokens accepted) per draft position k."""
    width = max((len(r.get("accept_by_position") or []) for r in rows), default=0)
    lines = ["## Acceptance", ""]
    table = []
    for row in rows:
        if not row.get("accept_length"):
            continue
        by_position = row.get("accept_by_position") or []
        table.append([row["endpoint"], str(row["level"]), fmt(row["accept_length"], 2),
                      fmt(row.get("accept_length_request_mean"), 2), fmt(row.get("accept_rate"), 3),
                      *(fmt(by_position[k], 3) if k < len(by_position) else "-" for k in range(width))])
    headings = ["endpoint", "concurrency", "accept length", "per-request mean", "accept rate",
                *(f"P(>={k + 1})" for k in range(width))]
    lines += _table(headings, table)
    lines += ["", "accept rate: accepted draft tokens over drafted ones (spec_accept_token_num / spec_draft_token_num); "
              "P(>=k): the share of verify steps that accepted at least k draft tokens, from spec_accept_histogram. "
              "Where it falls low, another draft step costs more than it returns."]
    return lines


def open_loop_markdown(rows: Sequence[dict], meta: dict) -> list[str]:
    load = meta.get("load") or {}
    lines = ["## Arrivals", "",
             f"Offered {load.get('request_rate'):g} req/s, burstiness {load.get('burstiness'):g} "
             f"({'Poisson' if load.get('burstiness') == 1 else 'gamma'} arrivals, seed {load.get('seed')})."
             if load.get("request_rate") != "inf" else "Offered a burst: every request of a round sent at its start "
             "(--request-rate inf)."]
    slo = meta.get("slo_s") or {}
    if slo:
        lines[-1] += " Goodput: requests per second that met " + ", ".join(f"{k} <= {v * 1e3:g} ms" for k, v in slo.items()) + "."
    lines += [""]
    table = [[r["endpoint"], str(r["level"]), fmt(r.get("offered_rate"), 2), fmt(r.get("sent_rate"), 2),
              fmt(r.get("achieved_rate"), 2), fmt(r.get("goodput_rate"), 2)] for r in rows]
    return lines + _table(["endpoint", "cap", "offered req/s", "sent req/s", "achieved req/s", "goodput req/s"], table)


def sweep_markdown(sweep: dict, summary: dict) -> list[str]:
    level = sweep["level"]
    rows_by_label = {r["endpoint"]: r for r in summary["rows"] if r["level"] == level}
    lines = [f"## Sweep of {sweep['service']} (ranked by aggregate tok/s at concurrency {level})", ""]
    rows = []
    for point in sweep["points"]:
        row = rows_by_label.get(point["label"], {})
        by_position = row.get("accept_by_position") or []
        last = by_position[point["steps"] - 1] if 0 < point["steps"] <= len(by_position) else None
        status = "best" if sweep.get("best") == point["label"] else (point.get("error") or "ok")
        rows.append(
            [
                point["label"],
                str(point["steps"]),
                str(point["topk"]),
                str(point["draft_tokens"]),
                fmt(row.get("aggregate_tps_mean"), 1),
                fmt(row.get("aggregate_tps_spread"), 1),
                fmt(row.get("decode_tps_p50"), 1),
                fmt(row.get("accept_length"), 2),
                fmt(last, 3),
                status.replace("|", "/").replace("\n", " ")[:160],
            ]
        )
    lines += _table(
        ["setting", "steps", "topk", "draft tokens", "aggregate tok/s", "spread", "decode tok/s p50", "accept length",
         "P(last step accepted)", "status"],
        rows,
    )
    lines += ["", "spread: max - min of the rounds' aggregate tok/s; settings whose difference is within the "
              "spread are a tie. P(last step accepted): the share of verify steps that accepted a token from the "
              "last draft step (spec_accept_histogram): low, and that step costs more than it returns."]
    best = next((p for p in sweep["points"] if p["label"] == sweep.get("best")), None)
    if best:
        row = rows_by_label.get(best["label"], {})
        ties = [p["label"] for p in sweep["points"] if p is not best and _within_spread(rows_by_label.get(p["label"]), row)]
        why = (f"Best: {best['label']}" + (f"; within its spread: {', '.join(ties)} (a tie: the fewer draft tokens, "
               "the more headroom under load)" if ties else "") + ".")
        lines += [
            "",
            why,
            "To keep it, put these lines in `.env`:",
            "",
            "```",
            f"SGLANG_SPEC_NUM_STEPS={best['steps']}",
            f"SGLANG_SPEC_EAGLE_TOPK={best['topk']}",
            f"SGLANG_SPEC_NUM_DRAFT_TOKENS={best['draft_tokens']}",
            "```",
        ]
    failed = [p for p in sweep["points"] if p.get("log_tail")]
    for point in failed:
        lines += ["", f"{point['label']} failed; the last lines of its log:", "", "```", point["log_tail"], "```"]
    return lines


def _within_spread(row: dict | None, best: dict) -> bool:
    if not row or row.get("aggregate_tps_mean") is None or best.get("aggregate_tps_mean") is None:
        return False
    spread = max(best.get("aggregate_tps_spread") or 0.0, row.get("aggregate_tps_spread") or 0.0)
    return abs(best["aggregate_tps_mean"] - row["aggregate_tps_mean"]) <= spread


# --- files ---------------------------------------------------------------------


def write_results(out_dir: Path, doc: dict, plot: bool = False) -> None:
    """bench.json and bench.md, and with ``plot`` bench.png: the set whole or not at all (a full disk
    leaves the previous set as it was); URL credentials and known secrets are masked first."""
    from sglang_stack.services.variables import redactor

    doc = json.loads(redactor().text(json.dumps(doc, default=str)))
    files = {}
    if plot:
        from sglang_stack.bench import plot as plotting

        files[out_dir / PLOT_NAME] = plotting.png(doc)
    files[out_dir / MARKDOWN_NAME] = markdown(doc).encode()
    files[out_dir / JSON_NAME] = (json.dumps(doc, indent=1, default=str) + "\n").encode()
    atomic.write_all(files)


def load_results(path: Path) -> dict:
    """A ``bench.json`` (or the directory holding it), checked for the fields ``summarize`` reads."""
    file = path / JSON_NAME if path.is_dir() else path
    try:
        doc = json.loads(read_text(file, " (pass a results directory written by invoke bench)", limit=1 << 30))
    except ValueError as err:
        raise UserError(f"{file}: not valid JSON: {err}") from None
    if not isinstance(doc, dict) or doc.get("schema") not in SCHEMAS:
        raise UserError(f"{file}: not a bench results file of schema {' or '.join(map(str, SCHEMAS))}")
    for key in ("metadata", "samples", "rounds", "complete"):
        if key not in doc:
            raise UserError(f"{file}: missing {key!r}; was it written by invoke bench?")
    return doc
