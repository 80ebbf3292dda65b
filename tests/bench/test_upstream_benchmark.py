"""SGLang's own serving benchmark, the pinned ``sglang.bench_serving`` that every image ships, and `invoke bench`
measure one stand-in alike: the same tokens, the same concurrency held, the same speed.

The stand-in speculates: each step, ``step_s`` apart whatever the batch, streams one event of two or three tokens, so
a benchmark that counted events as tokens, or timed tokens by events, would part from the other.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import load_factor
from sglang_server import Behaviour, SGLangServer
from sglang_stack.bench import measure as bench, report
from sglang_stack.bench.request import Request
from test_bench import write_prompts
from word_tokenizer import word_tokenizer

LEVEL, REQUESTS, TOKENS = 8, 64, 32


@pytest.mark.sglang_env
def test_sglangs_own_benchmark_and_invoke_bench_agree_on_one_stand_in(tmp_path, default_python):
    tokenizer = word_tokenizer(tmp_path / "tok", ["[UNK]", *(f"w{i}" for i in range(500))])
    theirs_file = tmp_path / "bench_serving.jsonl"
    behaviour = Behaviour(step_s=0.004, ttft_s=0.01, accept=(2, 3, 2), spec=True)
    with SGLangServer(behaviour) as server:
        argv = [default_python, "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", server.url,
                "--tokenizer", str(tokenizer), "--model", str(tokenizer), "--dataset-name", "random-ids",
                "--random-input-len", str(TOKENS), "--random-output-len", str(TOKENS), "--random-range-ratio", "1",
                "--num-prompts", str(REQUESTS), "--max-concurrency", str(LEVEL), "--output-file", str(theirs_file),
                "--disable-tqdm"]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        out = tmp_path / "ours"
        bench.run(Request(endpoints=[f"stand-in={server.url}"], out=out, warmup=0, repeats=1, levels=str(LEVEL),
                          prompts=write_prompts(tmp_path / "p.jsonl", count=REQUESTS, tokens=TOKENS)),
                  environ={}, progress=False)
    theirs = json.loads(theirs_file.read_text().splitlines()[-1])
    (ours,) = json.loads((out / report.JSON_NAME).read_text())["summary"]["rows"]

    # Tokens as tokens: the server's count of each request's output, in both.
    assert theirs["completed"] == REQUESTS and theirs["total_output_tokens"] == REQUESTS * TOKENS, theirs
    assert ours["output_tokens"] == ours["requests"] * TOKENS, ours
    # The level held: SGLang's mean in flight over its whole run (its latencies over its duration, the drain
    # included) and ours over the measured window, which leaves the drain out.
    assert LEVEL - 1 < theirs["concurrency"] <= LEVEL, theirs["concurrency"]
    assert LEVEL - 0.5 < ours["mean_in_flight"] <= LEVEL, ours["mean_in_flight"]
    # The same speed: the time per output token (well under a step: a step delivers 2 to 3) and the output rate.
    slack = 0.25 * min(load_factor(), 4)
    assert theirs["mean_tpot_ms"] < behaviour.step_s * 1e3 * 0.6, theirs["mean_tpot_ms"]
    for mine, upstream in ((ours["tpot_ms"]["mean"], theirs["mean_tpot_ms"]),
                           (ours["aggregate_tps_mean"], theirs["output_throughput"])):
        assert 1 - slack < mine / upstream < 1 + slack, (mine, upstream)
