"""Benchmark results: summary statistics, the Markdown table, and the files on disk.

``summarize`` works from the raw samples and rounds alone, so a results file
can be summarised again (``invoke bench-compare``) and the table and plot
always say what the JSON says. Every file is written to a temporary name and
renamed into place: a reader never sees half a file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Iterable, Sequence

from sglang_stack import atomic
from sglang_stack.errors import UserError, read_text

JSON_NAME = "bench.json"
MARKDOWN_NAME = "bench.md"
PLOT_NAME = "bench.png"
SCHEMA = 1


# --- statistics ----------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100), interpolating between closest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def summarize_group(samples: Sequence[dict], rounds: Sequence[dict]) -> dict:
    """Figures for one endpoint at one concurrency level."""
    ok = [s for s in samples if s["ok"]]
    itl = [x for s in ok for x in s["itl_s"]]
    ttft = [s["ttft_s"] for s in ok if s["ttft_s"] is not None]
    latency = [s["latency_s"] for s in ok if s["latency_s"] is not None]
    decode = [s["decode_tps"] for s in ok if s["decode_tps"] is not None]
    complete_rounds = [r for r in rounds if r.get("aggregate_tps") is not None]
    aggregate = [r["aggregate_tps"] for r in complete_rounds]
    spec = [s for s in ok if s.get("spec_verify_ct")]
    verify = sum(s["spec_verify_ct"] for s in spec)
    return {
        "requests": len(ok),
        "failed": len(samples) - len(ok),
        "rounds": len(complete_rounds),
        "output_tokens": sum(s["output_tokens"] for s in ok),
        "decode_tps_mean": mean(decode),
        "decode_tps_p50": percentile(decode, 50),
        "aggregate_tps_mean": mean(aggregate),
        "aggregate_tps_min": min(aggregate) if aggregate else None,
        "aggregate_tps_max": max(aggregate) if aggregate else None,
        "ttft_ms_p50": _scaled(percentile(ttft, 50), 1e3),
        "ttft_ms_p99": _scaled(percentile(ttft, 99), 1e3),
        "itl_ms_p50": _scaled(percentile(itl, 50), 1e3),
        "itl_ms_p99": _scaled(percentile(itl, 99), 1e3),
        "latency_s_p50": percentile(latency, 50),
        "latency_s_p99": percentile(latency, 99),
        # SGLang's own definition, pooled: all output tokens over all verify passes
        # (both from meta_info). The per-request mean weights short answers like long ones.
        "accept_length": sum(s["output_tokens"] for s in spec) / verify if verify else None,
        "accept_length_request_mean": mean([s["spec_accept_length"] for s in spec if s.get("spec_accept_length")]),
        "spec_requests": len(spec),
    }


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
            rows.append({"endpoint": name, "level": level, **summarize_group(samples, rounds)})
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
                        "median": percentile(pairs, 50),
                        "min": min(pairs) if pairs else None,
                        "max": max(pairs) if pairs else None,
                    },
                }
            )
    return out


# --- Markdown ------------------------------------------------------------------

# (heading, row key, decimals): the table the tests read back.
COLUMNS = (
    ("endpoint", "endpoint", None),
    ("concurrency", "level", None),
    ("requests", "requests", None),
    ("decode tok/s p50", "decode_tps_p50", 1),
    ("aggregate tok/s", "aggregate_tps_mean", 1),
    ("TTFT p50 (ms)", "ttft_ms_p50", 1),
    ("TTFT p99 (ms)", "ttft_ms_p99", 1),
    ("ITL p50 (ms)", "itl_ms_p50", 2),
    ("ITL p99 (ms)", "itl_ms_p99", 2),
    ("latency p50 (s)", "latency_s_p50", 2),
    ("latency p99 (s)", "latency_s_p99", 2),
    ("accept length", "accept_length", 2),
)


def fmt(value, decimals: int | None) -> str:
    if value is None:
        return "-"
    if decimals is None:
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
        f"- prompt set v{ps['version']} ({ps['prompts']} prompts, sha256 {ps['sha256'][:12]}), greedy, "
        f"ignore_eos {'on' if sampling.get('ignore_eos') else 'off'}",
        f"- concurrency {', '.join(map(str, meta['levels']))}; {meta['repeats']} measured repeats"
        f" after {meta.get('warmup', 0)} warm-up requests per endpoint; rounds "
        + ("interleaved" if meta.get("interleaved") else "not interleaved"),
        f"- started {meta['started']}, finished {meta.get('finished') or '-'}",
        "",
    ]
    lines += _table(
        [c[0] for c in COLUMNS],
        ([fmt(row[key], dec) for _, key, dec in COLUMNS] for row in summary["rows"]),
    )
    lines += [
        "",
        "decode tok/s: per request, output tokens after the first over the time from the first to the last; "
        "aggregate tok/s: all output tokens of a round over its wall time (mean of rounds); "
        "accept length: SGLang's completion_tokens / spec_verify_ct, pooled over requests.",
    ]
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
        headings = ["concurrency", "decode tok/s p50", "aggregate tok/s", "ITL p50", "aggregate, paired rounds"]
        lines += _table(headings, rows)
        if not summary["interleaved"]:
            lines += ["", "These runs were not interleaved: the ratio includes any drift of the machine between them."]
    if doc.get("sweep"):
        lines += ["", *sweep_markdown(doc["sweep"], summary)]
    return "\n".join(lines) + "\n"


def sweep_markdown(sweep: dict, summary: dict) -> list[str]:
    level = sweep["level"]
    rows_by_label = {r["endpoint"]: r for r in summary["rows"] if r["level"] == level}
    lines = [f"## Sweep of {sweep['service']} (ranked by aggregate tok/s at concurrency {level})", ""]
    rows = []
    for point in sweep["points"]:
        row = rows_by_label.get(point["label"], {})
        rows.append(
            [
                point["label"],
                str(point["steps"]),
                str(point["topk"]),
                str(point["draft_tokens"]),
                fmt(row.get("aggregate_tps_mean"), 1),
                fmt(row.get("decode_tps_p50"), 1),
                fmt(row.get("accept_length"), 2),
                "best" if sweep.get("best") == point["label"] else (point.get("error") or "ok"),
            ]
        )
    lines += _table(
        ["setting", "steps", "topk", "draft tokens", "aggregate tok/s", "decode tok/s p50", "accept length", "status"],
        rows,
    )
    best = next((p for p in sweep["points"] if p["label"] == sweep.get("best")), None)
    if best:
        lines += [
            "",
            "Best setting; to keep it, put these lines in `.env`:",
            "",
            "```",
            f"SGLANG_SPEC_NUM_STEPS={best['steps']}",
            f"SGLANG_SPEC_EAGLE_TOPK={best['topk']}",
            f"SGLANG_SPEC_NUM_DRAFT_TOKENS={best['draft_tokens']}",
            "```",
        ]
    return lines


# --- files ---------------------------------------------------------------------


def write_results(out_dir: Path, doc: dict, plot: bool = False) -> None:
    """bench.json and bench.md, and with ``plot`` bench.png; the JSON goes last."""
    if plot:
        from sglang_stack.bench import plot as plotting

        atomic.write(out_dir / PLOT_NAME, plotting.png(doc))
    atomic.write(out_dir / MARKDOWN_NAME, markdown(doc).encode())
    atomic.write(out_dir / JSON_NAME, (json.dumps(doc, indent=1, default=str) + "\n").encode())


def load_results(path: Path) -> dict:
    """A ``bench.json`` (or the directory holding it), checked for the fields ``summarize`` reads."""
    file = path / JSON_NAME if path.is_dir() else path
    try:
        doc = json.loads(read_text(file, " (pass a results directory written by invoke bench)"))
    except ValueError as err:
        raise UserError(f"{file}: not valid JSON: {err}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise UserError(f"{file}: not a bench results file of schema {SCHEMA}")
    for key in ("metadata", "samples", "rounds", "complete"):
        if key not in doc:
            raise UserError(f"{file}: missing {key!r}; was it written by invoke bench?")
    return doc
