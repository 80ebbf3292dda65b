"""How long a default `invoke bench --verdict` takes, and what it finds, against stand-ins whose crossover is known.

    python benchmarks/verdict_time.py [--step-ms 4] [--load-ms 0.25] [--accept 3] [--verify 4] [--levels ...]
        [--repeats 3] [--prompts FILE] [--python PYTHON]

Two loopback servers (tests/sglang_server.py) that batch the way continuous batching does: a step costs --step-ms
plus --load-ms for every token verified across the batch. The baseline verifies and emits one token per request and
step; the speculative one verifies --verify and emits --accept. Its output over the baseline's is then
``accept * (a + n) / (a + verify * n)`` at n in flight, with ``a = step / load``: the crossover is known before the
run. Runs the verdict as a user does (the default levels 1 to 64, three repeats, the packaged prompt set, two warm-up
requests each), and prints its wall time, the rounds and requests it sent, and per level the ratio it measured beside
the model's and the one the stand-ins served (their own event times over the same windows: on a busy 2-core host
their Python threads' CPU time moves it off the model), its interval and its call, then the verdict's line. SGLang's
own benchmark sends the rounds, run by ``--python`` (a Python of either profile's pins: 0.5.9's sglang.bench_serving
or 0.5.23's sglang.benchmark.serving) with a word-level stand-in tokenizer.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

import sglang_cpu_env  # noqa: E402
from sglang_server import Behaviour, SGLangServer  # noqa: E402
from bench.word_tokenizer import word_tokenizer  # noqa: E402
from sglang_stack.bench import measure as bench, pays, report  # noqa: E402
from sglang_stack.bench.request import Request  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--step-ms", type=float, default=4.0, help="fixed cost of a step (default 4)")
    parser.add_argument("--load-ms", type=float, default=0.25, help="cost per token verified in a step (default 0.25)")
    parser.add_argument("--accept", type=int, default=3, help="tokens a speculative step emits (default 3)")
    parser.add_argument("--verify", type=int, default=4, help="tokens a speculative step verifies (default 4)")
    parser.add_argument("--levels", default=pays.LEVELS, help="the verdict's levels (default: its own)")
    parser.add_argument("--repeats", default="3")
    parser.add_argument("--prompts", default=None, help="prompt file (default: the packaged set)")
    parser.add_argument("--python", default=None, help="the Python that runs SGLang's benchmark (default: one of the "
                        "default profile's pins, made by tests/sglang_cpu_env.py)")
    args = parser.parse_args()

    step, load = args.step_ms / 1000, args.load_ms / 1000
    base = Behaviour(step_s=step, ttft_s=0.01, accept=(1,), load_s=load,
                     server_info={"version": "0.5.23", "speculative_algorithm": None})
    spec = Behaviour(step_s=step, ttft_s=0.01, accept=(args.accept,), spec=True, load_s=load, verify=args.verify,
                     server_info={"version": "0.5.23", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
                                  "speculative_eagle_topk": 1, "speculative_num_draft_tokens": args.verify})
    with tempfile.TemporaryDirectory() as tmp:
        flags = {"python": args.python or str(sglang_cpu_env.python()),
                 "tokenizer": str(word_tokenizer(Path(tmp) / "tok", ["[UNK]"]))}
        started = time.perf_counter()  # SGLang's benchmark starts (its import) inside: a user waits for it too
        with SGLangServer(base) as b, SGLangServer(spec) as s:
            out = bench.run(Request(endpoints=[f"baseline={b.url}", f"eagle3={s.url}"], levels=args.levels,
                                    repeats=args.repeats, prompts=args.prompts, out=Path(tmp) / "r", verdict=True,
                                    **flags), environ={}, progress=False)
            served = {"baseline": (list(b.served), 1), "eagle3": (list(s.served), args.accept)}
        wall = time.perf_counter() - started
        found = json.loads((out / pays.NAME).read_text())
        doc = report.load_results(out)

    a = step / load
    truth = served_ratios(doc, served, int(doc["metadata"]["warmup"]))
    print(f"SGLang's benchmark: {doc['metadata']['load']['generator']['module']}")
    print(f"stand-ins: step {args.step_ms:g} ms + {args.load_ms:g} ms per verified token; speculative: {args.accept} "
          f"tokens emitted, {args.verify} verified a step")
    print("model: the ratio the stand-ins' step costs give; served: the ratio of the tokens the stand-ins sent over the "
          "same windows, by their own clocks (their Python threads cost CPU time the model leaves out)")
    print(f"{'level':>5} {'model':>6} {'served':>6} {'measured':>8} {'95% interval':>15}  call")
    for row in found["endpoints"]["eagle3"]["levels"]:
        n = row["level"]
        model = args.accept * (a + n) / (a + args.verify * n)
        interval = f"{row['low']:.3f}-{row['high']:.3f}" if row["low"] is not None else "-"
        print(f"{n:>5} {model:>6.3f} {truth.get(n, float('nan')):>6.3f} {row['ratio']:>8.3f} {interval:>15}  "
              f"{row['verdict']}")
    print(f"{len(doc['rounds'])} rounds, {len(doc['samples'])} requests, "
          f"{sum(s['output_tokens'] or 0 for s in doc['samples'])} output tokens")
    print(f"verdict: {found['line']}")
    print(f"wall time {wall:.1f} s")


def served_tps(records: list[dict], level: int, accept: int) -> float | None:
    """A round's output tok/s as one stand-in sent it: the tokens of the events it sent between the level-th start
    and the first end after the last start (the window bench/rounds.py takes), over that window."""
    starts = sorted(r["start"] for r in records)
    begin = starts[min(level, len(starts)) - 1]
    end = min((r["end"] for r in records if r["end"] > starts[-1]), default=max(r["end"] for r in records))
    tokens = 0
    for r in records:
        for i, at in enumerate(r["sent"]):  # the first event carries 1 token, each later one ``accept``
            if begin <= at <= end:
                tokens += min(1 + i * accept, r["tokens"]) - (min(1 + (i - 1) * accept, r["tokens"]) if i else 0)
    return tokens / (end - begin) if end > begin else None


def served_ratios(doc: dict, served: dict, warmup: int) -> dict[int, float]:
    """Per level, the geometric mean over repeats of eagle3's served tok/s over the baseline's: each stand-in's
    requests in the order they started, the warm-up's first, cut into its rounds by their sizes in bench.json."""
    tps: dict[tuple[str, int, int], float | None] = {}
    for name, (records, accept) in served.items():
        queue = sorted(records, key=lambda r: r["start"])[warmup:]
        for rnd in (r for r in doc["rounds"] if r["endpoint"] == name):
            chunk, queue = queue[:rnd["requests"]], queue[rnd["requests"]:]
            tps[name, rnd["level"], rnd["repeat"]] = served_tps(chunk, rnd["level"], accept) if chunk else None
    out = {}
    for level in doc["metadata"]["levels"]:
        pairs = [(tps.get(("eagle3", level, k)), tps.get(("baseline", level, k)))
                 for k in range(doc["metadata"]["repeats"])]
        ratio, _, _ = pays.interval([e / b for e, b in pairs if e and b])  # the verdict's own geometric mean
        if ratio is not None:
            out[level] = ratio
    return out


if __name__ == "__main__":
    main()
