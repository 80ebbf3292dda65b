"""`invoke bench --verdict`: does speculation pay, level by level, against stand-in servers whose speed depends on load
the way continuous batching's does (tests/sglang_server.py, ``load_s``), so the crossover is known in advance.

The baseline emits one token per step; the speculative stand-in accepts two draft tokens (three tokens a step) and
verifies four per request, so a step costs ``step_s + load_s * n * 4`` against ``step_s + load_s * n``. With
``step_s = 2 * load_s`` its output over the baseline's is ``3 (2 + n) / (2 + 4 n)``: 1.5x at 1, 1.2x at 2, parity
at 4, 0.88x at 8, 0.82x at 16.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import load_factor
from sglang_server import Behaviour, SGLangServer
from test_bench import free_port, write_prompts
from sglang_stack import ROOT
from sglang_stack.bench import measure as bench, pays, report
from sglang_stack.bench.request import Request
from sglang_stack.errors import UserError

# A step costs LOAD_S per token verified across the batch, plus a fixed 2 * LOAD_S. On a loaded machine the
# scheduler's delays are added to every sleep, so the stand-ins' steps grow with the load (at most 4x): the same
# model at a slower clock, where those delays weigh as little as they do on a quiet one.
SLOWER = min(4.0, load_factor())
LOAD_S = 0.004 * SLOWER
BASE = Behaviour(step_s=2 * LOAD_S, ttft_s=0.01, accept=(1,), load_s=LOAD_S,
                 server_info={"version": "0.5.23", "speculative_algorithm": None})
SPEC_INFO = {"version": "0.5.23", "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
             "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
SPEC = Behaviour(step_s=2 * LOAD_S, ttft_s=0.01, accept=(3,), spec=True, load_s=LOAD_S, verify=4,
                 server_info=SPEC_INFO)


def run_verdict(tmp_path, base: Behaviour, spec: Behaviour, levels: str, repeats: int = 3, tokens: int = 13,
                **flags):
    """`invoke bench --verdict` of the two stand-ins, sent by SGLang's benchmark (``flags``: sglang_generator's)."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=4, tokens=tokens)
    with SGLangServer(base) as b, SGLangServer(spec) as s:
        out = bench.run(Request(endpoints=[f"baseline={b.url}", f"eagle3={s.url}"], levels=levels, repeats=repeats,
                                warmup=0, prompts=prompts, out=tmp_path / "r", verdict=True,
                                **flags), environ={}, progress=False)
    return json.loads((out / pays.NAME).read_text()), out


def test_the_verdict_finds_the_crossover_continuous_batching_puts_there(tmp_path, sglang_generator):
    found, out = run_verdict(tmp_path, BASE, SPEC, "1,2,8,16", repeats=3 if SLOWER == 1.0 else 5, **sglang_generator)
    assert found["generator"]["name"] == "sglang", found["generator"]
    rows = {r["level"]: r for r in found["endpoints"]["eagle3"]["levels"]}
    assert {level: r["verdict"] for level, r in rows.items()} == {
        1: pays.PAYS, 2: pays.PAYS, 8: pays.LOSES, 16: pays.LOSES}, rows
    # Below the model's 1.5x and above its 0.82x: the first token and the TTFT cost both servers the same.
    assert 1.2 < rows[1]["ratio"] < 1.6 and 0.75 < rows[16]["ratio"] < 0.95, rows
    assert found["endpoints"]["eagle3"]["pays_up_to"] == 2 and found["pays"] is True
    assert found["line"].startswith("eagle3 pays up to 2 concurrent requests (1."), found["line"]
    assert found["line"].endswith("at 1); from 8 on, baseline is faster."), found["line"]
    assert found["servers"]["eagle3"]["speculative_algorithm"] == "EAGLE3" and found["reference"] == "baseline"
    assert (out / pays.PLOT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_speculative_server_as_fast_as_the_baseline_cannot_be_told_apart(tmp_path, sglang_generator):
    """Ratio 1.0 everywhere (accepting nothing, verifying as the baseline does): never "pays"."""
    same = Behaviour(step_s=2 * LOAD_S, ttft_s=0.01, accept=(1,), spec=True, load_s=LOAD_S, server_info=SPEC_INFO)
    found, _ = run_verdict(tmp_path, BASE, same, "1,4", **sglang_generator)
    assert found["generator"]["name"] == "sglang", found["generator"]
    assert {r["verdict"] for r in found["endpoints"]["eagle3"]["levels"]} == {pays.UNCLEAR}, found
    assert found["pays"] is False and found["line"] == (
        "eagle3 pays at no level over baseline (cannot be told apart at 1, 4)."), found["line"]


def test_an_interval_needs_two_pairs_and_is_the_t_interval_of_the_logs():
    assert pays.interval([1.5]) == (pytest.approx(1.5), None, None)
    assert pays.judge(1.5, None, None) == pays.UNCLEAR, "one pair: no claim"
    ratio, low, high = pays.interval([1.1, 1.2, 1.3])
    assert ratio == pytest.approx((1.1 * 1.2 * 1.3) ** (1 / 3))
    assert low == pytest.approx(0.9728, abs=1e-4) and high == pytest.approx(1.4734, abs=1e-4)  # t(2) = 4.303
    assert pays.judge(ratio, low, high) == pays.UNCLEAR, "three pairs that far apart do not show it pays"
    ratio, low, high = pays.interval([1.2, 1.21, 1.22])
    assert pays.judge(ratio, low, high) == pays.PAYS and pays.judge(0.9, 0.8, 0.95) == pays.LOSES


def test_a_tight_interval_around_a_trivial_difference_is_no_verdict():
    """What a CI run measured for the stand-in that speculates and accepts nothing: 0.998x, 0.996-0.999."""
    ratio, low, high = pays.interval([0.9970, 0.9977, 0.9984])
    assert high < 1, "the interval alone would call it a loss"
    assert pays.judge(ratio, low, high) == pays.UNCLEAR
    ratio, low, high = pays.interval([1.004, 1.005, 1.006])
    assert low > 1 and pays.judge(ratio, low, high) == pays.UNCLEAR
    ratio, low, high = pays.interval([1.019, 1.021, 1.023])
    assert pays.judge(ratio, low, high) == pays.PAYS, "past the margin and above 1: pays"


def test_the_verdict_refuses_what_it_cannot_judge_before_writing_anything(tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=4)
    out = tmp_path / "r"
    with SGLangServer(BASE) as b, SGLangServer(BASE) as other, SGLangServer(SPEC) as s:
        cases = [
            ([f"baseline={b.url}", f"other={other.url}"], "no endpoint but the baseline baseline speculates: the server "
             f"info of other ({other.url}) has no speculative algorithm; give the EAGLE-3 server too"),
            ([f"baseline={b.url}", f"eagle3={s.url}", f"again={s.url.replace('127.0.0.1', 'localhost')}"],
             f"eagle3 and again are one server ({s.url.replace('127.0.0.1', 'localhost')})"),
        ]
        for endpoints, says in cases:
            with pytest.raises(UserError, match="--verdict: " + says.replace("(", r"\(").replace(")", r"\)")):
                bench.run(Request(endpoints=endpoints, prompts=prompts, out=out, verdict=True, warmup=0), environ={},
                          progress=False)
        with pytest.raises(UserError, match="--verdict: the verdict is per concurrency level"):
            bench.run(Request(endpoints=[f"baseline={b.url}", f"eagle3={s.url}"], prompts=prompts, out=out,
                              verdict=True, request_rate="5"), environ={}, progress=False)
    assert not out.exists(), "a refused verdict leaves no results directory"


@pytest.mark.parametrize("levels", ["0,1", "1,-2", "1,,4", "1,4,4"])
def test_a_bad_level_list_is_one_line(levels):
    proc = subprocess.run([sys.executable, "-m", "invoke", "bench", "--verdict", "--levels", levels,
                           "--endpoint", "b=http://127.0.0.1:9"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().startswith(f"error: --levels '{levels}': "), proc.stderr


@pytest.mark.parametrize("out", ["docs", "docs/verdict-run"])
def test_results_among_the_checkouts_tracked_files_are_refused(out):
    proc = subprocess.run([sys.executable, "-m", "invoke", "bench", "--verdict", "--out", out,
                           "--endpoint", "b=http://127.0.0.1:9"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"error: --out {out}: inside the checkout, where git tracks it; results go under bench-results/ (the default) "
        "or outside the checkout"), proc.stderr
    assert not (ROOT / "docs" / "verdict-run").exists()


def test_runs_made_one_service_at_a_time_give_the_verdict_when_merged(tmp_path, capsys, sglang_generator):
    """Where both servers cannot run at once (a 1T model wants every GPU): each compose service measured alone
    (`--verdict --only NAME`), then `invoke bench-compare --verdict`. The crossover is the stand-ins' own; the line
    says the runs were not interleaved, and the exit code is the verdict's."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=4, tokens=13)
    runs = []
    for name, behaviour in (("baseline", BASE), ("eagle3", SPEC)):
        with SGLangServer(behaviour) as server:
            port = server.url.rsplit(":", 1)[1]
            env = {"BASELINE_PORT": port, "EAGLE3_PORT": str(free_port())} if name == "baseline" else {
                "BASELINE_PORT": str(free_port()), "EAGLE3_PORT": port}
            runs.append(bench.run(Request(only=name, verdict=True, levels="1,16", repeats=3, warmup=0,
                                          prompts=prompts, out=tmp_path / name, **sglang_generator), environ=env,
                                  env_file=tmp_path / "none", progress=False))
        assert not (runs[-1] / pays.NAME).exists(), "one half gives no verdict"
        told = capsys.readouterr().out
        other = "eagle3" if name == "baseline" else "baseline"
        assert f"verdict: {name} measured alone ({runs[-1]}); with {other} up, run invoke bench --verdict --only " \
               f"{other} --out B, then merge: invoke bench-compare --results {runs[-1]} --results B --verdict" in told
    assert [report.load_results(r)["metadata"]["levels"] for r in runs] == [[1, 16], [1, 16]]
    proc = subprocess.run([sys.executable, "-m", "invoke", "bench-compare", "--verdict", "--results", str(runs[0]),
                           "--results", str(runs[1]), "--out", str(tmp_path / "merged")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = json.loads((tmp_path / "merged" / pays.NAME).read_text())
    assert {r["level"]: r["verdict"] for r in found["endpoints"]["eagle3"]["levels"]} == {1: pays.PAYS, 16: pays.LOSES}
    assert found["interleaved"] is False and found["apart_s"] is not None
    assert found["line"].startswith("eagle3 pays up to 1 concurrent request (") and found["line"].endswith(
        "not interleaved: the machine's drift between the runs is in every ratio."), found["line"]
    assert set(found["provenance"]) == {str(runs[0]), str(runs[1])}
    assert f"verdict: {found['line']}" in proc.stdout

    # Two baselines merged: nothing speculates, one line, and nothing written.
    proc = subprocess.run([sys.executable, "-m", "invoke", "bench-compare", "--verdict", "--results", str(runs[0]),
                           "--results", str(runs[0]), "--out", str(tmp_path / "none")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "none").exists()


def test_a_verdict_where_one_service_is_down_says_how_to_measure_each_alone(tmp_path):
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=4)
    gone = str(free_port())
    with SGLangServer(BASE) as base:
        env = {"BASELINE_PORT": base.url.rsplit(":", 1)[1], "EAGLE3_PORT": gone}
        run = lambda **given: bench.run(Request(prompts=prompts, out=tmp_path / "r", warmup=0, **given),  # noqa: E731
                                        environ=env, env_file=tmp_path / "none", progress=False)
        with pytest.raises(UserError) as err:
            run(verdict=True)
        assert str(err.value) == (
            f"--verdict: eagle3 at http://127.0.0.1:{gone} is not reachable: connection refused, and the verdict "
            "measures both at once (each on its own GPUs: GPU_IDS); where they cannot run together, measure each alone "
            "and merge: invoke bench --verdict --only baseline --out A; then, with eagle3 up, invoke bench --verdict "
            "--only eagle3 --out B; then invoke bench-compare --results A --results B --verdict")
        for given, says in [
            (dict(only="eagle3"), f"--only eagle3: eagle3 at http://127.0.0.1:{gone} is not reachable: connection "
             "refused: start it (invoke up eagle3)"),
            (dict(only="router"), "--only 'router': not a server of compose.yaml (its servers: baseline, eagle3)"),
            (dict(only="baseline", endpoints=[f"b={base.url}"]), "--only baseline and --endpoint: --only picks a "
             "service of compose.yaml, --endpoint names servers by URL; choose one"),
            (dict(only="baseline", verdict=True, request_rate="5"), "--verdict: the verdict is per concurrency level "
             "(the closed loop): drop --request-rate"),
        ]:
            with pytest.raises(UserError) as err:
                run(**given)
            assert str(err.value) == says
    assert not (tmp_path / "r").exists(), "a refused run leaves no results directory"


def test_merged_runs_on_other_prompts_are_refused(tmp_path, sglang_generator):
    runs = []
    for name, behaviour, tokens in (("baseline", BASE, 13), ("eagle3", SPEC, 9)):
        prompts = write_prompts(tmp_path / f"{name}.jsonl", count=2, tokens=tokens)
        with SGLangServer(behaviour) as server:
            runs.append(bench.run(Request(endpoints=[f"{name}={server.url}"], levels="1", repeats=2, warmup=0,
                                          prompts=prompts, out=tmp_path / name, **sglang_generator), environ={},
                                  progress=False))
    with pytest.raises(UserError, match=rf"--verdict: {runs[0]} and the others used different prompt files"):
        bench.compare(runs, out=tmp_path / "merged", verdict=True)
    assert not (tmp_path / "merged").exists()


def test_merged_runs_by_other_generators_are_refused(tmp_path, sglang_generator):
    """A results file from before SGLang's benchmark sent every round records no generator: the built-in client's,
    whose figures are not paired with SGLang's."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=4)
    runs = []
    for name, behaviour in (("baseline", BASE), ("eagle3", SPEC)):
        with SGLangServer(behaviour) as server:
            runs.append(bench.run(Request(endpoints=[f"{name}={server.url}"], levels="1", repeats=2, warmup=0,
                                          prompts=prompts, out=tmp_path / name, **sglang_generator), environ={},
                                  progress=False))
    older = json.loads((runs[0] / report.JSON_NAME).read_text())
    del older["metadata"]["load"]["generator"]
    (runs[0] / report.JSON_NAME).write_text(json.dumps(older))
    with pytest.raises(UserError) as err:
        bench.compare(runs, out=tmp_path / "merged", verdict=True)
    assert str(err.value) == (f"--verdict: {runs[0]} was measured by the builtin generator and {runs[1]} by the "
                              "sglang one: measure every service with SGLang's benchmark")
    assert not (tmp_path / "merged").exists()


def test_merged_runs_at_other_levels_are_refused(tmp_path, sglang_generator):
    """A level one run lacks has no pairs: it would read "cannot be told apart" where nothing was compared."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=4)
    runs = []
    for name, behaviour, levels in (("baseline", BASE, "1,2"), ("eagle3", SPEC, "1,4")):
        with SGLangServer(behaviour) as server:
            runs.append(bench.run(Request(endpoints=[f"{name}={server.url}"], levels=levels, repeats=2, warmup=0,
                                          prompts=prompts, out=tmp_path / name, **sglang_generator), environ={},
                                  progress=False))
    with pytest.raises(UserError) as err:
        bench.compare(runs, out=tmp_path / "merged", verdict=True)
    assert str(err.value) == (f"--verdict: {runs[0]} measured levels 1,2 and {runs[1]} 1,4: the verdict pairs each "
                              "level's rounds; measure every service at the same --levels (--verdict's default is the "
                              "same for each)")
    assert not (tmp_path / "merged").exists()
    bench.compare(runs, out=tmp_path / "table")  # without the verdict the table shows what each measured


def test_only_with_the_sweep_is_one_line():
    proc = subprocess.run([sys.executable, "-m", "invoke", "bench", "--only", "eagle3", "--sweep"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "error: --only and --sweep: the sweep measures the EAGLE service alone already"), proc.stderr
