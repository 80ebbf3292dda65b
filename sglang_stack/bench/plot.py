"""The benchmark plot: speed and inter-token latency by concurrency, one line per endpoint.

Drawn with matplotlib's Agg backend (no display needed). The plotted numbers
are also stored in the PNG as a text chunk (``sglang-stack:series``), so a
reader, or a test, can check the picture against ``bench.json``.
"""

from __future__ import annotations

import io
import json

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402  (after the backend is chosen)

SERIES_KEY = "sglang-stack:series"

# (row key, axis title): one panel each.
PANELS = (
    ("aggregate_tps_mean", "aggregate output tok/s"),
    ("decode_tps_p50", "decode tok/s per request (p50)"),
    ("itl_ms_p50", "inter-token latency p50 (ms)"),
)


def series(summary: dict) -> dict:
    """``{panel key: {endpoint: [[level, value], ...]}}`` as plotted, from the summary rows."""
    out: dict[str, dict[str, list[list[float]]]] = {key: {} for key, _ in PANELS}
    for row in summary["rows"]:
        for key, _ in PANELS:
            if row[key] is not None:
                out[key].setdefault(row["endpoint"], []).append([row["level"], row[key]])
    for lines in out.values():
        for points in lines.values():
            points.sort()
    return out


def figure(doc: dict) -> Figure:
    data = series(doc["summary"])
    levels = sorted({row["level"] for row in doc["summary"]["rows"]}) or doc["metadata"]["levels"]
    fig = Figure(figsize=(15, 4.6), dpi=100)
    # Fixed margins: the automatic layout engines double the drawing time.
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.12, top=0.86, wspace=0.22)
    axes = fig.subplots(1, len(PANELS))
    for ax, (key, title) in zip(axes, PANELS):
        for endpoint, points in data[key].items():
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=endpoint)
        ax.set_title(title)
        ax.set_xlabel("concurrency")
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(level) for level in levels])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        if data[key]:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "no measurements", ha="center", va="center", transform=ax.transAxes)
    ps = doc["metadata"]["prompt_set"]
    state = "" if doc["complete"] else "  [INCOMPLETE]"
    fig.suptitle(f"sglang-stack bench: prompt set v{ps['version']}, {doc['metadata']['repeats']} repeats{state}")
    return fig


def png(doc: dict) -> bytes:
    fig = figure(doc)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={SERIES_KEY: json.dumps(series(doc["summary"]))})
    return buffer.getvalue()
