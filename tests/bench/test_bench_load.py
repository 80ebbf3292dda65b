"""`invoke bench` against loopback stand-ins with known schedules: the load it offers, and what it reads back.

Sustained concurrency, open-loop arrivals, every acceptance figure, OpenAI-compatible targets, datasets and
provenance, each sent by SGLang's own benchmark (the ``sglang_generator`` fixture). Counts are asserted exactly, and
times within bounds derived in each test, since SGLang's benchmark times the streams on the real clock.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import statistics
import subprocess
import sys

import pytest

from conftest import load_factor
from sglang_server import Behaviour, SGLangServer
from sglang_stack import ROOT
from sglang_stack.bench import measure as bench, promptset, report, rounds, stats
from sglang_stack.bench.display import Progress
from sglang_stack.errors import UserError
from sglang_stack.bench.request import Request
from test_bench import write_prompts

FAST = Behaviour(step_s=0.002, ttft_s=0.01, accept=(1,))


@pytest.fixture
def run(sglang_generator):
    """``run(URL, tmp_path, **flags)``: one `invoke bench` of one endpoint, one repeat, no warm-up unless asked; (bench.json, out)."""
    def measure(server_url, tmp_path, name="e", **kwargs):
        out = tmp_path / kwargs.pop("out", "r")
        bench.run(Request(endpoints=[f"{name}={server_url}"], out=out, **{"warmup": 0, "repeats": 1, **sglang_generator,
                                                                           **kwargs}),
                  environ={}, progress=False)
        return json.loads((out / report.JSON_NAME).read_text()), out

    return measure


# --- closed loop: N in flight for the measured window ---------------------------------------------


def test_level_16_keeps_16_in_flight_for_the_measured_window(tmp_path, run):
    """v1 sent the 18 prompts once per round: at c=16 the mean in flight was 9. Now the prompts are cycled.

    The window runs from the 16th start to the first end after the last start. Over it, the number in flight, counted
    here from every request's start and end, must average close to 16: SGLang's benchmark starts the next request as
    soon as one ends, so the only gaps are its own overhead.
    """
    prompts = write_prompts(tmp_path / "p.jsonl", count=18, tokens=32)
    # Requests of about 1.3 s, 25 events a second each: long enough that the stand-in's own threads see all 16 at once
    # on a busy host, and that the client's resends there are a small part of each slot. Its one asyncio loop reads
    # every event too: at 50 a second per request (20 ms steps) a CI run beside the image builds left it 115 ms late
    # per resend (13.5 in flight at a load of 1.8).
    with SGLangServer(Behaviour(step_s=0.04, ttft_s=0.01, accept=(1,))) as server:
        doc, out = run(server.url, tmp_path, levels="16", prompts=prompts)
        assert server.max_in_flight == 16, f"the server saw at most {server.max_in_flight} at once"
    (record,) = doc["rounds"]
    assert record["requests"] == rounds.round_size(18, 16) == 54, "the prompts cycled: 3 passes, 3 per slot"
    samples = [s for s in doc["samples"] if s["round"] == record["index"]]
    begin, end = record["window_s"]
    starts = sorted(s["round_start_s"] for s in samples)
    assert begin == pytest.approx(starts[15], abs=1e-6), "from the moment all 16 were in flight"
    assert end == pytest.approx(min(s["round_end_s"] for s in samples if s["round_end_s"] > starts[-1]), abs=1e-6), \
        "until the first end after the last start"
    # The number in flight, stepped through every start (+1) and end (-1) inside the window
    changes = sorted([(s["round_start_s"], 1) for s in samples] + [(s["round_end_s"], -1) for s in samples])
    area, count, at = 0.0, 0, begin
    for t, step in changes:
        if t > begin:
            area += count * (min(t, end) - at)
            at = min(t, end)
        count += step
    area += count * (end - at)
    assert record["mean_in_flight"] == pytest.approx(area / (end - begin), abs=1e-4)
    # the gaps are SGLang's client's resends, on one asyncio loop: a busy machine makes them longer
    assert record["mean_in_flight"] > 16 - min(load_factor(), 4), f"mean in flight {record['mean_in_flight']:.2f} at c=16"
    in_window = [s for s in samples if s["in_window"]]
    # the window ends at a request's end; bench.json keeps the window to the microsecond
    assert all(s["round_end_s"] <= end + 1e-6 for s in in_window)
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


def test_open_loop_sends_at_the_rate_and_reports_offered_and_achieved_rates(tmp_path, run):
    """SGLang's benchmark draws Poisson gaps of mean 1/R: over 39 gaps the rate actually sent is R within a factor
    that four standard errors of that mean allow, and the dispatch delay widens (with the machine's load)."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=10, tokens=8)
    rate = 40.0
    with SGLangServer(FAST) as server:
        doc, out = run(server.url, tmp_path, prompts=prompts, request_rate=rate, num_requests=40, seed=3,
                       slo="ttft:1000,e2e:5000")
    (record,) = doc["rounds"]
    assert record["mode"] == "open" and record["requests"] == 40 and record["offered_rate"] == rate
    spread = 4 / 39 ** 0.5  # the mean of 39 exponential gaps has a standard error of 1/sqrt(39) of it
    assert rate / (1 + spread) / min(load_factor(), 4) <= record["sent_rate"] <= rate / (1 - spread), record["sent_rate"]
    assert record["achieved_rate"] > 0 and record["goodput_rate"] == pytest.approx(record["achieved_rate"]), \
        "every request met a 1 s TTFT and a 5 s latency"
    assert doc["metadata"]["load"]["mode"] == "open" and doc["metadata"]["load"]["burstiness"] == 1.0
    text = (out / report.MARKDOWN_NAME).read_text()
    assert "## Arrivals" in text and "Poisson" in text and "goodput req/s" in text


def test_request_rate_inf_is_a_burst_not_the_closed_loop(tmp_path, run):
    """`--request-rate inf`, as sglang.bench_serving takes it: every request of the round at its start."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=6, tokens=8)
    with SGLangServer(dataclasses.replace(FAST, gather=12)) as server:
        doc, out = run(server.url, tmp_path, prompts=prompts, request_rate="inf", num_requests=12)
    (record,) = doc["rounds"]
    assert record["mode"] == "open" and record["offered_rate"] == "inf", record
    assert server.max_in_flight == 12, f"a burst has all 12 in flight at once, not {server.max_in_flight}"
    json.loads((out / "bench.json").read_text(), parse_constant=lambda c: pytest.fail(f"bench.json holds {c}"))
    assert "Offered a burst" in (out / report.MARKDOWN_NAME).read_text()


def test_open_loop_cap_bounds_the_requests_in_flight(tmp_path, run):
    prompts = write_prompts(tmp_path / "p.jsonl", count=10, tokens=32)
    with SGLangServer(FAST) as server:
        run(server.url, tmp_path, prompts=prompts, request_rate=500, max_concurrency=3, num_requests=20)
        assert server.max_in_flight == 3, f"the cap of 3 allowed {server.max_in_flight}"


# --- acceptance ---------------------------------------------------------------------------------


def test_every_spec_field_is_kept_and_acceptance_by_position_is_exact(tmp_path, run):
    """SGLang's clients keep the accept length at most; the driver keeps every spec_* figure of the last meta_info."""
    histogram = (2, 3, 4, 1)  # verify steps that accepted 0, 1, 2, 3 draft tokens
    prompts = write_prompts(tmp_path / "p.jsonl", count=3, tokens=16)
    with SGLangServer(Behaviour(step_s=0.002, ttft_s=0.01, accept=(2, 3), spec=True, histogram=histogram)) as server:
        doc, out = run(server.url, tmp_path, levels="1", prompts=prompts)
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


def test_distributions_are_the_fields(tmp_path, run):
    prompts = write_prompts(tmp_path / "p.jsonl", count=4, tokens=6)
    # Steps of 10 ms, not 2: a client that stalls on a busy host reads queued tokens at once, and a stall of a few ms
    # took a fifth off a 2 ms TPOT (1.49 ms, beside the image builds); one warm-up request takes the first one's cost.
    with SGLangServer(Behaviour(step_s=0.01, ttft_s=0.02, accept=(1,))) as server:
        doc, _ = run(server.url, tmp_path, levels="1", prompts=prompts, percentiles="50,90", warmup=1)
    row = doc["summary"]["rows"][0]
    # Served: TTFT 20 ms, then 5 steps of 1 token 10 ms apart: latency 70 ms, TPOT 10 ms; never faster.
    assert set(row["ttft_ms"]) == {"n", "mean", "std", "p50", "p90"} and row["ttft_ms"]["n"] == 4, row["ttft_ms"]
    assert row["ttft_ms"]["p50"] >= 20.0 * 0.98 and row["e2e_s"]["mean"] >= 0.070 * 0.98, row
    assert row["tpot_ms"]["p50"] >= 10.0 * 0.8, row["tpot_ms"]
    ttfts = sorted(s["ttft_s"] * 1e3 for s in doc["samples"])
    assert row["ttft_ms"]["mean"] == pytest.approx(statistics.fmean(ttfts), abs=1e-3), "the mean of the samples"
    assert row["ttft_ms"]["p50"] == pytest.approx((ttfts[1] + ttfts[2]) / 2, abs=1e-3), "p50 of 4: between the middle two"
    assert set(row["itl_ms"]) == {"n", "mean", "std", "p50", "p90"}
    values = [1.0, 2.0, 4.0]
    assert stats.distribution(values)["std"] == pytest.approx(statistics.pstdev(values))


# --- OpenAI-compatible targets ----------------------------------------------------------------------


@pytest.mark.sglang_env
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_openai_requests_name_the_served_model_and_ask_for_usage(tmp_path, run, api):
    """SGLang's OpenAI clients send --api chat and completions: the model field is the first of /v1/models, and the
    stream asks for the server's count (usage-only chunk for chat, usage in every chunk for completions)."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=10)
    with SGLangServer(Behaviour(step_s=0.002, ttft_s=0.01, accept=(1,), served_model_name="kimi")) as server:
        doc, _ = run(server.url, tmp_path, levels="1", prompts=prompts, api=api)
        body = server.bodies[-1]
    assert body["model"] == "kimi", "the model is the first of /v1/models"
    usage = {"include_usage": True} if api == "chat" else {"continuous_usage_stats": True}
    assert body["stream"] is True and body["stream_options"] == usage, body
    assert ("messages" in body) == (api == "chat")
    assert all(s["ok"] and s["output_tokens"] == 10 and s["token_source"] == "server" for s in doc["samples"])
    assert doc["metadata"]["target"] == {"api": api, "stream": True, "model": "kimi"}


@pytest.mark.parametrize("api", ["native", "chat"])
def test_non_streaming_measures_latency_only(tmp_path, run, api):
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=8)
    with SGLangServer(FAST) as server:
        doc, _ = run(server.url, tmp_path, levels="1", prompts=prompts, api=api, stream=False)
        assert server.bodies[-1]["stream"] is False
    for s in doc["samples"]:
        assert s["ok"] and s["output_tokens"] == 8 and s["ttft_s"] is None and s["latency_s"] > 0


def test_openai_probe_and_api_choice(tmp_path):
    with pytest.raises(UserError, match=r"--api 'grpc': choose one of native, chat, completions"):
        bench.run(Request(endpoints=["e=http://127.0.0.1:1"], api="grpc"), environ={}, progress=False)
    with SGLangServer(Behaviour(api_key="k")) as server:
        with pytest.raises(UserError, match=r"refuses the API key: HTTP 401 from /v1/models"):
            bench.run(Request(endpoints=[f"e={server.url}"], api="chat", out=tmp_path / "x"), environ={}, progress=False)


# --- datasets ----------------------------------------------------------------------------------------


def test_a_sharegpt_file_is_read_by_sglangs_adapter(tmp_path, run):
    """SGLang's sharegpt adapter sends the first turn of each conversation of two turns or more, asking for as many
    tokens as its answer has (the word-level tokenizer counts one per word)."""
    share = tmp_path / "sharegpt.json"
    share.write_text(json.dumps([
        {"id": "a", "conversations": [{"from": "human", "value": "What is RDMA?"}, {"from": "gpt", "value": "1 2 3 4 5"}]},
        {"id": "b", "conversations": [{"from": "gpt", "value": "one turn only"}]},
        {"id": "c", "conversations": [{"from": "human", "value": "Explain NCCL."}, {"from": "gpt", "value": "6 7 8"}]},
    ]))
    with SGLangServer(FAST) as server:
        doc, _ = run(server.url, tmp_path, levels="1", prompts=str(share))
        sent = {b["text"]: b["sampling_params"]["max_new_tokens"] for b in server.bodies if "text" in b}
    assert sent == {"What is RDMA?": 5, "Explain NCCL.": 3}, sent
    made = doc["metadata"]["prompt_set"]
    assert made["kind"] == "sharegpt" and made["prompts"] == 2 and made["made"]["dataset"] == "sharegpt", made
    assert made["made"]["file_sha256"] == hashlib.sha256(share.read_bytes()).hexdigest(), made


@pytest.mark.parametrize("content, says", [
    (b'[{"conversations": [1, 2]}]', "no conversation with a human turn and an answer"),
    (b'[{"conversations": [{"from": "human", "value": "hi"}]}]', "no conversation with a human turn and an answer"),
    (b'{"conversations": []}', "no conversation with a human turn and an answer"),
    (b'[{"conversations": [', "not JSON (Expecting value: line 1 column 21 (char 20))"),
    (b'["\xff"]', "not JSON ("),
])
def test_a_sharegpt_file_sglangs_adapter_would_make_nothing_of_is_named(tmp_path, content, says):
    share = tmp_path / "s.json"
    share.write_bytes(content)
    with pytest.raises(UserError) as err:
        promptset.check_sharegpt(share)
    assert str(err.value).startswith(f"{share}: {says}") and "\n" not in str(err.value), err.value


@pytest.mark.parametrize("ratio, lengths", [("0", ({7}, {4})), ("0.5", (set(range(4, 11)), set(range(2, 7))))])
def test_random_prompts_are_sglangs_random_ids_within_our_range(tmp_path, run, ratio, lengths):
    """``--random-range-ratio r`` draws lengths from [len * (1 - r), len * (1 + r)], said to SGLang's adapter its
    own way; the native API gets the ids, so an input length is exact."""
    with SGLangServer(FAST) as server:
        doc, _ = run(server.url, tmp_path, levels="1", dataset="random", num_requests=24, random_input_len=7,
                     random_output_len=4, random_range_ratio=ratio)
        inputs = [len(b["input_ids"]) for b in server.bodies if "input_ids" in b]
    outputs = [s["output_tokens"] for s in doc["samples"]]
    assert len(inputs) == 24 and set(inputs) <= lengths[0] and set(outputs) <= lengths[1], (inputs, outputs)
    if ratio != "0":
        assert min(inputs) < 7 < max(inputs), f"24 draws from 4..10 cover both sides of 7: {inputs}"
    assert doc["metadata"]["prompt_set"]["kind"] == "random"


# --- usability ---------------------------------------------------------------------------------------


def test_a_failed_flush_is_a_warning_and_a_column(tmp_path, capsys, run):
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


def test_provenance_is_recorded_and_no_secret_is(tmp_path, sglang_generator):
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=4)
    key = "sk-provenance-test-key"
    (tmp_path / "key").write_text(key)
    with SGLangServer(Behaviour(api_key=key, server_info={"version": "0.5.9", "tp_size": 8})) as server:
        out = tmp_path / "r"
        bench.run(Request(endpoints=[f"e={server.url}"], levels="1", repeats=1, warmup=0, prompts=prompts, out=out,
                          **sglang_generator), environ={"SGLANG_API_KEY_FILE": str(tmp_path / "key")}, progress=False)
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
