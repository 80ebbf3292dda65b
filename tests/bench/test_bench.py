"""invoke bench against real HTTP servers on loopback that stream like SGLang at known rates."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from conftest import load_factor
from sglang_server import Behaviour, SGLangServer
from sglang_stack.bench import measure as bench, rounds, report
from sglang_stack.bench import promptset
from sglang_stack.errors import UserError
from sglang_stack.bench.request import DEFAULT_LEVELS, Request

# What is served. baseline: one token per step. eagle3: 2, 3, 2, 3 ... tokens per step, at the same step time, so
# eagle3 decodes 2.5 times as fast. SGLang's benchmark times the streams on the real clock, so a figure is asserted
# against the served schedule: never faster than served, within a slack that widens with the machine's load.
#   baseline: TTFT 100 ms, then 15 steps of 1 token, 10 ms apart: decode 100 tok/s, ITL 10 ms
#   eagle3:   TTFT 100 ms, then 6 steps of 2 or 3 tokens, 10 ms apart: decode 250 tok/s, ITL 5 or 3.3 ms
# (0.1 s to the first token, so that two requests of a round at concurrency 2 overlap even when one starts late; steps
# of 10 ms, so that a stream's first event reaching the client a few ms late moves its decode speed little.)
STEP_S = 0.010
BASE = Behaviour(step_s=STEP_S, ttft_s=0.1, accept=(1,))
SPEC = Behaviour(step_s=STEP_S, ttft_s=0.1, accept=(2, 3), spec=True,
                 server_info={"version": "0.5.9", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 2,
                              "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 3})
TOKENS = 16  # 1 from prefill + 15: baseline 15 steps of 1, eagle3 6 steps of 2/3


def write_prompts(path: Path, count: int = 3, tokens: int = TOKENS, version: int = 1) -> Path:
    lines = []
    for i in range(count):
        lines.append(json.dumps({"version": version, "id": f"p{i}", "category": ["chat", "code", "math"][i % 3],
                                 "output": "short", "max_new_tokens": tokens, "prompt": f"prompt number {i}"}))
    path.write_text("\n".join(lines) + "\n")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(out: Path) -> dict:
    return json.loads((out / report.JSON_NAME).read_text())


def row(doc: dict, endpoint: str, level: int) -> dict:
    for r in doc["summary"]["rows"]:
        if r["endpoint"] == endpoint and r["level"] == level:
            return r
    raise AssertionError(f"no summary row for {endpoint} at concurrency {level}: {doc['summary']['rows']}")


@pytest.fixture(scope="module")
def pair_run(tmp_path_factory, sglang_generator):
    """One interleaved run of baseline and eagle3 at concurrency 1 and 2, 2 repeats."""
    tmp = tmp_path_factory.mktemp("pair")
    prompts = write_prompts(tmp / "prompts.jsonl", count=2)
    (tmp / "key").write_text("sk-test\n")
    with SGLangServer(BASE) as base, SGLangServer(SPEC) as spec:
        out = bench.run(Request(endpoints=[f"baseline={base.url}", f"eagle3={spec.url}"], levels="1,2", repeats=2,
                                warmup=1, prompts=prompts, out=tmp / "results", **sglang_generator),
                        environ={"SGLANG_API_KEY_FILE": str(tmp / "key")}, progress=False)
        yield {"out": out, "doc": load(out), "base": base, "spec": spec}


def slack() -> float:
    """How much slower than served a figure may be on this machine now: a quiet one adds a few ms a round trip."""
    return 1.5 * min(load_factor(), 4)


# --- measured figures ----------------------------------------------------------


def test_run_completes_and_writes_every_file(pair_run):
    out = pair_run["out"]
    for name in (report.JSON_NAME, report.MARKDOWN_NAME, report.PLOT_NAME):
        assert (out / name).is_file(), f"{name} missing from {out}"
    leftovers = [p.name for p in out.iterdir() if p.name.startswith(".")]
    assert not leftovers, f"temporary files left behind: {leftovers}"
    doc = pair_run["doc"]
    assert doc["complete"] is True, f"run not marked complete: {doc['error']}"
    assert doc["error"] is None, f"error recorded on a clean run: {doc['error']}"


def test_decode_speed_follows_the_served_schedule(pair_run):
    """About as fast as served, and eagle3's 2.5 tokens a step show as 2.5 times the speed. A stream's first event can
    reach the client late and the rest on time, which shortens its span, so the bound above has a margin too."""
    doc = pair_run["doc"]
    for level in (1, 2):
        base = row(doc, "baseline", level)["decode_tps_p50"]
        spec = row(doc, "eagle3", level)["decode_tps_p50"]
        assert 1 / STEP_S / slack() < base <= 1 / STEP_S * 1.25, f"baseline decode tok/s at c={level}: {base}, served 100"
        assert 2.5 / STEP_S / slack() < spec <= 2.5 / STEP_S * 1.25, f"eagle3 decode tok/s at c={level}: {spec}, served 250"
        assert spec / base == pytest.approx(2.5, rel=0.25), f"eagle3 over baseline at c={level}: {spec / base:.2f}"


def test_inter_token_latency_splits_each_step_over_its_tokens(pair_run):
    """SGLang's client splits the gap before an event evenly over the tokens it added: eagle3's ITLs come in runs of
    2 and 3 equal values, in the served order, one per token after the first."""
    doc, spec = pair_run["doc"], pair_run["spec"]
    counts, _ = spec.schedule(TOKENS)
    steps = [b - a for a, b in zip(counts, counts[1:])]
    for sample in (s for s in doc["samples"] if s["endpoint"] == "eagle3" and s["ok"]):
        itl = sample["itl_s"]
        assert len(itl) == TOKENS - 1, f"one ITL per token after the first: got {len(itl)}"
        at = 0
        for n in steps:
            assert len(set(itl[at:at + n])) == 1, f"a step of {n} tokens split unevenly: {itl[at:at + n]}"
            at += n
    base = row(doc, "baseline", 1)["itl_ms_p50"]
    assert STEP_S * 1e3 * 0.8 <= base < STEP_S * 1e3 * slack(), f"baseline ITL p50 {base} ms, served 10 ms a token"


def test_ttft_and_latency_follow_the_served_schedule(pair_run):
    doc = pair_run["doc"]
    for name, events in (("baseline", 15), ("eagle3", 6)):
        r = row(doc, name, 1)
        latency = 0.1 + events * STEP_S
        assert 100 * 0.98 <= r["ttft_ms_p50"] < 100 * slack(), f"{name} TTFT p50 {r['ttft_ms_p50']} ms, served 100"
        assert latency * 0.98 <= r["latency_s_p50"] < latency * slack(), \
            f"{name} latency p50 {r['latency_s_p50']} s, served {latency}"


def test_aggregate_speed_never_beats_what_was_served(pair_run):
    """Round wall times are real: a round can only be slower than served, never faster (a hard bound at any load)."""
    doc = pair_run["doc"]
    for name, served in (("baseline", BASE), ("eagle3", SPEC)):
        events = len(pair_run["base" if name == "baseline" else "spec"].schedule(TOKENS)[0])
        fastest = served.ttft_s + (events - 1) * served.step_s  # the served latency of one request
        for level in (1, 2):
            agg = row(doc, name, level)["aggregate_tps_mean"]
            assert 0 < agg <= level * TOKENS / fastest, (
                f"{name} aggregate at c={level}: {agg:.1f} tok/s, but {level} streams of {TOKENS} tokens "
                f"each taking at least {fastest:.3f} s give at most {level * TOKENS / fastest:.1f}"
            )


def test_acceptance_length_comes_from_meta_info(pair_run):
    doc, spec = pair_run["doc"], pair_run["spec"]
    served = spec.served
    expected = sum(s["tokens"] for s in served if s["verify"]) / sum(s["verify"] for s in served if s["verify"])
    # warm-up requests are served but not measured; all prompts have the same schedule
    assert expected == pytest.approx(TOKENS / 6), f"server served accept length {expected}, planned {TOKENS / 6}"
    for level in (1, 2):
        got = row(doc, "eagle3", level)["accept_length"]
        assert got == pytest.approx(expected, rel=1e-9), f"accept length at c={level}: {got}, served {expected}"
        assert row(doc, "baseline", level)["accept_length"] is None, "baseline has no speculative metadata"
    sample = next(s for s in doc["samples"] if s["endpoint"] == "eagle3" and s["ok"])
    assert sample["spec_verify_ct"] == 6, f"spec_verify_ct not copied from meta_info: {sample['spec_verify_ct']}"
    assert sample["output_tokens"] == TOKENS, f"output tokens not from completion_tokens: {sample['output_tokens']}"


def test_ratio_reports_eagle3_over_baseline(pair_run):
    ratios = {r["level"]: r for r in pair_run["doc"]["summary"]["ratios"]}
    assert set(ratios) == {1, 2}, f"ratios per level missing: {sorted(ratios)}"
    for level, r in ratios.items():
        assert (r["endpoint"], r["reference"]) == ("eagle3", "baseline"), f"ratio direction wrong: {r}"
        assert r["decode_tps_p50"] == pytest.approx(2.5, rel=0.25), f"decode ratio at c={level}: {r['decode_tps_p50']}, served 250/100"
        assert r["paired_aggregate"]["pairs"] == 2, f"one pair per repeat expected: {r['paired_aggregate']}"


def test_rounds_are_interleaved_and_alternate(pair_run):
    rounds = pair_run["doc"]["rounds"]
    order = [(r["level"], r["repeat"], r["endpoint"]) for r in rounds]
    assert order == [
        (1, 0, "baseline"), (1, 0, "eagle3"), (1, 1, "eagle3"), (1, 1, "baseline"),
        (2, 0, "baseline"), (2, 0, "eagle3"), (2, 1, "eagle3"), (2, 1, "baseline"),
    ], f"rounds not interleaved A B / B A: {order}"
    assert pair_run["doc"]["metadata"]["interleaved"] is True, "metadata does not say the rounds were interleaved"


def test_concurrency_level_is_reached(pair_run):
    for server in (pair_run["base"], pair_run["spec"]):
        assert server.max_in_flight == 2, f"{server.url}: at most {server.max_in_flight} requests at once, wanted 2"


def test_requests_use_sglang_native_streaming_api(pair_run):
    base = pair_run["base"]
    body = base.bodies[-1]
    assert body["stream"] is True, f"not a streaming request: {body}"
    assert body["sampling_params"] == {"temperature": 0.0, "max_new_tokens": TOKENS, "ignore_eos": False}, (
        f"sampling params: {body['sampling_params']}"
    )
    assert body["text"].startswith("prompt number"), f"prompt text not sent raw: {body['text']!r}"
    assert base.headers[-1].get("Authorization") == "Bearer sk-test", "SGLANG_API_KEY_FILE's key not sent as a bearer token"
    # 1 warm-up + 2 repeats x (2 prompts at c=1 + 6 at c=2: the prompts cycled, 3 per worker)
    assert len(base.bodies) == 1 + 2 * (2 + rounds.round_size(2, 2)) == 17, f"baseline got {len(base.bodies)} requests"
    # once before each round, and once more after the warm-up, which SGLang's benchmark sends in the first round
    assert base.flushes == 4 + 1, f"prefix cache flushed {base.flushes} times, wanted once per round (4) and after the warm-up"


def test_metadata_describes_the_run(pair_run):
    meta = pair_run["doc"]["metadata"]
    assert [e["name"] for e in meta["endpoints"]] == ["baseline", "eagle3"], f"endpoints: {meta['endpoints']}"
    prompt_set = meta["prompt_set"]
    assert prompt_set["version"] == 1 and prompt_set["prompts"] == 2, f"prompt set: {prompt_set}"
    assert meta["levels"] == [1, 2] and meta["repeats"] == 2, f"levels/repeats: {meta['levels']} {meta['repeats']}"
    assert meta["host"]["hostname"] == socket.gethostname(), f"host: {meta['host']}"
    spec_info = meta["endpoints"][1]["server"]
    assert spec_info["speculative_num_steps"] == 2, f"server info not recorded: {spec_info}"
    assert "api_key" not in json.dumps(meta), "the API key from /server_info leaked into the results"
    assert "sk-test" not in (pair_run["out"] / report.JSON_NAME).read_text(), "the API key is in bench.json"


# --- the table and the plot agree with the JSON --------------------------------------


def markdown_rows(text: str) -> list[dict]:
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == header[0] or len(cells) != len(header):
            break
        rows.append(dict(zip(header, cells)))
    return rows


def test_markdown_table_agrees_with_json(pair_run):
    doc = pair_run["doc"]
    rows = markdown_rows((pair_run["out"] / report.MARKDOWN_NAME).read_text())
    assert len(rows) == len(doc["summary"]["rows"]), f"table has {len(rows)} rows, JSON {len(doc['summary']['rows'])}"
    for md, js in zip(rows, doc["summary"]["rows"]):
        for heading, key, decimals in report.COLUMNS:
            want = report.value(js, key)
            cell = md[heading]
            if decimals is None:
                assert cell == str(want), f"{heading}: table {cell!r}, JSON {want!r}"
            elif want is None:
                assert cell == "-", f"{heading}: table {cell!r}, JSON has no value"
            else:
                assert float(cell) == pytest.approx(want, abs=0.51 * 10**-decimals), (
                    f"{js['endpoint']} c={js['level']} {heading}: table {cell}, JSON {want}"
                )
    text = (pair_run["out"] / report.MARKDOWN_NAME).read_text()
    ratio = doc["summary"]["ratios"][0]
    assert f"{ratio['decode_tps_p50']:.2f}x" in text, "the ratio table does not show the JSON's decode ratio"


def png_text_chunks(data: bytes) -> dict[str, str]:
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    pos, out = 8, {}
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = body.partition(b"\0")
            out[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        elif kind == b"iTXt":
            key, _, rest = body.partition(b"\0")
            compressed, _method = rest[0], rest[1]
            _lang, _, rest = rest[2:].partition(b"\0")
            _tkey, _, text = rest.partition(b"\0")
            out[key.decode("latin-1")] = (zlib.decompress(text) if compressed else text).decode("utf-8")
        pos += 12 + length
    return out


def test_plot_agrees_with_json(pair_run):
    from sglang_stack.bench import plot

    doc = pair_run["doc"]
    data = (pair_run["out"] / report.PLOT_NAME).read_bytes()
    series = json.loads(png_text_chunks(data)[plot.SERIES_KEY])
    for key, _title in plot.PANELS:
        for r in doc["summary"]["rows"]:
            points = dict((lvl, val) for lvl, val in series[key][r["endpoint"]])
            assert points[r["level"]] == pytest.approx(r[key]), f"plot {key} {r['endpoint']} c={r['level']} != JSON"
    fig = plot.figure(doc)
    for ax, (key, _title) in zip(fig.axes, plot.PANELS):
        drawn = {line.get_label(): list(zip(line.get_xdata(), line.get_ydata())) for line in ax.lines
                 if not line.get_label().startswith("_")}  # error-bar caps carry no label
        assert set(drawn) == {"baseline", "eagle3"}, f"panel {key}: lines {sorted(drawn)}, want one per endpoint"
        for name, points in drawn.items():
            flat = [v for point in points for v in point]
            want = [v for point in series[key][name] for v in point]
            assert flat == pytest.approx(want), f"panel {key}, {name}: drawn {points}, JSON {series[key][name]}"


# --- endpoints -----------------------------------------------------------------


def test_default_endpoints_follow_compose_variables(tmp_path):
    env = bench.stack_env({"BIND_ADDRESS": "0.0.0.0", "EAGLE3_PORT": "31001"}, env_file=tmp_path / "none")
    assert bench.default_endpoints(env) == [
        bench.Endpoint("baseline", "http://127.0.0.1:30000"),
        bench.Endpoint("eagle3", "http://127.0.0.1:31001"),
    ], "BIND_ADDRESS 0.0.0.0 must be reached through loopback, ports from *_PORT with compose.yaml's defaults"
    dotenv = tmp_path / ".env"
    dotenv.write_text("# ports\nBASELINE_PORT=32000\nBIND_ADDRESS=10.0.0.5\nEAGLE3_PORT=32001 # comment\n")
    env = bench.stack_env({"BASELINE_PORT": "33000"}, env_file=dotenv)
    assert bench.default_endpoints(env) == [
        bench.Endpoint("baseline", "http://10.0.0.5:33000"),
        bench.Endpoint("eagle3", "http://10.0.0.5:32001"),
    ], "the shell environment must win over .env, as in compose"
    env = bench.stack_env({"BIND_ADDRESS": "[::1]"}, env_file=tmp_path / "none")
    assert bench.default_endpoints(env)[0].url == "http://[::1]:30000", "IPv6 needs brackets"
    with pytest.raises(UserError, match=r"EAGLE3_PORT=http \(shell\): Invalid hostPort: http"):
        bench.default_endpoints(bench.stack_env({"EAGLE3_PORT": "http"}, env_file=tmp_path / "none"))


@pytest.mark.parametrize(
    "spec, message",
    [
        ("noequals", r"expected NAME=URL"),
        ("a=ftp://host", r"not an http:// or https:// URL"),
        ("bad name=http://h:1", r"may hold only letters"),
        ("a=http://h:99999", r"bad port"),
    ],
)
def test_bad_endpoint_is_a_one_line_error(spec, message):
    with pytest.raises(UserError, match=message):
        bench.parse_endpoint(spec)


def test_same_endpoint_name_twice_is_an_error():
    with pytest.raises(UserError, match=r"'a' is given twice"):
        bench.parse_endpoints(["a=http://h:1", "a=http://h:2"])


def test_defaults_measure_the_service_that_answers(tmp_path, capsys, sglang_generator):
    prompts = write_prompts(tmp_path / "p.jsonl", count=1, tokens=4)
    with SGLangServer(BASE) as base:
        port = base.url.rsplit(":", 1)[1]
        env = {"BASELINE_PORT": port, "EAGLE3_PORT": str(free_port())}
        out = bench.run(Request(levels="1", repeats=1, warmup=0, prompts=prompts, out=tmp_path / "r", **sglang_generator),
                        environ=env, env_file=tmp_path / "none", progress=False)
    doc = load(out)
    assert [e["name"] for e in doc["metadata"]["endpoints"]] == ["baseline"], "only the answering service is measured"
    assert doc["complete"], f"run incomplete: {doc['error']}"
    err = capsys.readouterr().err
    assert "skipping eagle3" in err and "bench-compare" in err, f"no notice about the skipped service: {err}"


def test_no_default_service_answering_is_an_error(tmp_path):
    env = {"BASELINE_PORT": str(free_port()), "EAGLE3_PORT": str(free_port())}
    with pytest.raises(UserError, match=r"no endpoint answers .*baseline.*connection refused.*eagle3"):
        bench.run(Request(prompts=write_prompts(tmp_path / "p.jsonl"), out=tmp_path / "r"), environ=env, env_file=tmp_path / "none", progress=False)
    assert not (tmp_path / "r").exists(), "a results directory was created although nothing was measured"


def test_loading_server_is_reported_as_such(tmp_path):
    with SGLangServer(Behaviour(health_status=503)) as server:
        with pytest.raises(UserError, match=r"still loading"):
            bench.run(Request(endpoints=[f"x={server.url}"], prompts=write_prompts(tmp_path / "p.jsonl"), out=tmp_path / "r"), environ={}, progress=False)


# --- failures mid-run: partial results, marked incomplete ----------------------------


@pytest.mark.parametrize("generator", ["sglang", "sglang-default"])
@pytest.mark.parametrize(
    "failure, message",
    [
        ("http500", r"HTTP 500|Internal Server Error"),
        ("stream-error", r"server error: CUDA error: an illegal memory access was encountered"),
        ("abort", r"aborted by the server: Abort before prefill"),
        ("disconnect", r"without a finish_reason|closed the connection|payload is not completed"),
    ],
)
def test_server_failing_mid_run_leaves_partial_results(tmp_path, generator_flags, failure, message, generator):
    """Each failure fails the run with either release's benchmark: SGLang's client takes an error event or an abort
    inside a stream for a success, and its driver fails the request."""
    flags = generator_flags(generator)
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=6)
    # warm-up 1 + round 1 (2 requests) succeed; the 4th request fails, in repeat 2
    behaviour = Behaviour(step_s=0.002, ttft_s=0.005, fail_after=3, failure=failure)
    with SGLangServer(behaviour) as server:
        with pytest.raises(UserError, match=message) as caught:
            bench.run(Request(endpoints=[f"flaky={server.url}"], levels="1", repeats=3, warmup=1, prompts=prompts,
                              out=tmp_path / "r", **flags), environ={}, progress=False)
    text = str(caught.value)
    assert "flaky" in text and "repeat 2" in text and "prompt p0" in text, f"error does not say where: {text}"
    assert "marked incomplete" in text and str(tmp_path / "r") in text, f"error does not point at the results: {text}"
    doc = load(tmp_path / "r")
    assert doc["complete"] is False, "a failed run is marked complete"
    assert re.search(message, doc["error"]), f"bench.json error field: {doc['error']}"
    good = [s for s in doc["samples"] if s["ok"]]
    bad = [s for s in doc["samples"] if not s["ok"]]
    assert len(good) >= 2, f"the measured round was not kept: {len(good)} good samples"
    assert bad and bad[0]["prompt_id"] == "p0", f"the failed request is not recorded: {bad}"
    # SGLang's benchmark sends the rest of the round after a failure (p1 fails too)
    assert len(bad) == 2 and {s["round"] for s in bad} == {bad[0]["round"]}, bad
    assert row(doc, "flaky", 1)["requests"] == len(good), "summary does not cover the measured samples"
    assert "**INCOMPLETE**" in (tmp_path / "r" / report.MARKDOWN_NAME).read_text(), "table not marked incomplete"
    assert (tmp_path / "r" / report.PLOT_NAME).is_file(), "no plot for the partial results"


def test_wrong_api_key_fails_with_the_status(tmp_path, sglang_generator):
    (tmp_path / "key").write_text("wrong")
    with SGLangServer(Behaviour(api_key="right")) as server:
        with pytest.raises(UserError, match=r"HTTP 401|Unauthorized"):
            bench.run(Request(endpoints=[f"x={server.url}"], levels="1", repeats=1, warmup=0,
                              prompts=write_prompts(tmp_path / "p.jsonl"), out=tmp_path / "r", **sglang_generator),
                      environ={"SGLANG_API_KEY_FILE": str(tmp_path / "key")}, progress=False)


# --- prompt files --------------------------------------------------------------------


def test_packaged_prompt_set_is_balanced_across_chat_code_math():
    """v2: one output budget for every prompt, so a percentile never falls between two clusters of lengths."""
    prompt_set = promptset.load_prompts()
    assert prompt_set.version == 2, f"packaged prompt set version {prompt_set.version}"
    categories = [p.category for p in prompt_set.prompts]
    assert {c: categories.count(c) for c in set(categories)} == {"chat": 6, "code": 6, "math": 6}, categories
    assert {p.max_new_tokens for p in prompt_set.prompts} == {256}, "one budget for all"
    assert len(prompt_set.prompts) >= max(DEFAULT_LEVELS), "fewer prompts than the top concurrency level"
    v1 = promptset.load_prompts(promptset.PROMPTS_DIR / "v1.jsonl")
    assert v1.version == 1 and [p.prompt for p in v1.prompts] == [p.prompt for p in prompt_set.prompts], \
        "v1 stays for comparing with earlier results; v2 asks the same questions"


@pytest.mark.parametrize(
    "content, message",
    [
        ("", r"holds no prompts"),
        ("\n\n", r"holds no prompts"),
        ("{not json\n", r":1: not a JSON object"),
        ('["a"]\n', r":1: not a JSON object"),
        ('{"version": 1, "id": "a", "category": "chat", "output": "short", "prompt": "x"}\n', r"'max_new_tokens' must"),
        ('{"version": "1", "id": "a", "category": "chat", "output": "short", "max_new_tokens": 4, "prompt": "x"}\n',
         r"'version' must be a int"),
        ('{"version": 1, "id": "a", "category": "chat", "output": "short", "max_new_tokens": 0, "prompt": "x"}\n',
         r"at least 1"),
        ('{"version": 1, "id": "a", "category": "chat", "output": "short", "max_new_tokens": 4, "prompt": " "}\n',
         r"'prompt' is empty"),
    ],
)
def test_bad_prompt_file_is_a_one_line_error(tmp_path, content, message):
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    with pytest.raises(UserError, match=message) as caught:
        promptset.load_prompts(path)
    assert str(path) in str(caught.value), f"error does not name the file: {caught.value}"


def test_mixed_versions_and_duplicate_ids_are_errors(tmp_path):
    path = write_prompts(tmp_path / "a.jsonl", count=2)
    path.write_text(path.read_text() + write_prompts(tmp_path / "b.jsonl", count=1, version=2).read_text()
                    .replace('"p0"', '"p9"'))
    with pytest.raises(UserError, match=r"mixed prompt-set versions \[1, 2\]"):
        promptset.load_prompts(path)
    path.write_text(write_prompts(tmp_path / "c.jsonl", count=1).read_text() * 2)
    with pytest.raises(UserError, match=r":2: duplicate id 'p0'"):
        promptset.load_prompts(path)


def test_missing_prompt_file_is_an_error(tmp_path):
    with pytest.raises(UserError, match=r"nope.jsonl: not found \(pass --prompts"):
        promptset.load_prompts(tmp_path / "nope.jsonl")


# --- options -------------------------------------------------------------------


def test_levels_parse_and_reject_bad_values():
    assert bench.parse_levels("1, 4,16") == [1, 4, 16], "levels: trimmed, in order"
    for bad in ("1,x", "0", "", "-2"):
        with pytest.raises(UserError, match=r"--levels"):
            bench.parse_levels(bad)
    with pytest.raises(UserError, match=r"--levels '1, 4,16,4': 4 is given twice"):
        bench.parse_levels("1, 4,16,4")


def test_counts_and_seconds_reject_bad_values():
    with pytest.raises(UserError, match=r"--repeats '0': must be at least 1"):
        bench.parse_count("--repeats", "0", 1)
    with pytest.raises(UserError, match=r"--warmup 'two': not an integer"):
        bench.parse_count("--warmup", "two", 0)
    with pytest.raises(UserError, match=r"--timeout '-1'"):
        bench.parse_seconds("--timeout", "-1")


def test_prompt_template_wraps_each_prompt(tmp_path):
    with pytest.raises(UserError, match=r"must contain \{prompt\}"):
        bench.check_template("<user>no placeholder")
    prompt = promptset.Prompt("a", "chat", "short", 4, "hello")
    row = rounds.sglang_row(prompt, "<u>{prompt}</u><a>")
    assert row == {"prompt": "<u>hello</u><a>", "prompt_len": None, "output_len": 4}, f"template not applied: {row}"


def test_compare_combines_sequential_runs(tmp_path, sglang_generator):
    prompts = write_prompts(tmp_path / "p.jsonl", count=2)
    outs = []
    for name, behaviour in (("baseline", BASE), ("eagle3", SPEC)):
        with SGLangServer(behaviour) as server:
            outs.append(bench.run(Request(endpoints=[f"{name}={server.url}"], levels="1", repeats=1, warmup=0,
                                          prompts=prompts, out=tmp_path / name, **sglang_generator),
                                  environ={}, progress=False))
    out = bench.compare(outs, out=tmp_path / "both")
    doc = load(out)
    assert doc["metadata"]["interleaved"] is False, "sequential runs must not be called interleaved"
    assert doc["complete"] is True, "two complete runs combine into a complete result"
    ratio = doc["summary"]["ratios"][0]
    assert ratio["decode_tps_p50"] == pytest.approx(2.5, rel=0.25), f"combined decode ratio {ratio['decode_tps_p50']}, served 2.5"
    assert "not interleaved" in (out / report.MARKDOWN_NAME).read_text(), "table does not warn about drift"
    assert (out / report.PLOT_NAME).is_file(), "no plot for the combined results"
    with pytest.raises(UserError, match=r"endpoint 'baseline' is also in"):
        bench.compare([outs[0], outs[0]], out=tmp_path / "dup")
    with pytest.raises(UserError, match=r"at least two"):
        bench.compare([outs[0]], out=tmp_path / "one")


