"""How exactly `invoke bench` measures a stream whose timing is known, on this machine.

    python benchmarks/bench_accuracy.py [--step-ms 10.8] [--accept 1] [--tokens 64] [--levels 1,4,16]

Serves SGLang's streaming format from the loopback server the tests use
(tests/sglang_server.py): the first token after --ttft-ms, then one event every
--step-ms carrying --accept tokens. Runs the real bench client against it and
prints, per concurrency level, the served and the measured decode tok/s and
ITL p50, with the error. The defaults mimic the reference baseline
(92.6 tok/s single stream, 10.8 ms per token); --step-ms 31.2 --accept 3 is an
EAGLE-3 server at the same speed with 3 tokens per verify pass.
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

from sglang_server import Behaviour, SGLangServer  # noqa: E402
from sglang_stack.bench import measure as bench, report  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--step-ms", type=float, default=10.8)
    parser.add_argument("--accept", type=int, default=1)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--levels", default="1,4,16")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        prompts = Path(tmp) / "prompts.jsonl"
        prompts.write_text("".join(
            json.dumps({"version": 1, "id": f"p{i}", "category": "chat", "output": "short",
                        "max_new_tokens": args.tokens, "prompt": f"prompt {i}"}) + "\n"
            for i in range(args.prompts)
        ))
        behaviour = Behaviour(step_s=args.step_ms / 1000, ttft_s=args.ttft_ms / 1000, accept=(args.accept,),
                              spec=args.accept > 1)
        started = time.perf_counter()
        with SGLangServer(behaviour) as server:
            out = bench.run(endpoints=[f"loopback={server.url}"], levels=args.levels, repeats=1, warmup=1,
                            prompts=prompts, out=Path(tmp) / "r", environ={}, progress=False)
        wall = time.perf_counter() - started
        doc = report.load_results(out)

    served_tps = args.accept / (args.step_ms / 1000)
    served_itl = args.step_ms / args.accept
    print(f"served: {served_tps:.1f} tok/s per stream, ITL {served_itl:.2f} ms, {args.accept} token(s) per event, "
          f"{args.tokens} tokens per request, {args.prompts} requests per round")
    print(f"{'concurrency':>11} {'decode tok/s':>13} {'error':>7} {'ITL p50 ms':>11} {'error':>7} "
          f"{'ITL p99 ms':>11} {'events/s':>9}")
    for row in doc["summary"]["rows"]:
        tps_err = row["decode_tps_p50"] / served_tps - 1
        itl_err = row["itl_ms_p50"] / served_itl - 1
        events = min(row["level"], args.prompts) * 1000 / args.step_ms
        print(f"{row['level']:>11} {row['decode_tps_p50']:>13.1f} {tps_err:>+7.1%} {row['itl_ms_p50']:>11.2f} "
              f"{itl_err:>+7.1%} {row['itl_ms_p99']:>11.2f} {events:>9.0f}")
    print(f"wall time {wall:.1f} s")


if __name__ == "__main__":
    main()
