"""How exactly `invoke bench` measures a stream whose timing is known, on this machine.

    python benchmarks/bench_accuracy.py [--step-ms 10.8] [--accept 1] [--tokens 64] [--levels 1,16,64]
        [--api native|completions|chat] [--python PYTHON]

Serves SGLang's streaming format from the loopback server the tests use
(tests/sglang_server.py): the first token after --ttft-ms, then one event every
--step-ms carrying --accept tokens. Runs `invoke bench` (SGLang's own benchmark) against it and
prints, per concurrency level, the client's figures against the truth: decode tok/s
and TTFT p50 against the server's own send times (its log of every event it wrote),
ITL p50 against the schedule, and the mean number in flight over the measured window
against the level asked for and against the server's own count over the same kind of
window. The defaults mimic the reference baseline (92.6 tok/s single stream, 10.8 ms per
token); --step-ms 31.2 --accept 3 is an EAGLE-3 server at the same speed with 3 tokens
per verify pass. ``--api`` picks the API the stream comes through: on OpenAI's, a chunk does not say how many tokens
it carries, so the server's count is spread over the chunks. SGLang's benchmark is run by ``--python`` (a Python of
either profile's pins: 0.5.9's sglang.bench_serving or 0.5.23's sglang.benchmark.serving) with a word-level stand-in
tokenizer.
"""

from __future__ import annotations

import argparse
import json
import statistics
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
from sglang_stack.bench import measure as bench, report  # noqa: E402
from sglang_stack.bench.request import Request  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--step-ms", type=float, default=10.8)
    parser.add_argument("--accept", type=int, default=1)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--levels", default="1,16,64")
    parser.add_argument("--api", default="native", help="native, completions or chat (default native)")
    parser.add_argument("--python", default=None, help="the Python that runs SGLang's benchmark (default: one of the "
                        "default profile's pins, made by tests/sglang_cpu_env.py)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        prompts.write_text("".join(
            json.dumps({"version": 1, "id": f"p{i}", "category": "chat", "output": "short",
                        "max_new_tokens": args.tokens, "prompt": f"prompt {i}"}) + "\n"
            for i in range(args.prompts)
        ))
        flags = {"python": args.python or str(sglang_cpu_env.python()),
                 "tokenizer": str(word_tokenizer(Path(tmp) / "tok", ["[UNK]"]))}
        behaviour = Behaviour(step_s=args.step_ms / 1000, ttft_s=args.ttft_ms / 1000, accept=(args.accept,),
                              spec=args.accept > 1)
        started = time.perf_counter()
        truth: dict[int, dict] = {}
        rows: list[dict] = []
        with SGLangServer(behaviour) as server:
            for level in [int(x) for x in args.levels.split(",")]:
                before = len(server.served)
                out = bench.run(Request(endpoints=[f"loopback={server.url}"], levels=str(level), repeats=1, warmup=1, prompts=prompts, out=Path(tmp) / f"r{level}", flush=False, api=args.api, **flags), environ={}, progress=False)
                truth[level] = server.served[before + 1:]  # less the warm-up request
                rows += report.load_results(out)["summary"]["rows"]
                rounds_ = report.load_results(out)["rounds"]
                truth[level] = {"served": truth[level], "round": rounds_[-1]}
        wall = time.perf_counter() - started

    served_tps = args.accept / (args.step_ms / 1000)
    served_itl = args.step_ms / args.accept
    print(f"served: {served_tps:.1f} tok/s per stream, ITL {served_itl:.2f} ms, TTFT {args.ttft_ms:g} ms, "
          f"{args.accept} token(s) per event, {args.tokens} tokens per request, {args.prompts} prompts cycled; "
          f"API {args.api}")
    print(f"{'level':>5} {'decode tok/s':>12} {'vs server':>9} {'TTFT p50 ms':>11} {'vs server':>9} {'ITL p50 ms':>10} "
          f"{'vs sched':>8} {'in flight':>9} {'vs level':>8} {'server':>7}")
    for row in sorted(rows, key=lambda r: r["level"]):
        served = truth[row["level"]]["served"]
        true_tps = statistics.median((s["tokens"] - 1) / (s["sent"][-1] - s["sent"][0]) for s in served if len(s["sent"]) > 1)
        true_ttft = statistics.median(s["sent"][0] - s["start"] for s in served) * 1e3
        in_flight = truth[row["level"]]["round"]["mean_in_flight"]
        print(f"{row['level']:>5} {row['decode_tps_p50']:>12.1f} {row['decode_tps_p50'] / true_tps - 1:>+9.2%} "
              f"{row['ttft_ms_p50']:>11.2f} {row['ttft_ms_p50'] - true_ttft:>+8.2f}ms {row['itl_ms_p50']:>10.2f} "
              f"{row['itl_ms_p50'] / served_itl - 1:>+8.2%} {in_flight:>9.2f} {in_flight / row['level'] - 1:>+8.2%} "
              f"{server_in_flight(served, row['level']):>7.2f}")
    print(f"wall time {wall:.1f} s")


def server_in_flight(served: list[dict], level: int) -> float:
    """The server's own time-weighted count, over its analogue of the window: from the level-th arrival until
    the first request that ends after the last arrival."""
    from sglang_stack.bench import stats

    starts = sorted(s["start"] for s in served)
    if len(starts) < level:
        return float("nan")
    begin = starts[level - 1]
    end = min(s["end"] for s in served if s["end"] >= starts[-1])
    return stats.in_flight([(s["start"], s["end"]) for s in served], begin, end, level)["mean"]


if __name__ == "__main__":
    main()
