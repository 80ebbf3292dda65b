"""invoke acceptance: SGLang's own acceptance figures from a fixed probe, judged against the drafter's expectation."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from sglang_server import Behaviour, SGLangServer
from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack.services import models
from sglang_stack.bench import acceptance

NORMAL = (2, 3, 2)  # tokens per verify step: 1, 2 and 1 draft tokens accepted
LOW = (1,)  # a drafter that never hits: #22836's zero acceptance
SPEC_INFO = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
             "speculative_num_draft_tokens": 4}


def eagle3(accept, **kw) -> SGLangServer:
    return SGLangServer(Behaviour(step_s=0.0005, ttft_s=0.001, accept=accept, spec=True, server_info=SPEC_INFO, **kw))


def invoke(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_probe_is_fixed_greedy_and_reads_sglangs_own_figures():
    with eagle3(NORMAL) as server:
        m = acceptance.measure(server.url, None, timeout=30)
    bodies = server.bodies
    assert [b["text"] for b in bodies] == [p.prompt for p in acceptance.probe_prompts()], "the probe is the fixed prompt list"
    assert all(b["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 256} for b in bodies), bodies[0]
    assert all(b.get("stream") is False for b in bodies), "one JSON answer per request, meta_info included"
    served = server.served
    assert m.completion_tokens == sum(s["tokens"] for s in served) and m.verify_passes == sum(s["verify"] for s in served)
    assert m.accept_length == pytest.approx(m.completion_tokens / m.verify_passes), "pooled: tokens over verify passes"
    assert 2.2 < m.accept_length < 2.4, f"2, 3, 2 tokens per verify step: {m.accept_length}"
    assert m.accept_by_position and m.accept_by_position[0] == pytest.approx(1.0, abs=0.02), m.accept_by_position
    assert m.accept_by_position[1] == pytest.approx(1 / 3, abs=0.02), "one step in three accepts two drafts"
    assert m.settings == "3/1/4", f"the speculative settings the server reports: {m.settings}"


def test_low_acceptance_fails_the_floor_and_names_what_to_check():
    with eagle3(LOW) as server:
        m = acceptance.measure(server.url, None, timeout=30)
    assert m.accept_length == pytest.approx(1.0, abs=0.01), m.accept_length
    passed, line = acceptance.verdict(m, None, None)
    assert not passed and "below 1.20" in line and "all-reduce fusion" in line and "drafter's revision" in line, line
    assert acceptance.verdict(m, None, 0.0) == (True, "the check is off (--accept-min 0)")


def test_the_expectation_applies_at_its_own_settings_only():
    m = acceptance.Measurement(url="u", requests=6, completion_tokens=1400, verify_passes=500, accept_length=2.8,
                               settings="3/1/4")
    expected = models.Expectation(3.05, 0.15, "3/1/4", "a first run accepted")
    passed, line = acceptance.verdict(m, expected, None)
    assert not passed and "below 2.90" in line and "models.lock expects 3.05 - 0.15" in line, line
    elsewhere = models.Expectation(3.05, 0.15, "2/1/3", "a first run accepted")
    passed, line = acceptance.verdict(m, elsewhere, None)
    assert passed and "the floor 1.2" in line and "2/1/3" in line, f"other settings: only the floor holds: {line}"
    assert acceptance.verdict(m, expected, 2.5)[0], "--accept-min overrides the expectation"


def test_a_server_without_speculation_is_an_error_not_a_pass():
    with SGLangServer(Behaviour(step_s=0.0005, ttft_s=0.001)) as server:
        with pytest.raises(UserError) as err:
            acceptance.measure(server.url, None, timeout=30)
    assert "reports no speculative figures" in str(err.value) and "baseline" in str(err.value), err.value


def test_an_accepted_run_becomes_the_drafters_expectation(tmp_path):
    with eagle3(NORMAL) as server:
        m = acceptance.measure(server.url, None, timeout=30)
    report = tmp_path / "acceptance.json"
    report.write_text(json.dumps(acceptance.report(m, True, "ok")))
    lock = tmp_path / "models.lock"
    shutil.copy(models.MODELS_LOCK, lock)
    line = models.record_acceptance(acceptance.baseline_from(report), lock)
    assert line.startswith("drafter lightseekorg/kimi-k2.5-eagle3: expects accept length 2.3"), line
    drafter = models.load(lock)["drafter"]
    assert drafter.acceptance["tolerance"] == 0.15 and drafter.acceptance["settings"] == "3/1/4", drafter.acceptance
    assert "acceptance.json" in drafter.acceptance["source"], drafter.acceptance
    assert models.load(lock)["target"].acceptance is None
    again = models.render(models.load(lock))
    assert again == lock.read_text(), "the lock round-trips"


def test_a_bench_json_can_be_the_baseline(tmp_path):
    doc = {"summary": {"rows": [{"endpoint": "eagle3", "level": 4, "accept_length": 2.9},
                                {"endpoint": "eagle3", "level": 1, "accept_length": 3.1},
                                {"endpoint": "baseline", "level": 1, "accept_length": None}]},
           "metadata": {"endpoints": [{"name": "eagle3", "server_info": SPEC_INFO}]}}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(doc))
    expected = acceptance.baseline_from(path)
    assert (expected.accept_length, expected.tolerance, expected.settings) == (3.1, 0.3, "3/1/4"), expected
    assert "concurrency 1" in expected.source


@pytest.mark.parametrize("text, words", [
    ("[1, 2]", ["neither"]),
    ('{"kind": "sglang-stack acceptance", "accept_length": 0.5}', ["accept length 0.5"]),
    ("{not json", ["not JSON"]),
])
def test_a_bad_baseline_is_one_line(tmp_path, text, words):
    path = tmp_path / "b.json"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        acceptance.baseline_from(path)
    assert all(w in str(err.value) for w in words) and str(err.value).startswith(str(path)), err.value


def test_invoke_acceptance_exits_1_below_and_0_above(tmp_path):
    with eagle3(LOW) as low, eagle3(NORMAL) as normal:
        failed = invoke("acceptance", "eagle3", "--url", low.url)
        passed = invoke("acceptance", "eagle3", "--url", normal.url, "--out", str(tmp_path / "a.json"))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "Traceback" not in failed.stderr and failed.stderr.strip().startswith("error: eagle3: accept length 1.00 is below"), \
        failed.stderr
    assert "accept length 1.00" in failed.stdout and "P(>=1) 0.00" in failed.stdout, failed.stdout
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert json.loads((tmp_path / "a.json").read_text())["kind"] == acceptance.REPORT_KIND


def test_invoke_acceptance_refuses_bad_flags():
    for args, words in ((["baseline"], "does not speculate"), (["eagle3", "--accept-min", "lots"], "--accept-min"),
                        (["eagle3", "--out", "/nonexistent/dir/a.json"], "is not a directory"),
                        (["--url", "notaurl"], "--url 'notaurl': 'notaurl' is not an http:// or https:// URL with a host"),
                        (["--url", "http://"], "--url 'http://': 'http://' is not an http:// or https:// URL"),
                        (["--url", "http://h:99999"], "--url 'http://h:99999': bad port")):
        proc = invoke("acceptance", *args)
        assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr, (args, proc.stderr)


def test_the_hint_repeats_the_command_that_was_run(tmp_path):
    """With --url and no expectation recorded, the closing hint is a command that works: the same URL, not a
    service this host may not have."""
    m = acceptance.Measurement(url="u", requests=6, completion_tokens=600, verify_passes=500, accept_length=1.2,
                               accept_by_position=[0.2], settings="3/1/4", seconds=1.0)
    _, line = acceptance.verdict(m, None, None, "invoke acceptance --url http://10.0.0.5:30001")
    assert "accept a first run: invoke acceptance --url http://10.0.0.5:30001 --out acceptance.json" in line, line
