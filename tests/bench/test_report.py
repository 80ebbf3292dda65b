"""Summary statistics, the Markdown table and atomic result files, from hand-made samples."""

from __future__ import annotations

import json
import random

import numpy
import pytest

from sglang_stack.bench import report
from sglang_stack.bench import stats
from sglang_stack.errors import UserError


def sample(endpoint, level, repeat, ok=True, tokens=10, verify=None, accept=None, decode=100.0, ttft=0.05,
           latency=0.2, itl=(0.01,)):
    return {"endpoint": endpoint, "level": level, "repeat": repeat, "round": 0, "prompt_id": "p", "ok": ok,
            "error": None if ok else "boom", "started_s": 0.0, "ttft_s": ttft if ok else None,
            "latency_s": latency if ok else None, "output_tokens": tokens if ok else None, "first_chunk_tokens": 1,
            "decode_tps": decode if ok else None, "itl_s": list(itl) if ok else [], "chunks": 3,
            "finish_reason": None, "spec_accept_length": accept, "spec_verify_ct": verify}


def round_(endpoint, level, repeat, aggregate):
    return {"index": 0, "endpoint": endpoint, "level": level, "repeat": repeat, "started_s": 0.0, "wall_s": 1.0,
            "requests": 1, "ok": 1, "output_tokens": 10, "aggregate_tps": aggregate, "cache_flushed": True}


def document(samples, rounds, names=("baseline", "eagle3"), levels=(1,), complete=True):
    doc = {
        "schema": 1, "complete": complete, "error": None if complete else "stopped",
        "metadata": {"endpoints": [{"name": n, "url": f"http://{n}", "server": {}} for n in names],
                     "reference": names[0], "interleaved": True, "levels": list(levels), "repeats": 2, "warmup": 0,
                     "prompt_set": {"version": 1, "prompts": 1, "sha256": "0" * 64, "path": "p"},
                     "started": "t0", "finished": "t1", "sampling": {"ignore_eos": False}},
        "samples": samples, "rounds": rounds,
    }
    doc["summary"] = report.summarize(doc)
    return doc


def test_percentile_matches_numpy():
    rng = random.Random(6)
    values = [rng.expovariate(1.0) for _ in range(257)]
    for q in (0, 1, 50, 90, 99, 100):
        assert stats.percentile(values, q) == pytest.approx(numpy.percentile(values, q)), f"p{q} differs from numpy"
    assert stats.percentile([], 50) is None, "no values, no percentile"
    assert stats.percentile([3.0], 99) == 3.0, "one value is every percentile"


def test_accept_length_is_pooled_from_meta_info():
    samples = [
        sample("eagle3", 1, 0, tokens=100, verify=25, accept=4.0),
        sample("eagle3", 1, 1, tokens=10, verify=10, accept=1.0),
    ]
    row = document(samples, [], names=("eagle3",))["summary"]["rows"][0]
    assert row["accept_length"] == pytest.approx(110 / 35), "accept length: all tokens over all verify passes"
    assert row["accept_length_request_mean"] == pytest.approx(2.5), "per-request mean of spec_accept_length"
    assert row["spec_requests"] == 2, f"spec requests counted: {row['spec_requests']}"


def test_failed_samples_and_rounds_stay_out_of_the_figures():
    samples = [sample("baseline", 1, 0, decode=100.0), sample("baseline", 1, 1, ok=False)]
    rounds = [round_("baseline", 1, 0, 80.0), round_("baseline", 1, 1, None)]
    row = document(samples, rounds, names=("baseline",))["summary"]["rows"][0]
    assert (row["requests"], row["failed"], row["rounds"]) == (1, 1, 1), f"counts: {row}"
    assert row["aggregate_tps_mean"] == 80.0, "an incomplete round has no aggregate speed"
    assert row["decode_tps_p50"] == 100.0, "a failed request has no decode speed"


def test_ratios_pair_rounds_of_the_same_repeat():
    samples = [sample("baseline", 1, r, decode=100.0, itl=(0.010,)) for r in (0, 1)]
    samples += [sample("eagle3", 1, r, decode=150.0, itl=(0.005,)) for r in (0, 1)]
    rounds = [round_("baseline", 1, 0, 100.0), round_("eagle3", 1, 0, 120.0),
              round_("eagle3", 1, 1, 90.0), round_("baseline", 1, 1, 60.0)]
    ratio = document(samples, rounds)["summary"]["ratios"][0]
    assert ratio["decode_tps_p50"] == pytest.approx(1.5), "decode ratio"
    assert ratio["itl_ms_p50"] == pytest.approx(0.5), "ITL ratio"
    assert ratio["aggregate_tps"] == pytest.approx(105 / 80), "aggregate ratio of the means"
    paired = ratio["paired_aggregate"]
    assert (paired["pairs"], paired["min"], paired["max"]) == (2, pytest.approx(1.2), pytest.approx(1.5)), (
        f"paired ratios per repeat: {paired}"
    )


def test_markdown_marks_incomplete_runs_and_missing_values():
    doc = document([sample("baseline", 1, 0)], [round_("baseline", 1, 0, None)], names=("baseline",),
                   complete=False)
    text = report.markdown(doc)
    assert text.startswith("# sglang-stack bench\n\n**INCOMPLETE**: stopped."), f"banner: {text[:80]!r}"
    header = next(ln for ln in text.splitlines() if ln.startswith("| endpoint"))
    line = next(ln for ln in text.splitlines() if ln.startswith("| baseline"))
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in line.strip("|").split("|")]))
    assert cells["accept length"] == "-", f"no accept length must print '-': {line}"
    assert (cells["concurrency"], cells["requests"], cells["in flight"]) == ("1", "1", "-"), \
        f"endpoint, level and requests; no concurrency figure without a complete round: {line}"


def test_write_results_writes_json_last_and_loads_back(tmp_path):
    doc = document([sample("baseline", 1, 0)], [round_("baseline", 1, 0, 50.0)], names=("baseline",))
    report.write_results(tmp_path / "r", doc, plot=False)
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == ["bench.json", "bench.md"], "files written"
    assert report.load_results(tmp_path / "r") == json.loads(json.dumps(doc)), "bench.json does not load back"


@pytest.mark.parametrize(
    "content, message",
    [
        (None, r"not found"),
        ("{", r"not valid JSON"),
        ('{"schema": 3}', r"not a bench results file of schema 1 or 2"),
        ('{"schema": 1, "metadata": {}}', r"missing 'samples'"),
    ],
)
def test_load_results_rejects_what_bench_did_not_write(tmp_path, content, message):
    if content is not None:
        (tmp_path / "bench.json").write_text(content)
    with pytest.raises(UserError, match=message):
        report.load_results(tmp_path)
