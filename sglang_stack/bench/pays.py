"""Does speculation pay on this host, and up to what load? `invoke bench --verdict`.

Per concurrency level, each speculative endpoint's output throughput over the baseline's, from the rounds that ran
next to each other (same level, same repeat: the interleaved A/B rounds cancel most of a machine's drift). The ratio
is the geometric mean of those paired ratios, its 95% interval Student's t on their logarithms (the pairs are few,
and a ratio's error is multiplicative). A level *pays* where the whole interval is above 1 and the ratio is at
least 1 + MARGIN, *does not pay* where the interval is below 1 and the ratio at most 1 - MARGIN, and *cannot be told
apart* otherwise, one pair alone included: no interval, no claim. ``pays_up_to`` is the highest level that pays.
Runs made one service at a time and merged (`invoke bench-compare --verdict`) pair their rounds by repeat all the
same, and the line says the drift between them was not cancelled.

The margin is there because the interval only answers "is there a difference": with enough rounds it shrinks
around any steady one, and two servers are never exactly alike (their GPUs' clocks, the extra fields a speculative
server streams). A few tenths of a percent, measured tightly, is "cannot be told apart", not a verdict.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Sequence

from sglang_stack.bench import report
from sglang_stack.errors import UserError

NAME = "verdict.json"
PLOT = "verdict.png"
LEVELS = "1,2,4,8,16,32,64"
PAYS, LOSES, UNCLEAR = "pays", "does not pay", "cannot be told apart"
MARGIN = 0.02  # the smallest gain (or loss) a verdict claims: 2% of output throughput
# Student's t, two-sided 95%, by degrees of freedom (pairs - 1); past 30 the normal's 1.96 is within 4%.
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t975(df: int) -> float:
    """The 95% two-sided t quantile for ``df``, the table's next smaller df where it has none (wider: safe)."""
    return T975[max(k for k in T975 if k <= df)] if df <= 30 else 1.96


def interval(pairs: Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """(geometric mean, low, high) of paired ratios; the bounds are None with fewer than two pairs."""
    logs = [math.log(r) for r in pairs if r and r > 0]
    if not logs:
        return None, None, None
    centre = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(centre), None, None
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def judge(ratio: float | None, low: float | None, high: float | None) -> str:
    """The call on one level: an interval that excludes 1 and a ratio past the margin, on the same side."""
    if ratio is None or low is None or high is None:
        return UNCLEAR
    if low > 1 and ratio >= 1 + MARGIN:
        return PAYS
    if high < 1 and ratio <= 1 - MARGIN:
        return LOSES
    return UNCLEAR


def check(meta: dict, half: bool = False) -> None:
    """Before anything is measured: a baseline to divide by and at least one server that speculates, two different
    servers, and the closed loop whose levels the verdict is about. ``half``: one service measured alone (``--only``),
    whose other half comes from another run; only the closed loop is checked."""
    if meta["load"]["mode"] != "closed":
        raise UserError("--verdict: the verdict is per concurrency level (the closed loop): drop --request-rate")
    if half:
        return
    endpoints = meta["endpoints"]
    reference = meta["reference"]
    speculating = [e["name"] for e in endpoints if (e.get("server") or {}).get("speculative_algorithm")]
    ref = next(e for e in endpoints if e["name"] == reference)
    if (ref.get("server") or {}).get("speculative_algorithm"):
        raise UserError(f"--verdict: the baseline {reference} ({ref['url']}) speculates "
                        f"({ref['server']['speculative_algorithm']}): give a server without speculative decoding")
    if not speculating:
        names = ", ".join(f"{e['name']} ({e['url']})" for e in endpoints if e["name"] != reference) or "none"
        raise UserError(f"--verdict: no endpoint but the baseline {reference} speculates: the server info of {names} "
                        "has no speculative algorithm; give the EAGLE-3 server too, or where both cannot run at once, "
                        "measure each alone (invoke bench --verdict --only NAME --out A, then the other with --out B) "
                        "and merge: invoke bench-compare --results A --results B --verdict")
    where = {}
    # Runs made one after the other may reach both servers at one address (one box, one port, one at a time).
    for e in endpoints if meta.get("interleaved", True) else ():
        key = same_server(e["url"])
        if key in where:
            raise UserError(f"--verdict: {where[key]} and {e['name']} are one server ({e['url']}): the verdict divides "
                            "two servers; give the baseline and the EAGLE-3 server")
        where[key] = e["name"]


def same_server(url: str) -> tuple[str, int, str]:
    """(host, port, path) as a server is reached: localhost is loopback, a default port is that port."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    host = "127.0.0.1" if host in ("localhost", "::1", "0.0.0.0") or host.startswith("127.") else host
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return host, port, parts.path.rstrip("/")


def decide(doc: dict) -> dict:
    """The verdict of a finished run (its bench.json): per speculative endpoint and level, the ratio, the interval,
    the call; ``pays_up_to``; one line in words."""
    meta = doc["metadata"]
    reference = meta["reference"]
    servers = {e["name"]: e.get("server") or {} for e in meta["endpoints"]}
    out = {"reference": reference, "levels": meta["levels"], "repeats": meta["repeats"], "margin": MARGIN,
           "interleaved": meta.get("interleaved", True), "apart_s": meta.get("apart_s"), "endpoints": {},
           "provenance": meta.get("provenance"), "prompts": meta.get("prompt_set"),
           "generator": report.generator(meta),
           "servers": {name: {k: s.get(k) for k in ("version", "speculative_algorithm", "speculative_num_steps",
                                                   "speculative_eagle_topk", "speculative_num_draft_tokens",
                                                   "speculative_draft_model_path", "speculative_adaptive")}
                       for name, s in servers.items()}}
    # The paired ratios the report already divides (report.ratios: same level, same repeat).
    paired = {(r["endpoint"], r["level"]): r["paired_aggregate"]["values"] for r in doc["summary"]["ratios"]
              if r["reference"] == reference}
    for name, server in servers.items():
        if name == reference or not server.get("speculative_algorithm"):
            continue
        levels = []
        for level in meta["levels"]:
            pairs = paired.get((name, level), [])
            ratio, low, high = interval(pairs)
            levels.append({"level": level, "pairs": len(pairs), "ratio": ratio, "low": low, "high": high,
                           "verdict": judge(ratio, low, high)})
        paying = [row["level"] for row in levels if row["verdict"] == PAYS]
        out["endpoints"][name] = {"levels": levels, "pays_up_to": max(paying) if paying else None}
    out["line"] = sentence(out)
    out["pays"] = any(e["pays_up_to"] is not None for e in out["endpoints"].values())
    return out


def sentence(verdict: dict) -> str:
    """One line per speculative endpoint, in words."""
    said = []
    for name, found in verdict["endpoints"].items():
        rows = found["levels"]
        up_to = found["pays_up_to"]
        if up_to is None:
            unclear = [r["level"] for r in rows if r["verdict"] == UNCLEAR]
            said.append(f"{name} pays at no level over {verdict['reference']}"
                        + (f" (cannot be told apart at {_levels(unclear)})" if unclear else ""))
            continue
        first = next(r for r in rows if r["verdict"] == PAYS)
        after = [r for r in rows if r["level"] > up_to]
        tail = ""
        if after:
            losing = [r["level"] for r in after if r["verdict"] == LOSES]
            tail = (f"; from {losing[0]} on, {verdict['reference']} is faster" if losing else
                    f"; above it, cannot be told apart from {verdict['reference']}")
        said.append(f"{name} pays up to {up_to} concurrent request{'s' if up_to > 1 else ''} "
                    f"({first['ratio']:.2f}x at {first['level']}){tail}")
    line = "; ".join(said) + "."
    if not verdict.get("interleaved", True):
        apart = verdict.get("apart_s")
        line += (" Measured one after the other" + (f", {apart:.0f} s apart" if apart is not None else "")
                 + ", not interleaved: the machine's drift between the runs is in every ratio.")
    return line


def _levels(levels: list[int]) -> str:
    return ", ".join(map(str, levels))


def write(out_dir: Path, verdict: dict) -> list[Path]:
    """verdict.json and verdict.png, each whole or not at all."""
    from sglang_stack.atomic import write_all

    files = {out_dir / NAME: (json.dumps(verdict, indent=1) + "\n").encode(), out_dir / PLOT: png(verdict)}
    write_all(files)
    return list(files)


def png(verdict: dict) -> bytes:
    """Ratio to the baseline against concurrency (log scale), with the 95% intervals; the line at 1 is parity."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.2))
    ax = fig.add_subplot()
    for name, found in verdict["endpoints"].items():
        rows = [r for r in found["levels"] if r["ratio"] is not None]
        x = [r["level"] for r in rows]
        y = [r["ratio"] for r in rows]
        below = [r["ratio"] - (r["low"] if r["low"] is not None else r["ratio"]) for r in rows]
        above = [(r["high"] if r["high"] is not None else r["ratio"]) - r["ratio"] for r in rows]
        ax.errorbar(x, y, yerr=[below, above], marker="o", capsize=3, label=name)
    ax.axhline(1.0, color="grey", linewidth=1, linestyle="--")
    ax.set_xscale("log", base=2)
    ax.set_xticks(verdict["levels"], [str(level) for level in verdict["levels"]])  # the levels run, not powers of 2
    ax.minorticks_off()
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel(f"output tok/s over {verdict['reference']}")
    ax.set_title("Does speculation pay? (95% intervals)")
    ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()
