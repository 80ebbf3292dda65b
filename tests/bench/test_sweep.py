"""invoke bench --sweep: the grid, the compose command, the checks, and the choice of the best setting."""

from __future__ import annotations

import json
import os
import stat

import pytest

from sglang_server import Behaviour, SGLangServer
from sglang_stack.engine import DOCKER
from sglang_stack import ROOT
from sglang_stack.bench import report, sweep
from sglang_stack.errors import UserError
from sglang_stack.bench.sweep import GridPoint
from sglang_stack.bench.request import Request
from test_bench import write_prompts


# --- the grid ------------------------------------------------------------------


def test_topk_one_uses_steps_plus_one_draft_tokens():
    points = sweep.grid([1, 2, 3], [1], [])
    assert points == [GridPoint(1, 1, 2), GridPoint(2, 1, 3), GridPoint(3, 1, 4)], (
        f"with topk 1 SGLang forces draft tokens = steps + 1: {points}"
    )
    assert sweep.grid([2], [1], [8, 16]) == [GridPoint(2, 1, 3)], "draft-token values must not multiply topk-1 points"


def test_topk_above_one_takes_draft_tokens_that_fit_the_tree():
    # steps 1, topk 2: at most 1 + 2 = 3 draft tokens; steps 2, topk 2: at most 1 + 2 + 4 = 7
    points = sweep.grid([1, 2], [2], [3, 4, 8])
    assert points == [GridPoint(1, 2, 3), GridPoint(2, 2, 3), GridPoint(2, 2, 4)], f"grid: {points}"
    assert sweep.max_draft_tokens(3, 4) == 1 + 4 + 2 * 16, "tree size: topk + (steps - 1) * topk^2 candidates"


def test_bad_grids_are_one_line_errors():
    with pytest.raises(UserError, match=r"needs --sweep-draft-tokens"):
        sweep.grid([2], [1, 4], [])
    with pytest.raises(UserError, match=r"no count fits"):
        sweep.grid([1], [2], [8])
    with pytest.raises(UserError, match=r"--sweep-steps is empty"):
        sweep.grid([], [1], [])
    with pytest.raises(UserError, match=r"--sweep-topk '1,x': 'x'"):
        sweep.parse_ints("--sweep-topk", "1,x")
    with pytest.raises(UserError, match=r"--sweep-draft-tokens '1': '1' is not an integer from 2 to 1024"):
        sweep.parse_ints("--sweep-draft-tokens", "1", minimum=2)


# --- the compose command ---------------------------------------------------------------


def project():
    from sglang_stack.services import composefile, variables

    return composefile.project(variables.Environment({}), (ROOT / "compose.yaml",))


def test_compose_command_and_environment(compose):
    argv = sweep.compose_argv(DOCKER, project(), "eagle3", 1800)
    assert argv == ["docker", "compose", "--project-directory", str(ROOT), "--profile", "baseline", "--profile", "eagle3",
                    "--profile", "router", "up", "--detach", "--wait", "--wait-timeout", "1800", "--force-recreate",
                    "--no-build", "eagle3"], f"the restart must recreate eagle3 and wait for its healthcheck: {argv}"
    env = sweep.compose_env(GridPoint(3, 1, 4), {"PATH": "/bin", "SGLANG_SPEC_NUM_STEPS": "9"})
    assert env == {"PATH": "/bin", "SGLANG_SPEC_NUM_STEPS": "3", "SGLANG_SPEC_EAGLE_TOPK": "1",
                   "SGLANG_SPEC_NUM_DRAFT_TOKENS": "4"}, f"grid point must override the environment: {env}"


def test_compose_yaml_reads_the_sweep_variables(compose):
    from sglang_stack.services import variables
    from sglang_stack.services import composefile

    env = variables.environment(ROOT / "no-such.env", {**GridPoint(2, 1, 3).env(), "MODEL_DIR": "/m"})
    argv = composefile.service("eagle3", env).argv
    for flag, value in (("--speculative-num-steps", "2"), ("--speculative-eagle-topk", "1"),
                        ("--speculative-num-draft-tokens", "3")):
        assert argv[argv.index(flag) + 1] == value, f"compose.yaml does not pass {flag} from the sweep's variable"


def test_compose_restart_runs_docker_with_the_grid_point(tmp_path, monkeypatch, compose):
    # A stand-in `docker` on PATH records what it was called with; no container is started.
    record = tmp_path / "record.json"
    tool = tmp_path / "docker"
    tool.write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        "env = {k: v for k, v in os.environ.items() if k.startswith('SGLANG_SPEC_')}\n"
        f"json.dump({{'argv': sys.argv[1:], 'env': env}}, open({str(record)!r}, 'w'))\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    proj = project()
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    sweep.compose_restart(DOCKER, proj, "eagle3", 600)(GridPoint(2, 1, 3))
    seen = json.loads(record.read_text())
    assert seen["argv"] == sweep.compose_argv(DOCKER, proj, "eagle3", 600)[1:], f"argv: {seen['argv']}"
    assert seen["env"] == {"SGLANG_SPEC_NUM_STEPS": "2", "SGLANG_SPEC_EAGLE_TOPK": "1",
                           "SGLANG_SPEC_NUM_DRAFT_TOKENS": "3"}, f"variables compose saw: {seen['env']}"


def test_compose_restart_without_docker_is_an_error(tmp_path, monkeypatch, compose):
    proj = project()
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match=r"docker not found on PATH"):
        sweep.compose_restart(DOCKER, proj, "eagle3")


# --- checks and choice -----------------------------------------------------------------


def test_mismatch_names_what_the_server_runs():
    point = GridPoint(3, 1, 4)
    assert sweep.mismatch({"speculative_num_steps": 3, "speculative_eagle_topk": 1,
                           "speculative_num_draft_tokens": 4}, point) is None, "a matching server was flagged"
    assert sweep.mismatch({}, point) is None, "a server that does not say cannot be flagged"
    assert sweep.mismatch({"speculative_num_steps": 2, "speculative_eagle_topk": 1}, point) == (
        "speculative_num_steps=2 (wanted 3)"
    ), "the mismatch must name the key, the value and the wanted value"


def test_select_best_ranks_by_aggregate_and_breaks_ties_on_less_work():
    rows = [
        {"endpoint": "a", "level": 1, "aggregate_tps_mean": 90.0},
        {"endpoint": "b", "level": 1, "aggregate_tps_mean": 96.0},
        {"endpoint": "c", "level": 1, "aggregate_tps_mean": 96.0},
        {"endpoint": "d", "level": 1, "aggregate_tps_mean": 120.0},
        {"endpoint": "a", "level": 4, "aggregate_tps_mean": 500.0},
    ]
    points = [
        {"label": "a", "steps": 1, "draft_tokens": 2},
        {"label": "b", "steps": 3, "draft_tokens": 4},
        {"label": "c", "steps": 2, "draft_tokens": 3},
        {"label": "d", "steps": 4, "draft_tokens": 5, "error": "server did not come up"},
    ]
    assert sweep.select_best({"rows": rows}, points, 1) == "c", "tie on speed must go to fewer draft tokens"
    assert sweep.select_best({"rows": rows}, points, 4) == "a", "ranking must use the chosen level"
    assert sweep.select_best({"rows": rows}, points[3:], 1) is None, "a failed point can never be best"


# --- a sweep against a loopback server -------------------------------------------------------


def behaviour_for(point: GridPoint) -> Behaviour:
    """The served speed of a setting, from 13-token answers: steps 2 is by far the fastest.

    steps 2 delivers all 12 tokens after the first in one 10 ms step (20 ms a request);
    steps 1 delivers 2 per 20 ms step (130 ms), steps 3 delivers 4 per 50 ms step (160 ms).
    The sweep ranks by aggregate tok/s over real round wall times, so the margin is what
    keeps the ranking right on a loaded machine: a round of 2 requests at steps 2 takes
    about 45 ms against 260 ms or more for the others, so steps 2 loses only if both of
    its rounds stall by more than 200 ms (the worst stall seen with a busy loop on every
    core of a 2-core host, 4 busy loops in all, was 70 ms).
    """
    step, accept = {1: (0.020, 2), 2: (0.010, 12)}.get(point.steps, (0.050, 4))
    return Behaviour(
        step_s=step, ttft_s=0.01, accept=(accept,), spec=True,
        server_info={"speculative_num_steps": point.steps, "speculative_eagle_topk": point.topk,
                     "speculative_num_draft_tokens": point.draft_tokens},
    )


def test_sweep_finds_the_fastest_setting(tmp_path, sglang_generator):
    """Every point measured by one SGLang benchmark process; acceptance from the server's meta_info."""
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=13)
    restarts: list[GridPoint] = []
    with SGLangServer(behaviour_for(GridPoint(1, 1, 2))) as server:

        def restart(point: GridPoint) -> None:
            restarts.append(point)
            if point.topk > 1:  # as when a setting does not fit in memory
                raise UserError("docker compose up eagle3 failed with exit code 1")
            server.behaviour = behaviour_for(point)

        out = sweep.run(Request(endpoints=[f"eagle3={server.url}"], levels="1", repeats=2, warmup=0, prompts=prompts,
                                out=tmp_path / "r", steps="1,2,3", topk="1,2", draft_tokens="4", **sglang_generator),
                        environ={}, restart=restart, ready_interval=0.01, progress=True,
                        log_tail=lambda: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    doc = json.loads((out / report.JSON_NAME).read_text())
    assert doc["complete"] is True and doc["metadata"]["load"]["generator"]["name"] == "sglang", doc["error"]
    labels = [p["label"] for p in doc["sweep"]["points"]]
    assert labels == ["eagle3 s1 k1 d2", "eagle3 s2 k1 d3", "eagle3 s2 k2 d4", "eagle3 s3 k1 d4", "eagle3 s3 k2 d4"], (
        f"grid order: {labels}"
    )
    assert doc["sweep"]["best"] == "eagle3 s2 k1 d3", f"best {doc['sweep']['best']}, served fastest: steps 2"
    failed = [p["label"] for p in doc["sweep"]["points"] if p["error"]]
    assert failed == ["eagle3 s2 k2 d4", "eagle3 s3 k2 d4"], f"failed points not recorded: {failed}"
    assert restarts[-1] == GridPoint(2, 1, 3), f"the service was not left on the best setting: {restarts[-1]}"
    rows = {r["endpoint"]: r for r in doc["summary"]["rows"]}
    assert rows["eagle3 s2 k1 d3"]["accept_length"] == pytest.approx(13 / 1), "accept length of steps 2 from meta_info"
    assert rows["eagle3 s1 k1 d2"]["accept_length"] == pytest.approx(13 / 6), "accept length of steps 1 from meta_info"
    # Served: steps 2 sends 12 tokens in one 10 ms step, steps 1 in six of 20 ms: about 1200 and 100 tok/s.
    assert rows["eagle3 s2 k1 d3"]["decode_tps_p50"] > 3 * rows["eagle3 s1 k1 d2"]["decode_tps_p50"], rows
    assert rows["eagle3 s1 k1 d2"]["decode_tps_p50"] <= 12 / 0.120 * 1.25, "never much faster than served"
    text = (out / report.MARKDOWN_NAME).read_text()
    assert "SGLANG_SPEC_NUM_STEPS=2" in text and "SGLANG_SPEC_NUM_DRAFT_TOKENS=3" in text, "no .env lines for the best"
    assert "| eagle3 s2 k2 d4 | 2 | 2 | 4 | - | - | - | - | - | docker compose up eagle3 failed" in text, "failed row missing"
    causes = {p["label"]: p["log_tail"] for p in doc["sweep"]["points"] if p["error"]}
    assert all("CUDA out of memory" in c for c in causes.values()), f"a failed point records its log's last lines: {causes}"
    assert "eagle3 s2 k2 d4 failed; the last lines of its log:" in text and "CUDA out of memory" in text
    header = next(line for line in text.splitlines() if line.startswith("| setting"))
    assert "| spread |" in header and "P(last step accepted)" in header, header


def test_sweep_stops_when_the_server_ignores_the_setting(tmp_path, sglang_generator):
    prompts = write_prompts(tmp_path / "p.jsonl", count=1, tokens=4)
    with SGLangServer(behaviour_for(GridPoint(3, 1, 4))) as server:
        wanted = r"runs speculative_num_steps=3 \(wanted 1\).*must pass SGLANG_SPEC_NUM_STEPS"
        with pytest.raises(UserError, match=wanted):
            sweep.run(Request(**sglang_generator, endpoints=[f"eagle3={server.url}"], levels="1", repeats=1, warmup=0, prompts=prompts, out=tmp_path / "r", steps="1,2"), environ={}, restart=lambda point: None, ready_interval=0.01, progress=False)
    doc = json.loads((tmp_path / "r" / report.JSON_NAME).read_text())
    assert doc["complete"] is False and "must pass" in doc["error"], "a misconfigured sweep must be marked incomplete"


def test_sweep_fails_when_every_point_fails(tmp_path, sglang_generator):
    prompts = write_prompts(tmp_path / "p.jsonl", count=1, tokens=4)

    def restart(point: GridPoint) -> None:
        raise UserError("docker compose up eagle3 failed with exit code 1")

    with SGLangServer() as server:
        with pytest.raises(UserError, match=r"every sweep point failed"):
            sweep.run(Request(**sglang_generator, endpoints=[f"eagle3={server.url}"], levels="1", repeats=1, warmup=0, prompts=prompts, out=tmp_path / "r", steps="1,2"), environ={}, restart=restart, ready_interval=0.01, progress=False)


def test_sweep_measures_only_eagle3(tmp_path):
    with pytest.raises(UserError, match=r"--sweep measures only eagle3"):
        sweep.run(Request(endpoints=["baseline=http://127.0.0.1:1"], prompts=write_prompts(tmp_path / "p.jsonl"), out=tmp_path / "r"), environ={}, restart=lambda point: None, progress=False)
    with pytest.raises(UserError, match=r"--sweep-level 4: not one of --levels 1"):
        sweep.run(Request(levels="1", level="4", prompts=write_prompts(tmp_path / "p.jsonl"), out=tmp_path / "r"), environ={}, restart=lambda point: None, progress=False)


def test_sweep_waits_for_the_restarted_server(tmp_path, sglang_generator):
    prompts = write_prompts(tmp_path / "p.jsonl", count=1, tokens=4)
    with SGLangServer(Behaviour(health_status=503)) as server:
        with pytest.raises(UserError, match=r"every sweep point failed"):
            sweep.run(Request(**sglang_generator, endpoints=[f"eagle3={server.url}"], levels="1", repeats=1, warmup=0, prompts=prompts, out=tmp_path / "r", steps="1", ready_timeout=0.2), environ={}, restart=lambda point: None, ready_interval=0.05, progress=False)
    doc = json.loads((tmp_path / "r" / report.JSON_NAME).read_text())
    error = doc["sweep"]["points"][0]["error"]
    assert "is not ready: HTTP 503" in error and error.endswith("after 0.2 s of waiting"), f"point error: {error}"


def test_no_extra_restart_when_the_last_point_is_best(tmp_path, sglang_generator):
    prompts = write_prompts(tmp_path / "p.jsonl", count=1, tokens=13)
    restarts: list[GridPoint] = []
    with SGLangServer(behaviour_for(GridPoint(1, 1, 2))) as server:

        def restart(point: GridPoint) -> None:
            restarts.append(point)
            server.behaviour = behaviour_for(point)

        sweep.run(Request(**sglang_generator, endpoints=[f"eagle3={server.url}"], levels="1", repeats=1, warmup=0, prompts=prompts, out=tmp_path / "r", steps="1,2"), environ={}, restart=restart, ready_interval=0.01, progress=False)
    assert restarts == [GridPoint(1, 1, 2), GridPoint(2, 1, 3)], f"restarts: {restarts}"


def test_progress_counts_rounds_and_drops_those_of_failed_points(tmp_path, capsys, sglang_generator):
    prompts = write_prompts(tmp_path / "p.jsonl", count=2, tokens=4)

    with SGLangServer(behaviour_for(GridPoint(1, 1, 2))) as server:

        def restart(point: GridPoint) -> None:
            if point.steps == 2:
                raise UserError("docker compose up eagle3 failed with exit code 1")
            server.behaviour = behaviour_for(point)

        sweep.run(Request(**sglang_generator, endpoints=[f"eagle3={server.url}"], levels="1", repeats=2, warmup=1, prompts=prompts, out=tmp_path / "r", steps="1,2,3"), environ={}, restart=restart, ready_interval=0.01, progress=True)
    out, err = capsys.readouterr()
    rounds = [line.split(":")[0] for line in out.splitlines() if line.startswith("[")]
    # 3 points x 2 repeats planned; steps 2 never comes up, so its 2 rounds are dropped.
    assert rounds == ["[1/6] eagle3 s1 k1 d2 c=1 repeat 1/2", "[2/6] eagle3 s1 k1 d2 c=1 repeat 2/2",
                      "[3/4] eagle3 s3 k1 d4 c=1 repeat 1/2", "[4/4] eagle3 s3 k1 d4 c=1 repeat 2/2"], out
    assert "bench: sweep point eagle3 s2 k1 d3 failed: docker compose up eagle3 failed" in err, "diagnostics on stderr"
    assert "sweep point" not in out and "| eagle3 s1 k1 d2 |" in out, f"the table on stdout, failures not: {out}"
