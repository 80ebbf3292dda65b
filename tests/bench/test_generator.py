"""`invoke bench --generator sglang`: SGLang's own serving benchmark (``sglang.benchmark.serving``, the 0.5.23
profile's, in a CPU Python of its pins; 0.5.9's ``sglang.bench_serving`` where named) sends every round to loopback
stand-ins, and what the built-in generator was held to stays true: tokens counted as tokens (the speculative stand-in
streams two or three a step), the level held over the measured window, the accept length of each request, the rounds
interleaved; one benchmark process serves every round of the process."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from pins import PIN
from sglang_server import Behaviour, SGLangServer
from sglang_stack.bench import measure as bench, report, upstream
from sglang_stack.bench.request import Request
from sglang_stack.errors import UserError
from test_bench import write_prompts
from word_tokenizer import word_tokenizer

TOKENS = 22  # the first event 1, then steps of 2, 3 and 2 (7 tokens in 3 steps): 1 + 3 * 7
BASE = Behaviour(step_s=0.004, ttft_s=0.02, accept=(1,), server_info={"speculative_algorithm": None})
SPEC = Behaviour(step_s=0.006, ttft_s=0.02, accept=(2, 3, 2), spec=True,
                 server_info={"speculative_algorithm": "EAGLE3", "speculative_num_steps": 2,
                              "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3})


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return word_tokenizer(tmp_path_factory.mktemp("tok") / "tok", ["[UNK]", "prompt", "number"])


def load(out) -> dict:
    return json.loads((out / report.JSON_NAME).read_text())


@pytest.mark.sglang_env
def test_sglangs_benchmark_counts_tokens_holds_the_level_and_keeps_acceptance(tmp_path, sglang_generator):
    prompts = write_prompts(tmp_path / "p.jsonl", count=4, tokens=TOKENS)
    with SGLangServer(BASE) as base, SGLangServer(SPEC) as spec:
        out = bench.run(Request(endpoints=[f"baseline={base.url}", f"eagle3={spec.url}"], levels="1,4", repeats=2,
                                warmup=1, prompts=prompts, out=tmp_path / "r", **sglang_generator), environ={},
                        progress=False)
    doc = load(out)
    assert doc["complete"], doc["error"]
    made = doc["metadata"]["load"]["generator"]
    assert made["name"] == "sglang" and made["sglang"] == upstream.PROFILE and "python" in made["where"], made
    ok = [s for s in doc["samples"] if s["ok"]]
    # 1 warm-up each is SGLang's, unrecorded; rounds of 4 at level 1 and 12 at level 4, 2 repeats, 2 endpoints
    assert len(ok) == len(doc["samples"]) == 2 * 2 * (4 + 12), len(doc["samples"])
    # Tokens as tokens: the server's count, whatever the events carried.
    assert {s["output_tokens"] for s in ok} == {TOKENS}, {s["output_tokens"] for s in ok}
    rows = {(r["endpoint"], r["level"]): r for r in doc["summary"]["rows"]}
    assert 0.9 < rows["baseline", 1]["mean_in_flight"] <= 1.0 and 3.5 < rows["eagle3", 4]["mean_in_flight"] <= 4.0, rows
    # SGLang's accept length per request: output tokens over verify passes, 22 over the stand-in's 9 steps
    assert rows["eagle3", 1]["accept_length"] == pytest.approx(TOKENS / 9), rows["eagle3", 1]
    assert rows["baseline", 1]["accept_length"] is None, rows["baseline", 1]
    # A speculative step streams 2 or 3 tokens, so its ITL is split over them: under a step
    assert rows["eagle3", 1]["itl_ms"]["mean"] < SPEC.step_s * 1e3, rows["eagle3", 1]["itl_ms"]
    order = [(r["repeat"], r["endpoint"]) for r in doc["rounds"] if r["level"] == 1]
    assert order == [(0, "baseline"), (0, "eagle3"), (1, "eagle3"), (1, "baseline")], order
    assert (f"- sent by SGLang's own serving benchmark (sglang.benchmark.serving {upstream.PROFILE}, python "
            in (out / report.MARKDOWN_NAME).read_text())


@pytest.mark.sglang_env
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_the_openai_apis_are_sent_by_sglangs_own_openai_backends(tmp_path, sglang_generator, api):
    """--api completions and chat: SGLang's sglang-oai and sglang-oai-chat backends; the server's usage counts."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=TOKENS)
    with SGLangServer(SPEC) as server:
        out = bench.run(Request(endpoints=[f"x={server.url}"], levels="2", repeats=1, warmup=0, prompts=prompts,
                                api=api, out=tmp_path / "r", **sglang_generator), environ={}, progress=False)
    doc = load(out)
    assert doc["complete"] and doc["metadata"]["target"]["api"] == api, doc["error"]
    assert {s["output_tokens"] for s in doc["samples"]} == {TOKENS}, doc["samples"]
    (row,) = doc["summary"]["rows"]
    assert 1.5 < row["mean_in_flight"] <= 2.0, row


# A speculative answer that ends at its EOS: 40 tokens where 64 were asked for, in events of 1, 3, 6, 8, 10, 13, ...
# 38 and 40, over 17 steps of 20 ms: long enough that a hiccup of the client's on a busy host is a small part of it
EARLY = Behaviour(step_s=0.02, ttft_s=0.02, accept=(2, 3, 2), spec=True, eos_at=40, server_info=SPEC.server_info)


@pytest.mark.parametrize("generator, api", [(generator, api) for generator in ("sglang", "sglang-default")
                                            for api in ("native", "completions", "chat")])
def test_tokens_served_count_not_tokens_asked_for_and_decode_speed_is_tokens_per_second(tmp_path, generator_flags,
                                                                                        api, generator):
    """Each release's client on each API counts the 40 tokens of an answer that stopped early, not the 64 asked for (SGLang's
    OpenAI clients count the requested length where no chunk carries usage), and its decode speed is tokens per
    second, within a quarter of the server's own, though every chunk of a speculative step carries 2 or 3 (one ITL per
    chunk made it chunks per second: 17 over 39 of it). The warm-up request takes the client's first-request costs
    (a busy host stalled an unwarmed first request by 70 ms, which then read its events all at once)."""
    flags = generator_flags(generator)
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=64)
    with SGLangServer(EARLY) as server:
        out = bench.run(Request(endpoints=[f"x={server.url}"], levels="1", repeats=1, warmup=1, prompts=prompts,
                                api=api, out=tmp_path / "r", **flags), environ={}, progress=False)
        served = list(server.served)[1:]  # the warm-up's first
    doc = load(out)
    assert doc["complete"], doc["error"]
    samples = doc["samples"]
    assert [s["output_tokens"] for s in samples] == [40, 40], samples
    # the server's decode speed: the tokens after its first event over the time from its first event to its last
    truth = [(r["tokens"] - 1) / (r["sent"][-1] - r["sent"][0]) for r in served]
    ratios = [s["decode_tps"] / t for s, t in zip(samples, truth)]
    assert all(0.75 < r < 1.33 for r in ratios), (ratios, samples)


@pytest.mark.sglang_env
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_a_server_that_streams_no_usage_is_said_to_be_counted_at_the_requested_length(tmp_path, sglang_generator,
                                                                                      api):
    """SGLang's OpenAI clients count the length asked for where no chunk carries usage: every sample and the report
    say so, where the count would otherwise pass for the server's."""
    with SGLangServer(Behaviour(step_s=0.002, ttft_s=0.005, usage=False, eos_at=5)) as server:
        out = bench.run(Request(endpoints=[f"x={server.url}"], levels="1", repeats=1, warmup=0, api=api,
                                prompts=write_prompts(tmp_path / "p.jsonl", count=2, tokens=8), out=tmp_path / "r",
                                **sglang_generator), environ={}, progress=False)
    samples = load(out)["samples"]
    assert [(s["output_tokens"], s["token_source"]) for s in samples] == [(8, "requested")] * 2, samples
    assert "Token counts came from: requested (" in (out / report.MARKDOWN_NAME).read_text()


@pytest.mark.sglang_env
@pytest.mark.parametrize("warmup, flush_status, flushed_after", [(1, 200, [0, 1]), (0, 200, [0]), (1, 404, [0])])
def test_the_cache_is_flushed_again_after_sglangs_warm_up(tmp_path, sglang_generator, warmup, flush_status,
                                                         flushed_after):
    """SGLang warms up inside the first round, with the round's first prompt: where the cache was flushed before the
    round, SGLang flushes it after the warm-up, or that prompt would be found cached; a server without /flush_cache
    (a router: 404) is asked once, and the run goes on."""
    with SGLangServer(Behaviour(step_s=0.002, ttft_s=0.005, flush_status=flush_status)) as server:
        out = bench.run(Request(endpoints=[f"x={server.url}"], levels="1", repeats=1, warmup=warmup,
                                prompts=write_prompts(tmp_path / "p.jsonl", count=2, tokens=4), out=tmp_path / "r",
                                **sglang_generator), environ={}, progress=False)
        log, bodies = list(server.flush_log), len(server.bodies)
    assert load(out)["complete"] and bodies == warmup + 2, bodies
    assert log == flushed_after, f"flushes after this many requests: {log}"


@pytest.mark.sglang_env
def test_one_benchmark_process_serves_every_run_of_the_process(tmp_path, sglang_generator):
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=4)
    pids = []
    with SGLangServer(BASE) as server:
        for n in range(2):
            bench.run(Request(endpoints=[f"x={server.url}"], levels="1", repeats=1, warmup=0, prompts=prompts,
                              out=tmp_path / f"r{n}", **sglang_generator), environ={}, progress=False)
            pids.append({r.proc.pid for r in upstream._RUNNING.values() if r.proc.poll() is None})
    assert pids[0] == pids[1] and pids[0], pids


def test_the_services_profile_is_the_one_compose_reads(tmp_path):
    from sglang_stack.lock import profiles

    dotenv = tmp_path / ".env"
    dotenv.write_text("SGLANG_PROFILE=0.4\n")
    with pytest.raises(UserError) as caught:
        bench.services_profile(bench.stack_env({}, env_file=dotenv))
    assert str(caught.value).startswith(f"SGLANG_PROFILE=0.4 ({dotenv}:1): no such profile (this checkout has "), caught
    assert bench.services_profile(bench.stack_env({}, env_file=tmp_path / "none")) == profiles.default().name
    newer = list(profiles.available())[-1]
    assert bench.services_profile(bench.stack_env({"SGLANG_PROFILE": newer}, env_file=dotenv)) == newer, "shell wins"


@pytest.mark.parametrize("place", ["python", "image"])
def test_where_python_or_image_is_named_the_services_profile_is_not_read(tmp_path, sglang_generator, place):
    """The services' profile only picks the image SGLang's benchmark runs in by default: with --python or --image it
    plays no part, so one this checkout does not have (an .env for another checkout, say) refuses nothing."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=1, tokens=4)
    flags = dict(sglang_generator)
    if place == "image":  # an image that is not there: the run gets as far as asking the engine for it
        flags = {**flags, "python": None, "image": f"sglang-stack-test-{os.getpid()}:absent"}
    with SGLangServer(BASE) as server:
        run = lambda: bench.run(Request(endpoints=[f"x={server.url}"], levels="1", repeats=1, warmup=0,  # noqa: E731
                                        prompts=prompts, out=tmp_path / "r", **flags),
                                environ={"SGLANG_PROFILE": "0.4"}, progress=False)
        if place == "python":
            assert report.load_results(run())["complete"]
        else:
            with pytest.raises(UserError) as caught:
                run()
            assert "SGLANG_PROFILE" not in str(caught.value), caught.value


@pytest.mark.sglang_env
def test_a_server_failing_mid_run_is_one_line_and_keeps_what_was_measured(tmp_path, sglang_generator):
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=6)
    # round 1 (2 requests) succeeds; the 3rd request gets a 500, in repeat 2
    with SGLangServer(Behaviour(step_s=0.002, ttft_s=0.005, fail_after=2, failure="http500")) as server:
        with pytest.raises(UserError, match=r"flaky .* failed at concurrency 1, repeat 2, prompt p0: .*Internal "
                                            r"Server Error") as caught:
            bench.run(Request(endpoints=[f"flaky={server.url}"], levels="1", repeats=3, warmup=0, prompts=prompts,
                              out=tmp_path / "r", **sglang_generator), environ={}, progress=False)
    assert "\n" not in str(caught.value) and "marked incomplete" in str(caught.value), caught.value
    doc = load(tmp_path / "r")
    assert doc["complete"] is False and len([s for s in doc["samples"] if s["ok"]]) >= 2, doc["samples"]


@pytest.mark.sglang_env
def test_the_default_profiles_benchmark_measures_as_the_newer_one_does(tmp_path, default_python, tokenizer):
    """0.5.9 keeps its benchmark in sglang.bench_serving, with its parser in the module's __main__ block and no accept
    length in its outputs: the services' own image measures with it all the same, tokens as tokens, the level held,
    and each request's accept length as the server sent it."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=4, tokens=TOKENS)
    with SGLangServer(BASE) as base, SGLangServer(SPEC) as spec:
        out = bench.run(Request(endpoints=[f"baseline={base.url}", f"eagle3={spec.url}"], levels="1,4", repeats=1,
                                warmup=1, prompts=prompts, out=tmp_path / "r", generator="sglang",
                                python=default_python, tokenizer=str(tokenizer)), environ={}, progress=False)
    doc = load(out)
    assert doc["complete"], doc["error"]
    made = doc["metadata"]["load"]["generator"]
    assert (made["module"], made["sglang"]) == ("sglang.bench_serving", PIN["sglang"]), made
    assert {s["output_tokens"] for s in doc["samples"]} == {TOKENS} and all(s["ok"] for s in doc["samples"])
    rows = {(r["endpoint"], r["level"]): r for r in doc["summary"]["rows"]}
    assert 3.5 < rows["eagle3", 4]["mean_in_flight"] <= 4.0, rows["eagle3", 4]
    assert rows["eagle3", 1]["accept_length"] == pytest.approx(TOKENS / 9), rows["eagle3", 1]
    assert rows["baseline", 1]["accept_length"] is None, rows["baseline", 1]
    assert (f"- sent by SGLang's own serving benchmark (sglang.bench_serving {PIN['sglang']}, python "
            in (out / report.MARKDOWN_NAME).read_text())


@pytest.mark.engine
def test_without_python_or_image_the_benchmark_runs_in_the_services_own_image(tmp_path, docker_engine, tokenizer):
    """`invoke bench` with neither --generator nor --tokenizer: SGLang's benchmark sends the rounds from the image of
    the profile the services run (SGLANG_PROFILE, else the default one), not from another release's, with the
    tokenizer the endpoint serves: where that image is not built, the one line names it and its build."""
    import os
    import subprocess
    import sys

    from sglang_stack import ROOT
    from sglang_stack.engine import DOCKER
    from sglang_stack.image import store
    from sglang_stack.lock import lockfile, profiles

    default = profiles.default()
    tag = lockfile.check_all(default.lock, download=False)[0].tag
    if store.exists(DOCKER, tag):
        pytest.skip(f"{tag} is built here: the benchmark would run in it")
    env = {k: v for k, v in os.environ.items() if k not in ("SGLANG_PROFILE", "SGLANG_STACK_IMAGE")}
    with SGLangServer(replace(BASE, model_path=str(tokenizer))) as server:  # a server started on this host
        argv = [sys.executable, "-m", "invoke", "bench", "--endpoint", f"a={server.url}", "--prompts",
                str(write_prompts(tmp_path / "p.jsonl")), "--out", str(tmp_path / "r")]
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
        assert proc.returncode == 2 and proc.stderr.strip() == (
            f"error: bench: {tag}: no such image in the docker store: build it first (`invoke build --profile "
            f"{default.name}`), or name one with --image, or run SGLang with --python"), proc.stderr
        absent = f"sglang-stack-test-{os.getpid()}:absent"  # compose's image where .env or the shell names one
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env={**env, "SGLANG_STACK_IMAGE": absent})
        assert proc.returncode == 2 and proc.stderr.strip().startswith(
            f"error: bench: {absent}: no such image in the docker store"), proc.stderr
        proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120,
                              env={**env, "SGLANG_PROFILE": "0.4"})
        assert proc.returncode == 2 and proc.stderr.strip().startswith(
            "error: SGLANG_PROFILE=0.4 (shell): no such profile (this checkout has "), proc.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.sglang_env
def test_sglangs_benchmark_is_the_default_and_loads_the_tokenizer_the_endpoint_serves(tmp_path, sglang_generator):
    """No --generator: SGLang's benchmark sends the rounds. No --tokenizer: the model the --endpoint says it serves
    (/server_info's model_path) is a directory on this host, and the tokenizer is loaded from there."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=TOKENS)
    with SGLangServer(replace(BASE, model_path=sglang_generator["tokenizer"])) as server:
        out = bench.run(Request(endpoints=[f"x={server.url}"], levels="1", repeats=1, warmup=0, prompts=prompts,
                                out=tmp_path / "r", python=sglang_generator["python"]), environ={}, progress=False)
    doc = load(out)
    made = doc["metadata"]["load"]["generator"]
    assert made["name"] == "sglang" and made["tokenizer"] == sglang_generator["tokenizer"], made
    assert {s["output_tokens"] for s in doc["samples"]} == {TOKENS}, doc["samples"]


@pytest.mark.parametrize("model_path, says", [
    ("", "--endpoint x: its /server_info names no model_path, whose tokenizer SGLang's benchmark would load: give "
         "--tokenizer DIR or OWNER/NAME[@REVISION], the served model's tokenizer"),
    ("/models/target", "--endpoint x serves /models/target, which is not a directory on this host: give --tokenizer "
                       "DIR or OWNER/NAME[@REVISION], the served model's tokenizer"),
    ("EMPTY", "--endpoint x serves {EMPTY}: no tokenizer_config.json or tokenizer.json (the served model's directory "
              "holds them): or give --tokenizer DIR or OWNER/NAME[@REVISION], the served model's tokenizer"),
])
def test_an_endpoint_whose_tokenizer_is_not_on_this_host_is_one_line(tmp_path, model_path, says):
    """Without --tokenizer, what the server says it serves must hold a tokenizer here (or be a Hub repository): each
    other case is one line saying what it serves and what to give, before SGLang's benchmark is started."""
    empty = tmp_path / "EMPTY"
    empty.mkdir()
    served = str(empty) if model_path == "EMPTY" else model_path
    with SGLangServer(replace(BASE, model_path=served)) as server:
        with pytest.raises(UserError) as caught:
            bench.run(Request(endpoints=[f"x={server.url}"], levels="1", prompts=write_prompts(tmp_path / "p.jsonl"),
                              out=tmp_path / "r"), environ={}, progress=False)
    assert str(caught.value) == says.format(EMPTY=empty), caught.value
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("flags, says", [
    ({"generator": "vllm"}, r"^--generator 'vllm': choose sglang$"),
    ({"generator": "builtin"}, r"^--generator builtin: this checkout no longer sends requests itself; SGLang's own "
     r"benchmark \(--generator sglang, the default\) sends every round$"),
    ({"request_rate": "4", "burstiness": "2", "tokenizer": "T"},
     r"^--burstiness 2: SGLang's benchmark sends Poisson arrivals only \(burstiness 1\)$"),
    ({"generator": "sglang", "tokenizer": "T", "image": "img:1", "python": "/usr/bin/python3"},
     r"^--image img:1 and --python /usr/bin/python3: SGLang's benchmark runs in one of them"),
    ({"generator": "sglang", "tokenizer": "EMPTY"}, r"^--tokenizer .*EMPTY: no tokenizer_config.json"),
])
def test_what_sglangs_benchmark_cannot_do_is_refused_before_any_request(tmp_path, tokenizer, flags, says):
    (tmp_path / "EMPTY").mkdir()
    flags = {k: (str(tokenizer) if v == "T" else str(tmp_path / "EMPTY") if v == "EMPTY" else v)
             for k, v in flags.items()}
    with pytest.raises(UserError, match=says):
        bench.run(Request(endpoints=["x=http://127.0.0.1:9"], levels="1", out=tmp_path / "r", **flags), environ={},
                  progress=False)
    assert not (tmp_path / "r").exists()


@pytest.mark.sglang_env
def test_a_tokenizer_transformers_cannot_load_is_one_line(tmp_path, profile_python):
    broken = tmp_path / "tok"
    broken.mkdir()
    (broken / "tokenizer.json").write_text("{}")
    with SGLangServer(BASE) as server:
        with pytest.raises(UserError) as caught:
            bench.run(Request(endpoints=[f"x={server.url}"], levels="1", repeats=1, warmup=0,
                              prompts=write_prompts(tmp_path / "p.jsonl"), out=tmp_path / "r", generator="sglang",
                              python=str(profile_python(upstream.PROFILE)), tokenizer=str(broken)),
                      environ={}, progress=False)
    assert str(caught.value).endswith(
        "error: the tokenizer (--tokenizer) does not load in transformers: KeyError: 'added_tokens'"), caught.value
    assert not (tmp_path / "r").exists()
