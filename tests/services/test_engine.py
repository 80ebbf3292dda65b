"""The user's own commands on the real Docker Engine: `invoke build`, `docker compose up`, `invoke up/status/logs/down/bench/doctor`.

What cannot exist on a machine without GPUs is replaced, and nothing else: the model
server (a CPU stand-in image, tests/engine.py), the GPU reservation and memlock
(tests/compose.engine.yaml). The compose file, the image's healthcheck probe and the
tasks are the shipped ones.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from conftest import wait_until
from sglang_stack.engine import DOCKER
from sglang_stack import ROOT
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.image import store
from sglang_stack.services import variables
from sglang_stack.services import composefile

import engine

pytestmark = pytest.mark.engine

OVERRIDE = ROOT / "tests" / "compose.engine.yaml"


def post_json(url: str, body: dict, timeout: float = 60) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def get_json(url: str, timeout: float = 30) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


# --- invoke build --engine docker -------------------------------------------------------------


def test_invoke_build_with_docker_builds_the_sglang_stage(sglang_stage):
    tag, proc, seconds = sglang_stage
    assert "$ docker buildx build --load" in proc.stderr, f"the engine command is not shown: {proc.stderr[:2000]}"
    assert f"built {tag} (sha256:" in proc.stdout, proc.stdout[-2000:]
    for line in ("patch 0001-", "audit passed"):
        assert line in proc.stderr, f"the build log lacks {line!r}: the patches and the audit must run in the build"
    labels = store.labels(DOCKER, tag)
    lock = lockmod.check()
    assert labels.get("io.sglang-stack.sglang.version") == lock.sglang.version, f"labels: {sorted(labels)}"
    version = engine.docker("run", "--rm", "--network", "none", "--entrypoint", "python3", tag, "-c",
                            "import importlib.metadata as m; print(m.version('sglang'))").stdout.strip()
    assert version == lock.sglang.version, f"the image holds sglang {version!r}"
    # The SBOM, inside the image and beside the build: the same bytes, and it names the pinned wheel.
    beside = ROOT / "build" / "sbom" / f"{tag.replace('/', '_').replace(':', '_')}.cdx.json"
    assert f"wrote build/sbom/{beside.name}" in proc.stdout, proc.stdout[-2000:]
    inside = engine.docker("run", "--rm", "--network", "none", "--entrypoint", "cat", tag, "/opt/sglang-stack/sbom.cdx.json").stdout
    assert json.loads(inside) == json.loads(beside.read_text())
    sglang = next(c for c in json.loads(inside)["components"] if c["name"] == "sglang")
    assert sglang["hashes"] == [{"alg": "SHA-256", "content": lock.sglang.sha256}] and sglang["version"] == lock.sglang.version
    beside.unlink()
    print(f"invoke build --engine docker --target sglang: {seconds:.1f} s")


def test_invoke_verify_checks_the_docker_built_stage(sglang_stage):
    """`invoke verify` through the Docker Engine: the image's python3 runs this checkout's inventory.py."""
    from sglang_stack.image import verify as verify_image

    tag = sglang_stage[0]
    report = verify_image.verify(DOCKER, tag)
    assert report.ok and report.stage == "sglang", report.lines()
    assert [c.name for c in report.checks if c.ok] == ["labels", "installed", "sbom", "patches"]


def test_missing_base_image_is_one_line(docker_engine, run_id):
    proc = engine.ComposeProject(f"sgs-test-{run_id}-nobase", [], {}).invoke(
        "build", "--engine", "docker", "--target", "sglang", "--base-image", f"sglang-stack-test-{run_id}:no-such-base",
        "--tag", f"sglang-stack-test-{run_id}:never", check=False, timeout=300,
    )
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: docker build failed"), proc.stderr[-2000:]
    assert f"sglang-stack-test-{run_id}:no-such-base is not in the docker image store" in last, last
    for hint in ("docker pull", "--base-image", "invoke smoke"):
        assert hint in last, f"the error does not say how to get a base ({hint!r}): {last}"
    assert not store.exists(DOCKER, f"sglang-stack-test-{run_id}:never"), "a failed build must not leave its tag"


def test_settings_before_a_build_is_one_line_and_pulls_nothing(docker_engine, run_id):
    """No image yet: `invoke settings` names the image and the build, instead of a pull from Docker Hub."""
    absent = f"sglang-stack-test-{run_id}:settings-absent"
    proc = engine.ComposeProject(f"sgs-test-{run_id}-settings", [], {}).invoke(
        "settings", "--image", absent, "--host", "h200x1", check=False, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (f"error: settings: {absent}: no such image in the docker store: build it first (`invoke build`), "
                    "or name one with --image, or run SGLang with --python"), last
    assert "docker run" not in proc.stdout + proc.stderr, "nothing may run (or pull) before the image is known"


def test_fetch_tries_the_base_images_first_and_a_failed_pull_is_one_line(docker_engine, run_id, tmp_path):
    """A registry this host cannot reach ends `invoke fetch` before any wheel is downloaded, in one line that
    says where to run it instead."""
    absent = f"localhost:1/sglang-stack-test-{run_id}:absent"
    proc = engine.ComposeProject(f"sgs-test-{run_id}-fetch", [], {}).invoke(
        "fetch", "--dir", str(tmp_path / "mirror"), "--target", "sglang", "--base-image", absent, check=False, timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: docker pull {absent} failed (") and "`invoke fetch` on a host that reaches localhost:1" in last, last
    assert not list((tmp_path / "mirror" / "wheels").glob("*")), "no wheel may be fetched before the bases are"


def test_the_sweep_runs_the_preflight_first_and_never_builds(docker_engine, run_id, model_dirs, tmp_path):
    """No GPU runtime here: the sweep stops at the preflight, in one line, before any compose run or results directory."""
    out = tmp_path / "sweep-results"
    project = engine.ComposeProject(f"sgs-test-{run_id}-sweep", [], {**model_dirs, "SGLANG_STACK_IMAGE": f"sglang-stack-test-{run_id}:absent"})
    proc = project.invoke("bench", "--sweep", "--sweep-steps", "1,2", "--out", str(out), check=False, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout[-1500:] + proc.stderr[-1500:]
    assert proc.stderr.strip().startswith("error: preflight ") and proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "compose up" not in proc.stdout + proc.stderr, "no compose run may happen before the preflight passes"
    assert not out.exists(), "a refused sweep leaves no results directory"
    assert not store.exists(DOCKER, f"sglang-stack-test-{run_id}:absent"), "the sweep must never build or pull the image"


# --- docker compose up -d --wait, the mission's literal command --------------------------------


@pytest.mark.parametrize("service", ["eagle3", "baseline"])
def test_compose_up_wait_reaches_healthy_and_serves(service, standin_image, compose_project, model_dirs):
    project = compose_project(OVERRIDE, env={"SGLANG_STACK_IMAGE": standin_image, **model_dirs})
    start = time.monotonic()
    project.compose("up", "-d", "--wait", service, timeout=300)
    print(f"docker compose up -d --wait {service}: healthy after {time.monotonic() - start:.1f} s")
    assert project.health(service) == "healthy", f"{service} is {project.health(service)} after up --wait"

    url = project.url(service)
    answer = post_json(f"{url}/generate", {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8}})
    meta = answer["meta_info"]
    assert meta["completion_tokens"] == 8, meta
    if service == "eagle3":
        assert meta.get("spec_verify_ct", 0) > 0, f"eagle3 must run with --speculative-algorithm EAGLE3: {meta}"
    else:
        assert "spec_verify_ct" not in meta, f"baseline must not speculate: {meta}"
    models = get_json(f"{url}/v1/models")
    assert [m["id"] for m in models["data"]] == ["kimi-k2.5"], f"served model name from compose.yaml: {models}"
    assert models["data"][0]["root"] == "/models/target", f"the model is mounted where compose.yaml says: {models}"
    # A fresh clone: no .env and no secret variable, so each secret is /dev/null and the API needs no key.
    assert not {"SGLANG_API_KEY", "HF_TOKEN", "SGLANG_API_KEY_FILE", "HF_TOKEN_FILE"} & set(project.env), project.env
    (container,) = [c["ID"] for c in project.containers() if service in c["Names"]]
    secrets = engine.docker("exec", container, "sh", "-c", "wc -c < /run/secrets/sglang_api_key; wc -c < /run/secrets/hf_token")
    assert secrets.stdout.split() == ["0", "0"], f"the unset secrets must be empty files: {secrets.stdout!r}"
    # Least privilege, measured in the serving container: the server came up healthy and answered above with
    # no capability, no privilege to gain, a read-only root and its own /dev/shm.
    status = dict(line.split(":\t", 1) for line in engine.docker("exec", container, "cat", "/proc/1/status").stdout.splitlines()
                  if ":\t" in line)
    assert status["NoNewPrivs"].strip() == "1" and int(status["CapBnd"], 16) == 0, {k: status[k] for k in ("NoNewPrivs", "CapBnd")}
    writes = engine.docker("exec", container, "sh", "-c", "touch /opt/x 2>&1; touch /tmp/x && echo tmp-ok; "
                           "df -k /dev/shm | tail -1", check=False).stdout
    assert "Read-only file system" in writes and "tmp-ok" in writes, writes
    assert int(writes.split()[-5]) == 64 << 20, f"/dev/shm is the container's own 64 GiB (SHM_SIZE): {writes}"

    # Plain `docker compose down` ignores services in inactive profiles; naming the profile is the user's command.
    project.compose("--profile", service, "down")
    assert project.containers() == [], f"down left containers: {project.containers()}"
    assert project.networks() == [], f"down left networks: {project.networks()}"


# --- invoke up / status / logs / down ------------------------------------------------------------


def test_invoke_up_status_logs_down(standin_image, compose_project, model_dirs):
    # A load long enough for a few progress lines: each shows the latest state of the redrawn bar.
    project = compose_project(OVERRIDE, env={"SGLANG_STACK_IMAGE": standin_image, "SGLANG_EXTRA_ARGS": "--standin-load-seconds 6", **model_dirs})
    up = project.invoke("up", "eagle3", "--interval", "1", timeout=300)
    assert "preflight:" in up.stdout and "0 FAIL" in up.stdout, f"the preflight must pass here: {up.stdout}"
    progress = [line for line in up.stdout.splitlines() if line.startswith("eagle3 ") and "health: starting" in line]
    assert progress, f"no progress line while the model loaded: {up.stdout}"
    assert all("\x1b" not in line and "\r" not in line for line in progress), f"control sequences in progress lines: {progress}"
    assert any("stand-in: serving /models/target" in line or "Loading safetensors" in line for line in progress), \
        f"progress lines show the server's latest log line: {progress}"
    assert "eagle3: healthy after" in up.stdout and project.url("eagle3") in up.stdout, up.stdout

    status = project.invoke("status").stdout
    line = next((row for row in status.splitlines() if row.startswith("eagle3")), "")
    assert "running (healthy)" in line and f":{project.env['EAGLE3_PORT']}->30000" in line, status
    assert "baseline  not created" in status, status
    assert "autotune:" not in status, "nothing tuned yet, nothing named"
    # What FlashInfer writes at the first PCIe-IPC start, in the cache volume: status names it for the next start.
    tune = "/home/sglang/.cache/flashinfer/autotune"
    project.compose("exec", "eagle3", "sh", "-c", f"mkdir -p {tune} && echo '{{\"(8, 1536)\": [1, 2]}}' > "
                    f"{tune}/pcie_ipc_all_reduce_ws8.json")
    named = project.invoke("status").stdout
    assert f"autotune: {tune}/pcie_ipc_all_reduce_ws8.json: 1 tuned entry, written " in named, named

    logs = project.invoke("logs", "eagle3", "--no-follow", "--tail", "all").stdout
    assert "The server is fired up and ready to roll!" in logs, f"invoke logs shows the server's log: {logs[-1000:]}"

    project.invoke("down")
    assert project.containers() == [], f"invoke down left containers: {project.containers()}"
    assert project.networks() == [], f"invoke down left networks: {project.networks()}"
    after = project.invoke("status").stdout
    assert "eagle3    not created" in after, after


def test_invoke_up_says_why_a_server_died(standin_image, compose_project, model_dirs):
    project = compose_project(OVERRIDE, env={"SGLANG_STACK_IMAGE": standin_image, "SGLANG_EXTRA_ARGS": "--standin-crash", **model_dirs})
    up = project.invoke("up", "baseline", "--interval", "1", check=False, timeout=300)
    assert up.returncode != 0 and "Traceback" not in up.stderr, up.stderr[-2000:]
    last = up.stderr.strip().splitlines()[-1]
    assert last.startswith("error: baseline exited with code 1 after") and "invoke logs baseline" in last, last
    assert "CUDA out of memory" in up.stdout + up.stderr, "the server's last log lines are shown"


def test_invoke_up_eagle3_checks_acceptance_and_fails_a_drafter_that_never_hits(standin_image, compose_project, model_dirs):
    """The real engine and compose.yaml: `invoke up eagle3` ends with `invoke acceptance`; a low acceptance is exit 1."""
    low = compose_project(OVERRIDE, env={"SGLANG_STACK_IMAGE": standin_image, **model_dirs,
                                         "SGLANG_EXTRA_ARGS": "--standin-accept 1,1,1"})
    up = low.invoke("up", "eagle3", "--interval", "1", check=False, timeout=300)
    assert low.health("eagle3") == "healthy", "the server is healthy: acceptance is what is wrong"
    assert up.returncode == 1 and "Traceback" not in up.stderr, up.stdout[-1500:] + up.stderr[-1500:]
    assert up.stderr.strip().splitlines()[-1].startswith("error: eagle3: accept length 1.00 is below 1.20"), up.stderr[-500:]
    assert "at 3/1/4 (steps/top-k/draft tokens)" in up.stdout, "the speculative settings come from compose.yaml"
    low.compose("--profile", "eagle3", "down")

    normal = compose_project(OVERRIDE, env={"SGLANG_STACK_IMAGE": standin_image, **model_dirs})
    normal.compose("up", "-d", "--wait", "eagle3", timeout=300)
    checked = normal.invoke("acceptance", "eagle3", check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    lines = checked.stdout.strip().splitlines()
    assert lines[-1].startswith("eagle3: accept length 2.3") and "at or above 1.20" in lines[-1], checked.stdout
    assert "per position P(>=1)" in checked.stdout, "per-position acceptance from spec_accept_histogram"


def test_the_preflight_skips_gpu_checks_only_when_the_override_drops_the_gpus(standin_image, compose_project, model_dirs):
    project = compose_project(OVERRIDE, env={"SGLANG_STACK_IMAGE": standin_image, **model_dirs})
    doctor = project.invoke("doctor", "--service", "eagle3", check=False).stdout
    for name in ("gpu-runtime", "driver", "gpus", "arch"):
        line = next((row for row in doctor.splitlines() if row.split()[1:2] == [name]), "")
        assert line.startswith("skip") and "reserves no GPU" in line and "tests/compose.engine.yaml" in line, doctor
    shipped = compose_project(env={"SGLANG_STACK_IMAGE": standin_image, **model_dirs})
    strict = shipped.invoke("doctor", "--service", "eagle3", check=False)
    assert strict.returncode == 1, "compose.yaml alone reserves GPUs: a host without them must fail the doctor"
    line = next((row for row in strict.stdout.splitlines() if row.split()[1:2] == ["gpu-runtime"]), "")
    assert line.startswith("FAIL") and "-- fix: install nvidia-container-toolkit" in line, strict.stdout


# --- health ----------------------------------------------------------------------------------------


def test_a_wedged_server_turns_unhealthy_within_the_window(standin_image, compose_project, model_dirs):
    # The documented rules, scaled down: the probe's deadline is SGLANG_HEALTH_CHECK_TIMEOUT + 10 s,
    # Docker's timeout must exceed it, and failures count once the first 200 ends the start period.
    timings = {"SGLANG_HEALTH_CHECK_TIMEOUT": "1", "HEALTH_INTERVAL": "1s", "HEALTH_TIMEOUT": "12s", "HEALTH_START_PERIOD": "1m"}
    project = compose_project(OVERRIDE, env={"SGLANG_STACK_IMAGE": standin_image, **model_dirs, **timings})
    project.compose("up", "-d", "--wait", "eagle3", timeout=300)
    svc = composefile.service("eagle3", variables.environment(shell_env=project.env))
    window = composefile.unhealthy_within(svc)
    assert window == 3 * (1 + 12), f"retries x (interval + timeout): {window}"

    project.compose("kill", "--signal", "SIGUSR1", "eagle3")  # the stand-in stops answering, as a hung scheduler does
    start = time.monotonic()
    turned = wait_until(lambda: project.health("eagle3") == "unhealthy", timeout=window + 30, interval=0.5)
    elapsed = time.monotonic() - start
    assert turned, f"still {project.health('eagle3')} {elapsed:.0f} s after the server stopped answering"
    # One interval of slack: the wedge may land just after a probe started.
    assert elapsed <= window + 1 + 10, f"unhealthy after {elapsed:.0f} s, the documented window is {window:.0f} s"
    print(f"unhealthy {elapsed:.1f} s after the server stopped answering (window {window:.0f} s)")
    status = project.invoke("status").stdout
    assert "running (unhealthy)" in status, status


# --- bench ----------------------------------------------------------------------------------------


def test_bench_measures_baseline_and_eagle3_through_their_ports(standin_image, compose_project, model_dirs, tmp_path,
                                                                sglang_generator):
    """SGLang's benchmark runs on the host (--python, a CPU Python of the pins, as where the services' image is not at
    hand) and reaches both published ports."""
    project = compose_project(OVERRIDE, env={"SGLANG_STACK_IMAGE": standin_image, **model_dirs})
    # Both at once: they would each want every GPU, but the stand-ins want none.
    project.compose("up", "-d", "--wait", "baseline", "eagle3", timeout=300)
    # The doctor reads what each running container reserves from the engine itself: here, no GPU, so the two
    # servers share none and neither is refused for the other.
    doctor = project.invoke("doctor", "eagle3", check=False).stdout
    line = next((row for row in doctor.splitlines() if " exclusive " in f" {row} "), "")
    assert line.split()[0] == "ok" and "baseline on GPUs none: disjoint from eagle3, which reserves no GPU" in line, doctor
    out = tmp_path / "bench"
    project.invoke("bench", "--levels", "1,2", "--repeats", "1", "--warmup", "1", "--python",
                   sglang_generator["python"], "--tokenizer", sglang_generator["tokenizer"], "--out", str(out),
                   timeout=600)
    results = json.loads((out / "bench.json").read_text())
    endpoints = {e["name"]: e for e in results["metadata"]["endpoints"]}
    assert set(endpoints) == {"baseline", "eagle3"}, f"bench found: {sorted(endpoints)}"
    for name in endpoints:
        assert endpoints[name]["url"] == project.url(name), f"{name} measured at {endpoints[name]['url']}, published at {project.url(name)}"
    rows = {(r["endpoint"], r["level"]): r for r in results["summary"]["rows"]}
    for key in (("baseline", 1), ("baseline", 2), ("eagle3", 1), ("eagle3", 2)):
        assert key in rows and rows[key]["decode_tps_p50"] > 0 and rows[key]["failed"] == 0, f"no measurement for {key}: {rows.get(key)}"
    assert rows[("baseline", 1)]["accept_length"] is None, "baseline does not speculate"
    accept = rows[("eagle3", 1)]["accept_length"]
    assert accept and accept > 1.5, f"eagle3's acceptance length comes from SGLang's meta_info: {rows[('eagle3', 1)]}"


# --- doctor and clear errors ---------------------------------------------------------------------


def test_compose_builds_the_profile_it_tags(docker_base, compose_project, model_dirs, run_id, tmp_path):
    """SGLANG_PROFILE=0.5.23 in the user's settings: `docker compose build` builds that profile's Dockerfile, and
    the image it tags says so in the label the doctor reads (the `base` stage, the first that carries it)."""
    tag = f"sglang-stack-test-{run_id}:compose-profile"
    override = tmp_path / "compose.base-stage.yaml"
    override.write_text("services:\n  eagle3:\n    build:\n      target: base\n      args:\n"
                        f"        BASE_IMAGE: {docker_base}\n")
    project = compose_project(override, env={**model_dirs, "SGLANG_PROFILE": "0.5.23", "SGLANG_STACK_IMAGE": tag})
    config = json.loads(project.compose("--profile", "*", "config", "--format", "json", timeout=120).stdout)
    build = config["services"]["eagle3"]["build"]
    assert build["dockerfile"] == "profiles/0.5.23/docker/Dockerfile", build
    assert config["services"]["router"]["build"]["dockerfile"] == "profiles/0.5.23/docker/Dockerfile", "the router too"
    try:
        project.compose("build", "eagle3", timeout=900)
        labels = json.loads(engine.docker("image", "inspect", tag).stdout)[0]["Config"]["Labels"]
        assert labels["io.sglang-stack.sglang.version"] == "0.5.23", labels
        assert labels["io.sglang-stack.profile"] == "0.5.23", labels
    finally:
        store.remove(DOCKER, tag)


def test_doctor_on_a_real_engine_without_gpus(docker_engine, compose_project, model_dirs):
    project = compose_project(env=model_dirs)
    proc = project.invoke("doctor", "--service", "baseline", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    lines = {row.split()[1]: row for row in proc.stdout.splitlines() if len(row.split()) > 2 and row.split()[0] in ("ok", "FAIL", "warn", "skip", "note")}
    assert "Docker Engine" in lines["docker"] and "Compose" in lines["docker"], lines["docker"]
    old_engine = int(engine.docker("version", "--format", "{{.Server.Version}}").stdout.split(".")[0]) < 28
    # Before Engine 28 a port published on 127.0.0.1 is reachable from the same segment (moby/moby#45610).
    assert lines["docker"].startswith("warn" if old_engine else "ok") and ("moby/moby#45610" in lines["docker"]) == old_engine, \
        lines["docker"]
    assert lines["gpu-runtime"].startswith("FAIL") and "-- fix: install nvidia-container-toolkit" in lines["gpu-runtime"], lines["gpu-runtime"]
    assert lines["driver"].startswith("FAIL") and "-- fix: install the NVIDIA driver" in lines["driver"], lines["driver"]


def test_memlock_the_engine_refuses_is_one_line_with_its_fix(standin_image, compose_project, model_dirs, tmp_path):
    probe = engine.docker("run", "--rm", "--network", "none", "--ulimit", "memlock=-1:-1", "--entrypoint", "true",
                          standin_image, check=False)
    if probe.returncode == 0:
        pytest.skip("this engine grants memlock -1, so it cannot show the refusal")
    assert "rlimit" in probe.stderr, probe.stderr
    gpuless = tmp_path / "gpuless.yaml"  # GPUs dropped, compose.yaml's ulimits kept
    gpuless.write_text("services:\n  eagle3:\n    deploy: !reset {}\n")
    project = compose_project(gpuless, env={"SGLANG_STACK_IMAGE": standin_image, **model_dirs})
    doctor = project.invoke("doctor", "--service", "eagle3", check=False).stdout
    line = next(row for row in doctor.splitlines() if row.split()[1:2] == ["memlock"])
    assert line.startswith("FAIL") and "rlimit" in line and "LimitMEMLOCK=infinity" in line, line
    up = project.invoke("up", "eagle3", check=False)
    assert up.returncode == 2 and "Traceback" not in up.stderr, up.stderr
    last = up.stderr.strip().splitlines()[-1]
    assert last.startswith("error: preflight memlock:") and "LimitMEMLOCK=infinity" in last, last
    assert project.containers() == [], "a refused preflight starts nothing"


def test_unreachable_engine_is_one_line(docker_engine, compose_project, model_dirs, tmp_path):
    project = compose_project(env={**model_dirs, "DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"})
    for task in (["status"], ["down"], ["logs", "eagle3", "--no-follow"]):
        proc = project.invoke(*task, check=False)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith("error: no Docker engine reachable") and "start Docker" in last, f"invoke {task[0]}: {last}"


# --- the API key stays in its secret -------------------------------------------------------------


def test_the_api_key_reaches_the_server_and_nothing_else(standin_image, compose_project, model_dirs, tmp_path):
    """A key and a Hub token in the files .env names: the server demands the key, and inspect, compose config, ps,
    the processes' environments and the log never show either."""
    import secrets
    import urllib.error

    key = "sk-" + secrets.token_hex(16)
    token = "hf_" + secrets.token_hex(16)
    key_file, token_file = tmp_path / "sglang_api_key", tmp_path / "hf_token"
    key_file.write_text(key + "\n")
    token_file.write_text(token)
    for path in (key_file, token_file):
        path.chmod(0o644)  # the image's user (uid 10001) reads the bind-mounted file
    project = compose_project(OVERRIDE, env={"SGLANG_STACK_IMAGE": standin_image, **model_dirs,
                                             "SGLANG_API_KEY_FILE": str(key_file), "HF_TOKEN_FILE": str(token_file)})
    project.compose("up", "-d", "--wait", "eagle3", timeout=300)
    url = project.url("eagle3")
    request = urllib.request.Request(f"{url}/v1/models")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 401, "without the key the server must refuse: the key did not reach it"
    request.add_header("Authorization", f"Bearer {key}")
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200, "with the key the server must answer"

    (container,) = [c["ID"] for c in project.containers() if "eagle3" in c["Names"]]
    places = {
        "docker inspect": engine.docker("inspect", container).stdout,
        "docker compose config": project.compose("config").stdout,
        "docker compose logs": project.logs("eagle3"),
        "the process list (every /proc/PID/cmdline)": engine.docker(
            "exec", container, "sh", "-c", "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done").stdout,
        "the processes' environments": engine.docker(
            "exec", container, "sh", "-c", "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'").stdout,
    }
    assert "sglang_stack.entrypoints.serve" in places["the process list (every /proc/PID/cmdline)"], "not the image's entrypoint"
    leaks = [where for where, text in places.items() if key in text]
    assert not leaks, f"the API key shows in: {', '.join(leaks)}"
    leaks = [where for where, text in places.items() if token in text]
    assert not leaks, f"the Hub token shows in: {', '.join(leaks)}"
    secret = engine.docker("exec", container, "cat", "/run/secrets/sglang_api_key").stdout.strip()
    assert secret == key, "the secret file is where the key lives"
    hub = engine.docker("exec", container, "sh", "-c", 'cat "$HF_TOKEN_PATH"').stdout.strip()
    assert hub == token, "HF_TOKEN_PATH must name the file that holds the Hub token"


def test_invoke_up_refuses_an_api_published_beyond_loopback_without_a_key(standin_image, compose_project, model_dirs):
    """BIND_ADDRESS=0.0.0.0 and no SGLANG_API_KEY_FILE: one line, nothing started; ALLOW_UNAUTHENTICATED=1 starts it
    and the log says so."""
    env = {"SGLANG_STACK_IMAGE": standin_image, "BIND_ADDRESS": "0.0.0.0", **model_dirs}
    project = compose_project(OVERRIDE, env=env)
    up = project.invoke("up", "baseline", "--interval", "1", check=False, timeout=300)
    assert up.returncode != 0 and "Traceback" not in up.stderr, up.stderr[-2000:]
    last = up.stderr.strip().splitlines()[-1]
    assert last.startswith("error: preflight api-key: BIND_ADDRESS=0.0.0.0 publishes the API beyond this host") \
        and "ALLOW_UNAUTHENTICATED=1" in last, last
    assert project.containers() == [], "a refused preflight must start nothing"

    project = compose_project(OVERRIDE, env={**env, "ALLOW_UNAUTHENTICATED": "1"})
    up = project.invoke("up", "baseline", "--interval", "1", timeout=300)
    assert any(line.startswith("warn") and "api-key" in line and "ALLOW_UNAUTHENTICATED=1" in line
               for line in up.stdout.splitlines()), up.stdout
    assert "baseline: healthy after" in up.stdout, up.stdout
    project.invoke("down")
