"""The preflight as a user runs it: `python -m sglang_stack.doctor.checklist` end to end on the fixtures, with and
without Docker, and `invoke up`'s refusals, each a real process (fake `docker` and `nvidia-smi` first on PATH,
tests/fake_cli.py). The checks themselves, fact by fact, are tests/doctor/test_doctor.py's."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_stack import ROOT
from sglang_stack.doctor import gpus as gpu_checks
from sglang_stack.doctor import inputs
from sglang_stack.doctor.checks import FAIL, OK, WARN

import fake_cli
from pins import PIN
from doctor_facts import DRAFT_ARCH, FIXTURES, TARGET_ARCH, make_model, svc_of

pytestmark = pytest.mark.usefixtures("compose")  # Compose reads compose.yaml: without it, skip


# --- end to end ---------------------------------------------------------------------------------


def run_module(module: str, *args: str, env: dict, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def clean_env(extra: dict, **values: str) -> dict:
    """A process environment with none of the developer's stack variables, plus ``values``."""
    keep = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")}
    defaults = {"MODEL_DIR": "/nonexistent/model", "DRAFT_MODEL_DIR": "/nonexistent/draft", "TP_SIZE": "8", "GPU_IDS": "all",
                "BIND_ADDRESS": "127.0.0.1", "BASELINE_PORT": str(free_port()), "EAGLE3_PORT": str(free_port()),
                "SGLANG_EXTRA_ARGS": "", "HEALTH_TIMEOUT": "40s", "HEALTH_INTERVAL": "15s", "HEALTH_START_PERIOD": "30m",
                "SGLANG_HEALTH_CHECK_TIMEOUT": "20", "SGLANG_STACK_IMAGE": "sglang-stack:0.5.9-cu130"}
    return {**keep, "PYTHONPATH": str(ROOT), **defaults, **extra, **values}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_doctor_end_to_end_on_rtx_fixture(tmp_path):
    target = make_model(tmp_path / "k25", TARGET_ARCH, shards=4)
    draft = make_model(tmp_path / "draft", DRAFT_ARCH, shards=1)
    fake = fake_cli.install(
        tmp_path / "bin", smi="rtxpro6000x8", info=fake_cli.NVIDIA_INFO, compose_version="2.40.3", ps_rows=[],
        image={"Config": {"Entrypoint": ["python3", "-m", "sglang.launch_server"],
                          "Labels": {gpu_checks.ARCH_LABEL: "9.0a 12.0a"}}, "Size": 3.1e10, "Created": "2026-11-29"},
        audit_output="KimiK25ForConditionalGeneration: ok", audit_exit=0,
        # What the pinned SGLang's own start-up decided for 8 PCIe GPUs with P2P (tests/entrypoints/test_allreduce.py re-derives it).
        allreduce_output=(FIXTURES.parent / "allreduce" / f"{PIN['sglang']}-tp8-pcie-p2p.json").read_text().strip(),
    )
    proc = run_module("sglang_stack.doctor.checklist", "eagle3", env=clean_env(fake, MODEL_DIR=str(target), DRAFT_MODEL_DIR=str(draft)))
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stdout.splitlines()
    names = [line.split()[1] for line in lines[1:-1]]
    expected = ["config", "model", "drafter", "speculation", "api-key", "hub-token", "port", "docker", "gpu-runtime", "exclusive", "driver", "gpus", "arch",
                "sm120", "sm120", "topology", "all-reduce", "pcie-allreduce", "privilege", "shm", "limits", "memlock", "disk", "image", "kernels", "audit"]
    assert names == expected, f"checks printed: {names}\n{proc.stdout}"
    for name in ("model", "drafter", "docker", "gpu-runtime", "exclusive", "driver", "gpus", "arch", "topology", "image",
                 "kernels", "audit"):
        line = next(line for line in lines if line.split()[1:2] == [name])
        assert line.startswith("ok "), f"{name} should pass on the RTX fixture: {line}"
    any_fail = any(line.startswith("FAIL") for line in lines)
    assert proc.returncode == (1 if any_fail else 0), f"exit {proc.returncode} must follow the FAIL lines:\n{proc.stdout}"
    ran = fake_cli.calls(fake)
    audit = next(c for c in ran if c[:2] == ["docker", "run"] and "sglang_stack.audit.eagle3" in c)
    expected_audit = ["--entrypoint", "python3", "sglang-stack:0.5.9-cu130", "-m", "sglang_stack.audit.eagle3",
                      "--sglang-src", "/opt/sglang", "--arch", TARGET_ARCH]
    assert audit[audit.index("--entrypoint") :] == expected_audit, f"audit command: {audit}"
    allreduce = next(c for c in ran if c[:2] == ["docker", "run"] and "sglang_stack.entrypoints.allreduce" in c)
    assert allreduce[allreduce.index("--entrypoint"):] == [
        "--entrypoint", "python3", "sglang-stack:0.5.9-cu130", "-m", "sglang_stack.entrypoints.allreduce", "--tp", "8",
        "--nvlink", "no", "--p2p", "yes"], f"the all-reduce command: {allreduce}"
    line = next(line for line in lines if line.split()[1:2] == ["all-reduce"])
    assert line.split(None, 2)[2] == (
        f"SGLang {PIN['sglang']} at TP 8: custom all-reduce off (SGLang: Custom allreduce is disabled because it's not supported "
        "on more than two PCIe-only GPUs. To silence this warning, specify disable_custom_all_reduce=True explicitly.): "
        "every all-reduce is NCCL's, over P2P"), line
    assert "$ docker info" in proc.stderr, f"doctor shows the commands it runs: {proc.stderr}"
    stat = next(c for c in ran if c[:2] == ["docker", "run"] and "stat" in c)
    assert stat[-1] == "/home/sglang/.cache", f"the image's cache directory must be checked: {stat}"


def test_doctor_without_docker_or_gpu(tmp_path):
    """A bare host: the Docker and GPU checks fail with fixes, the rest still run. Without Docker, Compose cannot
    read compose.yaml: the config check says so, and what needs the service is skipped."""
    bare = tmp_path / "empty-bin"
    bare.mkdir()
    proc = run_module("sglang_stack.doctor.checklist", "baseline", env=clean_env({"PATH": str(bare)}))
    assert proc.returncode == 1, f"failed checks must exit 1, got {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = {line.split()[1]: line for line in proc.stdout.splitlines()[1:-1]}
    assert lines["docker"].startswith("FAIL") and "docker CLI not found" in lines["docker"] and "fix:" in lines["docker"], lines["docker"]
    assert lines["driver"].startswith("FAIL") and "fix:" in lines["driver"], lines["driver"]
    assert lines["audit"].startswith("skip"), lines["audit"]
    assert lines["config"].startswith("FAIL") and "Docker Compose v2" in lines["config"], lines["config"]
    for name in ("shm", "memlock", "disk"):
        assert not lines[name].startswith("skip"), f"{name} must still run without Docker: {lines[name]}"
    assert lines["port"].startswith("skip") and "config invalid" in lines["port"], lines["port"]
    assert proc.stdout.splitlines()[-1].startswith("doctor: "), "a summary line closes the report"


def invoke_up(service: str, env: dict) -> subprocess.CompletedProcess:
    return run_module("invoke", "up", service, env=env)


def assert_refused(proc: subprocess.CompletedProcess, fake: dict, text: str) -> None:
    assert proc.returncode == 2, f"expected exit 2, got {proc.returncode}\n{proc.stdout}{proc.stderr}"
    err = proc.stderr.strip()
    assert "\n" not in err, f"the refusal must be one line on stderr:\n{err}"
    assert err.startswith("error: ") and text in err, f"expected {text!r} in: {err}"
    assert "Traceback" not in proc.stderr, proc.stderr
    started = [c for c in fake_cli.calls(fake) if c[:2] == ["docker", "compose"] and "up" in c]
    assert not started, f"nothing may start after a refusal: {started}"


def test_up_refuses_unknown_service(tmp_path):
    fake = fake_cli.install(tmp_path / "bin", info=fake_cli.NVIDIA_INFO, compose_version="2.40.3")
    proc = invoke_up("gpt", clean_env(fake))
    assert_refused(proc, fake, "unknown service 'gpt': choose one of baseline, eagle3")
    ran = [call for call in fake_cli.calls(fake) if call[:2] != ["docker", "compose"] or "config" not in call]
    assert ran == [], f"an unknown service must be refused before any command but Compose's reading runs: {ran}"


def test_up_refuses_missing_model_and_drafter(tmp_path):
    fake = fake_cli.install(tmp_path / "bin", smi="rtxpro6000x8", info=fake_cli.NVIDIA_INFO, compose_version="2.40.3")
    proc = invoke_up("eagle3", clean_env(fake, MODEL_DIR=str(tmp_path / "nowhere")))
    assert_refused(proc, fake, f"preflight model: MODEL_DIR={tmp_path / 'nowhere'} (shell): no such directory -- fix: set MODEL_DIR")
    target = make_model(tmp_path / "k25", TARGET_ARCH)
    proc = invoke_up("eagle3", clean_env(fake, MODEL_DIR=str(target), DRAFT_MODEL_DIR=str(tmp_path / "no-drafter")))
    assert_refused(proc, fake, "preflight drafter: DRAFT_MODEL_DIR=")


def test_up_refuses_port_in_use(tmp_path):
    fake = fake_cli.install(tmp_path / "bin", smi="rtxpro6000x8", info=fake_cli.NVIDIA_INFO, compose_version="2.40.3")
    target = make_model(tmp_path / "k25", TARGET_ARCH)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        proc = invoke_up("baseline", clean_env(fake, MODEL_DIR=str(target), BASELINE_PORT=str(port)))
    assert_refused(proc, fake, f"preflight port: 127.0.0.1:{port} is already in use -- fix: stop what listens there, or set BASELINE_PORT")


def test_up_refuses_without_gpu_runtime(tmp_path):
    fake = fake_cli.install(tmp_path / "bin", smi="rtxpro6000x8", info=fake_cli.PLAIN_INFO, compose_version="2.40.3")
    target = make_model(tmp_path / "k25", TARGET_ARCH)
    proc = invoke_up("baseline", clean_env(fake, MODEL_DIR=str(target)))
    assert_refused(proc, fake, "preflight gpu-runtime: no NVIDIA container runtime")


@pytest.mark.parametrize(
    "content, values, status, text",
    [
        ("two words\n", {}, FAIL, "the API key contains whitespace"),
        (None, {}, FAIL, "no such file"),
        (None, {"BIND_ADDRESS": "0.0.0.0", "SGLANG_API_KEY_FILE": ""}, FAIL,
         "BIND_ADDRESS=0.0.0.0 publishes the API beyond this host, and no SGLANG_API_KEY_FILE is set"),
        (None, {"BIND_ADDRESS": "192.168.1.5", "SGLANG_API_KEY_FILE": "", "ALLOW_UNAUTHENTICATED": "1"}, WARN,
         "with no key: ALLOW_UNAUTHENTICATED=1"),
        (None, {"BIND_ADDRESS": "0.0.0.0", "SGLANG_API_KEY_FILE": "", "ALLOW_UNAUTHENTICATED": "yes"}, FAIL,
         "no SGLANG_API_KEY_FILE is set"),
        ("Zm9vYmFyYmF6-_.~+/=\n", {"BIND_ADDRESS": "0.0.0.0"}, OK, "set (SGLANG_API_KEY_FILE="),
        (None, {"SGLANG_API_KEY_FILE": ""}, OK, "none; the API listens on 127.0.0.1 only"),
        (None, {"SGLANG_API_KEY_FILE": "", "SGLANG_API_KEY": "left-in-dotenv"}, FAIL,
         "SGLANG_API_KEY (shell) is no longer read: compose takes secrets from files"),
    ],
)
def test_the_key_file_is_read_as_the_server_reads_it(tmp_path, content, values, status, text):
    key = tmp_path / "sglang_api_key"
    if content is not None:
        key.write_text(content)
    check = inputs.check_api_key(svc_of("eagle3", **{"SGLANG_API_KEY_FILE": str(key), **values}))
    assert check.status == status and text in check.detail, check.line()
    if status != OK:
        assert check.fix, check.line()
    for secret in ([content.strip()] if content else []) + [values.get("SGLANG_API_KEY", "")]:
        if secret:
            assert secret not in check.line(), "the doctor must not print the key"


def test_a_key_file_the_container_user_cannot_read_fails(tmp_path):
    key = tmp_path / "sglang_api_key"
    key.write_text("k-123\n")
    key.chmod(0o600)
    check = inputs.check_api_key(svc_of("eagle3", SGLANG_API_KEY_FILE=str(key)))
    assert check.status == FAIL and "mode 600" in check.detail and "uid 10001" in check.detail, check.line()
    assert check.fix.startswith("chmod 644"), check.fix


def test_up_does_not_run_what_only_a_note_reads(tmp_path):
    """`invoke up`'s gate shows FAILs and WARNs only: SGLang's all-reduce start-up (seconds per rank, in the image)
    runs for `invoke doctor`, never on the way to starting a server."""
    image = {"Config": {"Entrypoint": ["python3", "-m", "sglang.launch_server"],
                        "Labels": {gpu_checks.ARCH_LABEL: "9.0a 12.0a"}}, "Size": 3.1e10, "Created": "2026-11-29"}
    fake = fake_cli.install(tmp_path / "bin", smi="rtxpro6000x8", info=fake_cli.NVIDIA_INFO, compose_version="2.40.3",
                            ps_rows=[], image=image, audit_output="ok", audit_exit=0,
                            allreduce_output=(FIXTURES.parent / "allreduce" / f"{PIN['sglang']}-tp8-pcie-p2p.json").read_text())
    env = clean_env(fake, MODEL_DIR=str(tmp_path / "absent"))
    proc = invoke_up("baseline", env)
    assert_refused(proc, fake, "preflight model")
    assert not [c for c in fake_cli.calls(fake) if "sglang_stack.entrypoints.allreduce" in c], "up ran a note's work"
    doctor = run_module("sglang_stack.doctor.checklist", "baseline", env=env)
    assert [c for c in fake_cli.calls(fake) if "sglang_stack.entrypoints.allreduce" in c], doctor.stdout
