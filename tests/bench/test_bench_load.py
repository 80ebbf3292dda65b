"""`invoke bench` against loopback stand-ins with known schedules: the load it offers, and what it reads back.

Sustained concurrency, open-loop arrivals, every acceptance figure, OpenAI-compatible
targets, datasets and provenance. Figures are asserted exactly where the clock is injected
(``ReadingClock``), and within bounds derived in each test where real time runs.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import statistics
import subprocess
import sys

import pytest

from conftest import load_factor
from sglang_server import Behaviour, ReadingClock, SGLangServer
from sglang_stack import ROOT
from sglang_stack.bench import measure as bench, report, rounds, stats
from sglang_stack.bench import promptset
from sglang_stack.bench.display import Progress
from sglang_stack.errors import UserError
from sglang_stack.bench.request import Request
from test_bench import write_prompts

FAST = Behaviour(step_s=0.002, ttft_s=0.01, accept=(1,))


def run(server_url, tmp_path, name="e", **kwargs):
    out = tmp_path / kwargs.pop("out", "r")
    extra = {k: kwargs.pop(k) for k in ("clock",) if k in kwargs}  # what a test injects, not a flag
    bench.run(Request(endpoints=[f"{name}={server_url}"], out=out, warmup=0, **{"repeats": 1, "generator": "builtin", **kwargs}),
              environ={}, progress=False, **extra)
    return json.loads((out / report.JSON_NAME).read_text()), out


# --- closed loop: N in flight for the measured window ---------------------------------------------


def test_level_16_keeps_16_in_flight_for_the_measured_window(tmp_path):
    """v1 sent the 18 prompts once per round: at c=16 the mean in flight was 9. Now the prompts are cycled.

    Each of the 16 workers (slots) is inside a request except in the gaps between one request's
    end and its next one's start. So over the window the mean in flight is exactly 16 minus
    the slots' gaps inside it over its length; the client's integration must give that, and
    the gaps must be small (they are the client's own overhead).
    """
    prompts = write_prompts(tmp_path / "p.jsonl", count=18, tokens=32)
    # Requests of about 170 ms: long enough that the stand-in's own threads see all 16 at once on a busy host.
    with SGLangServer(Behaviour(step_s=0.005, ttft_s=0.01, accept=(1,))) as server:
        doc, out = run(server.url, tmp_path, levels="16", prompts=prompts)
        assert server.max_in_flight == 16, f"the server saw at most {server.max_in_flight} at once"
    (record,) = doc["rounds"]
    assert record["requests"] == rounds.round_size(18, 16) == 54, "the prompts cycled: 3 passes, 3 per worker"
    samples = [s for s in doc["samples"] if s["round"] == record["index"]]
    begin, end = record["window_s"]
    firsts = [min(s["round_start_s"] for s in samples if s["slot"] == slot) for slot in range(16)]
    assert begin == pytest.approx(max(firsts), abs=1e-6), "from the moment every worker had sent its first request"
    idle = 0.0
    for slot in range(16):
        mine = sorted((s for s in samples if s["slot"] == slot), key=lambda s: s["round_start_s"])
        assert len(mine) >= 3
        for prev, nxt in zip(mine, mine[1:]):
            lo, hi = max(prev["round_end_s"], begin), min(nxt["round_start_s"], end)
            idle += max(0.0, hi - lo)
        lo, hi = max(mine[-1]["round_end_s"], begin), end
        idle += max(0.0, hi - lo)  # a slot whose last request ended inside the window is idle after it
    assert record["mean_in_flight"] == pytest.approx(16 - idle / (end - begin), abs=1e-4)
    assert record["mean_in_flight"] > 15.0, f"mean in flight {record['mean_in_flight']:.2f} at c=16"
    in_window = [s for s in samples if s["in_window"]]
    assert all(s["round_end_s"] <= end + 1e-9 for s in in_window)
    assert 54 - 16 < len(in_window) < 54, "the drain (up to 15 requests still in flight at the window's end) is left out"
    row = doc["summary"]["rows"][0]
    assert row["requests"] == len(in_window) and row["drain_requests"] == 54 - len(in_window)
    text = (out / report.MARKDOWN_NAME).read_text()
    header = next(line for line in text.splitlines() if line.startswith("| endpoint"))
    line = next(line for line in text.splitlines() if line.startswith("| e |"))
    cells = dict(zip([c.strip() for c in header.strip("|").split("|")], [c.strip() for c in line.strip("|").split("|")]))
    assert float(cells["in flight"]) == pytest.approx(record["mean_in_flight"], abs=0.051), "the table says so"


def test_in_flight_is_integrated_exactly():
    # Two requests: [0, 2] and [1, 3]; window [0, 2]: 1 in flight for 1 s, 2 for 1 s.
    got = stats.in_flight([(0.0, 2.0), (1.0, 3.0)], 0.0, 2.0, full=2)
    assert got == {"mean": 1.5, "full_share": 0.5, "window_s": 2.0}
    assert stats.in_flight([], 0.0, 1.0, 1) == {"mean": 0.0, "full_share": 0.0, "window_s": 1.0}


def test_aggregate_throughput_counts_tokens_inside_the_window_only():
    # Tokens at 0.1 (x2), 0.2, 0.3, 0.4 from a request sent at 0; the window ends at 0.25.
    sample = {"round_start_s": 0.0, "ttft_s": 0.1, "first_chunk_tokens": 2, "itl_s": [0.1, 0.1, 0.1]}
    assert stats.token_times(sample) == pytest.approx([0.1, 0.1, 0.2, 0.3, 0.4])
    assert stats.tokens_between([sample], 0.0, 0.25) == 3


# --- open loop: arrivals --------------------------------------------------------------------------


@pytest.mark.parametrize("burstiness", [1.0, 0.5, 4.0])
def test_arrivals_have_the_rate_and_the_shape_asked_for(burstiness):
    """Gamma gaps of shape b and mean 1/R: over n gaps the mean is within 4 standard errors of 1/R, and the
    coefficient of variation near 1/sqrt(b) (Poisson: 1)."""
    rate, n = 20.0, 4000
    times = rounds.arrivals(n + 1, rate, burstiness, seed=7)
    gaps = [b - a for a, b in zip(times, times[1:])]
    sd = (1 / rate) / math.sqrt(burstiness)
    assert abs(statistics.fmean(gaps) - 1 / rate) <= 4 * sd / math.sqrt(n)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1 / math.sqrt(burstiness), rel=0.1)
    assert times == rounds.arrivals(n + 1, rate, burstiness, seed=7), "seeded: the same schedule every time"


def test_open_loop_sends_at_the_schedule_and_reports_offered_and_achieved_rates(tmp_path):
    """Each request leaves at its scheduled time, never before, and later by the dispatch delay only (50 ms on a
    quiet 2-core host, stretched with the machine's load as every deadline here is: a busy CI runner is slow, not
    wrong); so the rate actually sent is the schedule's within that slack."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=10, tokens=8)
    rate = 40.0
    with SGLangServer(FAST) as server:
        doc, out = run(server.url, tmp_path, prompts=prompts, request_rate=rate, num_requests=40, seed=3,
                       slo="ttft:1000,e2e:5000")
    (record,) = doc["rounds"]
    assert record["mode"] == "open" and record["requests"] == 40 and record["offered_rate"] == rate
    schedule = rounds.arrivals(40, rate, 1.0, seed=3 + record["index"])
    slack = 0.05 * min(load_factor(), 8.0)
    for s in doc["samples"]:
        assert s["scheduled_s"] in schedule
        assert 0.0 <= s["round_start_s"] - s["scheduled_s"] <= slack, (s["scheduled_s"], s["round_start_s"], slack)
    # With each start 0 to `slack` after its time, the first-to-last span is the schedule's within it either way.
    span = schedule[-1] - schedule[0]
    assert 39 / (span + slack) <= record["sent_rate"] <= 39 / (span - slack), (record["sent_rate"], 39 / span)
    assert record["achieved_rate"] > 0 and record["goodput_rate"] == pytest.approx(record["achieved_rate"]), \
        "every request met a 1 s TTFT and a 5 s latency"
    assert doc["metadata"]["load"]["mode"] == "open"
    text = (out / report.MARKDOWN_NAME).read_text()
    assert "## Arrivals" in text and "Poisson" in text and "goodput req/s" in text


def test_request_rate_inf_is_a_burst_not_the_closed_loop(tmp_path):
    """`--request-rate inf`, as sglang.bench_serving takes it: every request of the round at its start."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=6, tokens=8)
    with SGLangServer(dataclasses.replace(FAST, gather=12)) as server:
        doc, out = run(server.url, tmp_path, prompts=prompts, request_rate="inf", num_requests=12)
    (record,) = doc["rounds"]
    assert record["mode"] == "open" and record["offered_rate"] == "inf", record
    assert {s["scheduled_s"] for s in doc["samples"]} == {0.0}, "every request is scheduled at the round's start"
    assert server.max_in_flight == 12, f"a burst has all 12 in flight at once, not {server.max_in_flight}"
    json.loads((out / "bench.json").read_text(), parse_constant=lambda c: pytest.fail(f"bench.json holds {c}"))
    assert "Offered a burst" in (out / report.MARKDOWN_NAME).read_text()


def test_open_loop_cap_bounds_the_requests_in_flight(tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl", count=10, tokens=32)
    with SGLangServer(FAST) as server:
        run(server.url, tmp_path, prompts=prompts, request_rate=500, max_concurrency=3, num_requests=20)
        assert server.max_in_flight == 3, f"the cap of 3 allowed {server.max_in_flight}"


# --- acceptance ---------------------------------------------------------------------------------


def test_every_spec_field_is_kept_and_acceptance_by_position_is_exact(tmp_path):
    histogram = (2, 3, 4, 1)  # verify steps that accepted 0, 1, 2, 3 draft tokens
    prompts = write_prompts(tmp_path / "p.jsonl", count=3, tokens=16)
    with SGLangServer(Behaviour(step_s=0.002, ttft_s=0.01, accept=(2, 3), spec=True, histogram=histogram)) as server:
        doc, out = run(server.url, tmp_path, levels="1", prompts=prompts, clock=ReadingClock(0.001))
    for s in doc["samples"]:
        for key in ("spec_accept_length", "spec_verify_ct", "spec_accept_rate", "spec_accept_token_num",
                    "spec_draft_token_num", "spec_accept_histogram"):
            assert s[key] is not None, f"{key} not kept"
        assert s["spec_accept_histogram"] == list(histogram)
    row = doc["summary"]["rows"][0]
    steps = sum(histogram)
    assert row["accept_by_position"] == pytest.approx([8 / steps, 5 / steps, 1 / steps]), "P(>=1), P(>=2), P(>=3)"
    accepted = sum(s["spec_accept_token_num"] for s in doc["samples"])
    drafted = sum(s["spec_draft_token_num"] for s in doc["samples"])
    assert row["accept_rate"] == pytest.approx(accepted / drafted)
    text = (out / report.MARKDOWN_NAME).read_text()
    assert "## Acceptance" in text and "P(>=3)" in text and f"{1 / steps:.3f}" in text


def test_accept_by_position_pools_histograms_by_steps():
    assert stats.accept_by_position([[1, 1], [0, 2, 2]]) == pytest.approx([5 / 6, 2 / 6])
    assert stats.accept_by_position([None, []]) is None


# --- latency figures -------------------------------------------------------------------------------


def test_distributions_are_the_fields(tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl", count=4, tokens=6)
    with SGLangServer(FAST) as server:
        doc, _ = run(server.url, tmp_path, levels="1", prompts=prompts, clock=ReadingClock(0.001), percentiles="50,90")
    row = doc["summary"]["rows"][0]
    # ReadingClock: TTFT 1 ms; 6 events 2 ms apart, 1 token each: latency 11 ms, TPOT (11 - 1) / 5 = 2 ms.
    assert row["ttft_ms"] == {"n": 4, "mean": pytest.approx(1.0), "std": pytest.approx(0.0), "p50": pytest.approx(1.0),
                              "p90": pytest.approx(1.0)}
    assert row["tpot_ms"]["p50"] == pytest.approx(2.0) and row["e2e_s"]["mean"] == pytest.approx(0.011)
    assert set(row["itl_ms"]) == {"n", "mean", "std", "p50", "p90"}
    values = [1.0, 2.0, 4.0]
    assert stats.distribution(values)["std"] == pytest.approx(statistics.pstdev(values))


# --- OpenAI-compatible targets ----------------------------------------------------------------------


@pytest.mark.sglang_env
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_openai_requests_name_the_served_model_and_ask_for_usage(tmp_path, sglang_generator, api):
    """SGLang's OpenAI clients send --api chat and completions: the model field is the first of /v1/models, and the
    stream asks for the server's count (usage-only chunk for chat, usage in every chunk for completions)."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=10)
    with SGLangServer(Behaviour(step_s=0.002, ttft_s=0.01, accept=(1,), served_model_name="kimi")) as server:
        doc, _ = run(server.url, tmp_path, levels="1", prompts=prompts, api=api, **sglang_generator)
        body = server.bodies[-1]
    assert body["model"] == "kimi", "the model is the first of /v1/models"
    usage = {"include_usage": True} if api == "chat" else {"continuous_usage_stats": True}
    assert body["stream"] is True and body["stream_options"] == usage, body
    assert ("messages" in body) == (api == "chat")
    assert all(s["ok"] and s["output_tokens"] == 10 and s["token_source"] == "server" for s in doc["samples"])
    assert doc["metadata"]["target"] == {"api": api, "stream": True, "model": "kimi"}


@pytest.mark.parametrize("generator, api", [("builtin", "native"),
                                            pytest.param("sglang", "chat", marks=pytest.mark.sglang_env)])
def test_non_streaming_measures_latency_only(tmp_path, generator_flags, generator, api):
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=8)
    with SGLangServer(FAST) as server:
        doc, _ = run(server.url, tmp_path, levels="1", prompts=prompts, api=api, stream=False,
                     **generator_flags(generator))
        assert server.bodies[-1]["stream"] is False
    for s in doc["samples"]:
        assert s["ok"] and s["output_tokens"] == 8 and s["ttft_s"] is None and s["latency_s"] > 0


def test_openai_probe_and_api_choice(tmp_path):
    with pytest.raises(UserError, match=r"--api 'grpc': choose one of native, chat, completions"):
        bench.run(Request(generator="builtin", endpoints=["e=http://127.0.0.1:1"], api="grpc"), environ={}, progress=False)
    # the built-in client sends /generate only: refused before any request
    with pytest.raises(UserError, match=r"^--api chat with --generator builtin: the built-in client sends SGLang's "
                                        r"/generate only; SGLang's own benchmark \(the default generator\) sends the "
                                        r"OpenAI APIs$"):
        bench.run(Request(generator="builtin", endpoints=["e=http://127.0.0.1:1"], api="chat", out=tmp_path / "b"),
                  environ={}, progress=False)
    assert not (tmp_path / "b").exists()
    with SGLangServer(Behaviour(api_key="k")) as server:
        with pytest.raises(UserError, match=r"refuses the API key: HTTP 401 from /v1/models"):
            bench.run(Request(endpoints=[f"e={server.url}"], api="chat", out=tmp_path / "x"), environ={}, progress=False)


# --- datasets ----------------------------------------------------------------------------------------


def test_sharegpt_file_and_random_lengths(tmp_path):
    share = tmp_path / "sharegpt.json"
    share.write_text(json.dumps([
        {"id": "a", "conversations": [{"from": "human", "value": "What is RDMA?"}, {"from": "gpt", "value": "..."}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "no human turn"}]},
        {"id": "c", "conversations": [{"from": "human", "value": "Explain NCCL."}]},
    ]))
    prompt_set = promptset.load_prompts(share)
    assert prompt_set.kind == "sharegpt" and [p.prompt for p in prompt_set.prompts] == ["What is RDMA?", "Explain NCCL."]
    random_set = promptset.random_prompts(5, 100, 20, range_ratio=0.5, seed=1)
    assert [len(p.input_ids) for p in random_set.prompts] == [len(p.input_ids) for p in promptset.random_prompts(5, 100, 20, 0.5, 1).prompts]
    assert all(50 <= len(p.input_ids) <= 150 and 10 <= p.max_new_tokens <= 30 for p in random_set.prompts)
    with SGLangServer(FAST) as server:
        doc, _ = run(server.url, tmp_path, levels="1", dataset="random", num_requests=3, random_input_len=7,
                     random_output_len=4)
        assert len(server.bodies[-1]["input_ids"]) == 7, "the native API gets the ids: an exact input length"
    assert doc["metadata"]["prompt_set"]["kind"] == "random" and {s["output_tokens"] for s in doc["samples"]} == {4}


# --- usability ---------------------------------------------------------------------------------------


def test_a_failed_flush_is_a_warning_and_a_column(tmp_path, capsys):
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=4)
    with SGLangServer(Behaviour(step_s=0.002, ttft_s=0.01, flush_status=404)) as server:
        doc, out = run(server.url, tmp_path, levels="1", prompts=prompts)
    assert "warning: e: /flush_cache answered 404 (not SGLang itself: a router or proxy in front?)" in capsys.readouterr().err
    assert doc["rounds"][0]["cache_flushed"] is False and doc["summary"]["rows"][0]["cache_flushed"] == "0/1"


def test_live_progress_on_a_terminal_plain_lines_otherwise(monkeypatch):
    lines = []
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buffer)
    bar = Progress(2, out=lines.append, live=True)
    bar.request_done("e", 1, 4, 10, 1.0)
    bar.request_done("e", 4, 4, 40, 2.0)
    assert "\r[1/2] e: 1/4 requests, 10 tok/s, 1 s" in buffer.getvalue() and "4/4 requests, 20 tok/s" in buffer.getvalue()
    quiet = io.StringIO()
    monkeypatch.setattr(sys, "stdout", quiet)
    Progress(2, out=lines.append, live=False).request_done("e", 1, 4, 10, 1.0)
    assert quiet.getvalue() == "", "no live line in a log"


# --- provenance ---------------------------------------------------------------------------------------


def test_provenance_is_recorded_and_no_secret_is(tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=4)
    key = "sk-provenance-test-key"
    (tmp_path / "key").write_text(key)
    with SGLangServer(Behaviour(api_key=key, server_info={"version": "0.5.9", "tp_size": 8})) as server:
        out = tmp_path / "r"
        bench.run(Request(generator="builtin", endpoints=[f"e={server.url}"], levels="1", repeats=1, warmup=0, prompts=prompts, out=out), environ={"SGLANG_API_KEY_FILE": str(tmp_path / "key")}, progress=False)
    doc = json.loads((out / report.JSON_NAME).read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert doc["metadata"]["provenance"]["stack"]["commit"] == head
    assert "gpus" in doc["metadata"]["provenance"] and "images" in doc["metadata"]["provenance"]
    pins = doc["metadata"]["provenance"]["models"]
    assert {role: (p["repo"], p["revision"]) for role, p in pins.items()} == {
        "target": ("moonshotai/Kimi-K2.5", None), "drafter": ("lightseekorg/kimi-k2.5-eagle3", None),
        "drafter-mla": ("lightseekorg/kimi-k2.5-eagle3-mla", None)}, "models.lock, unpinned"
    assert doc["metadata"]["endpoints"][0]["server"] == {"version": "0.5.9", "tp_size": 8}
    for name in (report.JSON_NAME, report.MARKDOWN_NAME):
        assert key not in (out / name).read_text(), f"the API key is in {name}"


def test_provenance_cites_what_invoke_verify_found_for_the_image(tmp_path, monkeypatch):
    from sglang_stack.bench import provenance
    from sglang_stack.image import verify as verify_image

    monkeypatch.setattr(verify_image, "RECORDS", tmp_path)
    image_id = "sha256:" + "ab" * 32
    assert provenance.verified(image_id) is None, "never verified"
    report = verify_image.Report("x:1", image_id, "runtime", [verify_image.Check("labels", True, "."),
                                                             verify_image.Check("patches", False, "f: differs"),
                                                             verify_image.Check("digest", None, "not compared")])
    verify_image.write_record(report)
    found = provenance.verified(image_id)
    assert found["ok"] is False and found["failed"] == ["patches"]
    assert found["commit"] == subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
