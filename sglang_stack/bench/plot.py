"""The benchmark plot: speed and inter-token latency by concurrency, and acceptance by draft position.

Drawn with matplotlib's Agg backend (no display needed). The plotted numbers are also
stored in the PNG as a text chunk (``sglang-stack:series``), so a reader, or a test, can
check the picture against ``bench.json``.

- Three panels by concurrency, one line per endpoint: aggregate tok/s (error bars: the
  rounds' min and max), decode tok/s per request (p50) and ITL p50.
- A fourth panel: P(at least k draft tokens accepted) by position k, one line per
  endpoint and level, where speculative decoding ran.
- A sweep's settings share one concurrency level, so its plot puts each setting at its
  own x position, labelled, instead of stacking them all at one level.
"""

from __future__ import annotations

import io
import json

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure

from sglang_stack.bench.report import prompt_set_label

SERIES_KEY = "sglang-stack:series"

# (row key, axis title): one panel each, by concurrency.
PANELS = (
    ("aggregate_tps_mean", "aggregate output tok/s"),
    ("decode_tps_p50", "decode tok/s per request (p50)"),
    ("itl_ms_p50", "inter-token latency p50 (ms)"),
)
ACCEPT_TITLE = "P(at least k draft tokens accepted)"


def series(summary: dict) -> dict:
    """``{panel key: {endpoint: [[level, value], ...]}}`` as plotted, from the summary rows, plus the error
    bars (``aggregate_range``: ``[level, min, max]``) and ``accept_by_position`` (``{"endpoint c=N": [...]}``)."""
    out: dict = {key: {} for key, _ in PANELS}
    out["aggregate_range"] = {}
    out["accept_by_position"] = {}
    for row in summary["rows"]:
        for key, _ in PANELS:
            if row.get(key) is not None:
                out[key].setdefault(row["endpoint"], []).append([row["level"], row[key]])
        if row.get("aggregate_tps_min") is not None:
            out["aggregate_range"].setdefault(row["endpoint"], []).append(
                [row["level"], row["aggregate_tps_min"], row["aggregate_tps_max"]])
        if row.get("accept_by_position"):
            out["accept_by_position"][f"{row['endpoint']} c={row['level']}"] = row["accept_by_position"]
    for key in [k for k, _ in PANELS] + ["aggregate_range"]:
        for points in out[key].values():
            points.sort()
    return out


def _finish_axis(ax, has_data: bool) -> None:
    ax.margins(y=0.12)  # room above the top series, which would otherwise touch the frame
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if has_data:
        ax.legend(fontsize="small", loc="best")
    else:
        ax.text(0.5, 0.5, "no measurements", ha="center", va="center", transform=ax.transAxes)


def figure(doc: dict) -> Figure:
    data = series(doc["summary"])
    sweep = doc.get("sweep")
    fig = Figure(figsize=(20, 4.6), dpi=100)
    # Fixed margins: the automatic layout engines double the drawing time.
    fig.subplots_adjust(left=0.04, right=0.99, bottom=0.2 if sweep else 0.12, top=0.86, wspace=0.22)
    axes = fig.subplots(1, len(PANELS) + 1)
    if sweep:
        labels = [p["label"] for p in sweep["points"]]
        positions = {label: i for i, label in enumerate(labels)}
    else:
        levels = sorted({row["level"] for row in doc["summary"]["rows"]}) or doc["metadata"]["levels"]
    for ax, (key, title) in zip(axes, PANELS):
        for endpoint, points in data[key].items():
            if sweep:
                x = [positions.get(endpoint, 0)] * len(points)
                ax.plot(x, [p[1] for p in points], marker="o", linestyle="none", label=endpoint)
            else:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=endpoint)
            if key == "aggregate_tps_mean" and endpoint in data["aggregate_range"]:
                spans = data["aggregate_range"][endpoint]
                xs = [positions.get(endpoint, 0)] * len(spans) if sweep else [s[0] for s in spans]
                mids = [p[1] for p in points]
                ax.errorbar(xs, mids, yerr=[[m - s[1] for m, s in zip(mids, spans)], [s[2] - m for m, s in zip(mids, spans)]],
                            fmt="none", capsize=3, color=ax.lines[-1].get_color())
        ax.set_title(title)
        if sweep:
            ax.set_xticks(range(len(labels)), [label.split(" ", 1)[-1] for label in labels], rotation=30, fontsize="small")
            ax.set_xlabel(f"setting (concurrency {sweep['level']})")
            ax.set_xlim(-0.5, len(labels) - 0.5)
        else:
            ax.set_xlabel("concurrency" if min(levels, default=1) > 0 else "concurrency cap (0: none)")
            if min(levels, default=1) > 0:  # open loop without a cap is level 0, which no log axis holds
                ax.set_xscale("log", base=2)
            ax.set_xticks(levels, [str(level) for level in levels])
            ax.minorticks_off()
        _finish_axis(ax, bool(data[key]))
    ax = axes[-1]
    for label, values in data["accept_by_position"].items():
        ax.plot(range(1, len(values) + 1), values, marker="o", label=label)
    ax.set_title(ACCEPT_TITLE)
    ax.set_xlabel("draft position k")
    ax.set_ylim(0, 1.05)
    ax.grid(True, alpha=0.3)
    if data["accept_by_position"]:
        ax.legend(fontsize="small", loc="best")
        ax.set_xticks(range(1, max(len(v) for v in data["accept_by_position"].values()) + 1))
    else:
        ax.text(0.5, 0.5, "no speculative decoding", ha="center", va="center", transform=ax.transAxes)
    ps = doc["metadata"]["prompt_set"]
    state = "" if doc["complete"] else "  [INCOMPLETE]"
    fig.suptitle(f"sglang-stack bench: {prompt_set_label(ps)}, {doc['metadata']['repeats']} repeats{state}")
    return fig


def png(doc: dict) -> bytes:
    fig = figure(doc)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={SERIES_KEY: json.dumps(series(doc["summary"]))})
    return buffer.getvalue()
