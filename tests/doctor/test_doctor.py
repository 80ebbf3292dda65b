"""The host preflight, check by check: each check's verdict and fix. The GPU checks are tests/doctor/test_gpus.py's,
the links between GPUs test_topology.py's; the runs as a user makes them (end to end, `invoke up`'s refusals) are
test_doctor_cli.py's. Model directories, sockets and /dev/shm are real.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from sglang_stack.engine import DOCKER
from sglang_stack.errors import UserError
from sglang_stack import ROOT
from sglang_stack.services import variables
from sglang_stack.services import composefile
from sglang_stack.doctor import checklist as doctor
from sglang_stack.doctor import inputs
from sglang_stack.doctor.checks import FAIL, NOTE, OK, SKIP, WARN, Check
from sglang_stack.doctor.host import Facts

import fake_cli
from doctor_facts import DRAFT_ARCH, GIB, RTX_QUERY, RTX_SMI, TARGET_ARCH, env_of, facts_for, make_model, svc_of
from pins import PIN

pytestmark = pytest.mark.usefixtures("compose")  # Compose reads compose.yaml: without it, skip


# --- Docker checks ------------------------------------------------------------------------------


def test_docker_checks():
    assert doctor.check_docker(Facts(docker_cli=False), DOCKER).status == FAIL, "no CLI must fail"
    assert "install Docker Engine" in doctor.check_docker(Facts(docker_cli=False), DOCKER).fix
    down = doctor.check_docker(Facts(docker_cli=True, docker_error="Cannot connect to the Docker daemon"), DOCKER)
    assert down.status == FAIL and "Cannot connect" in down.detail and "systemctl start docker" in down.fix, down.line()
    no_compose = doctor.check_docker(Facts(docker_cli=True, docker_info=fake_cli.NVIDIA_INFO), DOCKER)
    assert no_compose.status == FAIL and "compose plugin" in no_compose.detail, no_compose.line()
    old = doctor.check_docker(Facts(docker_cli=True, docker_info=fake_cli.NVIDIA_INFO, compose_version="2.12.2"), DOCKER)
    assert old.status == WARN, old.line()
    good = doctor.check_docker(facts_for(RTX_QUERY, RTX_SMI), DOCKER)
    assert good.status == OK and "28.2.2" in good.detail and "2.40.3" in good.detail, good.line()


def test_port_in_use_and_bad_bind_address():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        busy = doctor.check_port(svc_of(EAGLE3_PORT=str(port)), [])
        assert busy.status == FAIL and f"127.0.0.1:{port} is already in use" in busy.detail, busy.line()
        assert "EAGLE3_PORT" in busy.fix, busy.fix
        own = doctor.check_port(svc_of(EAGLE3_PORT=str(port)), [{"Service": "eagle3", "State": "running"}])
        assert own.status == OK, f"a port held by the service's own container is fine: {own.line()}"
    free = doctor.check_port(svc_of(EAGLE3_PORT=str(port)), [])
    assert free.status == OK, f"after closing, the port is free: {free.line()}"
    foreign = doctor.check_port(svc_of(BIND_ADDRESS="192.0.2.1"), [])  # TEST-NET-1: never an address of this host
    assert foreign.status == FAIL and "cannot bind" in foreign.detail and "BIND_ADDRESS" in foreign.fix, foreign.line()


def test_a_port_left_in_time_wait_is_free():
    # A service that just stopped leaves its served connections in TIME_WAIT on its port for a
    # minute. Docker binds it again at once (SO_REUSEADDR), so the preflight must not refuse it.
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            accepted.close()  # the server's side closes first: its socket waits in TIME_WAIT
            client.recv(1)
    check = doctor.check_port(svc_of(EAGLE3_PORT=str(port)), [])
    assert check.status == OK and "is free" in check.detail, f"TIME_WAIT is not a listener: {check.line()}"


# --- host limits ------------------------------------------------------------------------------


def test_the_containers_own_shm_is_checked_against_the_hosts_memory():
    facts = facts_for("", "", mem_bytes=2048 << 30, shm_bytes=None)  # the host's /dev/shm no longer matters
    ok = doctor.check_shm(facts, svc_of())
    assert ok.status == OK and ok.detail == "/dev/shm 64 GiB, the container's own (SHM_SIZE)", ok.line()
    assert doctor.check_shm(facts, svc_of(SHM_SIZE="16g")).status == WARN
    assert doctor.check_shm(facts, svc_of(SHM_SIZE="1024m")).status == FAIL
    big = doctor.check_shm(facts_for("", "", mem_bytes=64 << 30), svc_of(SHM_SIZE="128g"))
    assert big.status == WARN and "more than this host's 64 GiB of memory" in big.detail and "e.g. 32g" in big.fix, big.line()
    with pytest.raises(UserError, match=r"SHM_SIZE='lots' \(shell\): not a size such as 64g or 32768m|SHM_SIZE=lots"):
        svc_of(SHM_SIZE="lots")


def test_shm_memlock_disk():
    assert doctor.check_shm(facts_for("", "", shm_bytes=1 << 30)).status == FAIL, "1 GiB /dev/shm must fail"
    assert doctor.check_shm(facts_for("", "", shm_bytes=16 << 30)).status == WARN, "16 GiB /dev/shm should warn"
    assert doctor.check_shm(facts_for("", "", shm_bytes=None)).status == FAIL, "no /dev/shm must fail"
    rootless = {**fake_cli.NVIDIA_INFO, "SecurityOptions": ["name=seccomp,profile=builtin", "name=rootless"]}
    limited = doctor.check_memlock(facts_for("", "", docker_info=rootless, memlock=(8 << 20, 8 << 20)))
    assert limited.status == FAIL and "limits.conf" in limited.fix, limited.line()
    assert doctor.check_memlock(facts_for("", "", memlock=(8 << 20, 8 << 20))).status == OK, "rootful Docker raises memlock itself"
    tight = facts_for("", "", image=None, disk_free=40 << 30)
    assert doctor.check_disk(tight).status == FAIL, "40 GiB is too little to build the image"
    assert doctor.check_disk(facts_for("", "", disk_free=40 << 30)).status == OK, "but enough once it is built"
    # A built image's server writes only its cache volume and log there (read-only root): a disk that is short of
    # comfortable but holds a first start's caches warns, and `invoke up` goes on; one that cannot hold them fails.
    short = doctor.check_disk(facts_for("", "", disk_free=7 << 30))
    assert short.status == WARN and "7.0 GiB free" in short.detail and short.fix, short.line()
    assert doctor.check_disk(facts_for("", "", disk_free=1 << 30)).status == FAIL, "1 GiB cannot hold a first start's caches"


# --- configuration and models ---------------------------------------------------------------------


def test_model_and_drafter(tmp_path):
    target = make_model(tmp_path / "k25", TARGET_ARCH, shards=3)
    draft = make_model(tmp_path / "draft", DRAFT_ARCH, shards=1)
    model, drafter = inputs.check_models(svc_of(MODEL_DIR=str(target), DRAFT_MODEL_DIR=str(draft)))
    assert model.status == OK and TARGET_ARCH in model.detail and "3 of 3 shards" in model.detail, model.line()
    assert drafter.status == OK and DRAFT_ARCH in drafter.detail, drafter.line()
    skipped = inputs.check_models(svc_of("baseline", MODEL_DIR=str(target)))[1]
    assert skipped.status == SKIP, f"baseline needs no drafter: {skipped.line()}"


@pytest.mark.parametrize(
    "setup, status, text",
    [
        ("missing", FAIL, "no such directory"),
        ("no-config", FAIL, "no config.json"),
        ("bad-json", FAIL, "not readable JSON"),
        ("missing-shard", FAIL, "1 of 3 shards missing"),
        ("no-weights", WARN, "no *.safetensors"),
        ("private", FAIL, "1 of 4 files are not readable by uid 10001, the image's user (first: {target}/config.json (mode 600"),
        ("private-shard", FAIL, "1 of 5 files are not readable by uid 10001, the image's user (first: {target}/model-00002-of-00003.safetensors (mode 640, owner 0)"),
        ("private-dir", FAIL, "5 of 5 files are not readable by uid 10001, the image's user (first: {target}/ (directory, mode 700"),
        ("owned-by-10001", OK, "2 of 2 shards"),
    ],
)
def test_model_dir_problems(tmp_path, setup, status, text):
    target = tmp_path / "k25"
    if setup == "no-config":
        target.mkdir()
    elif setup == "bad-json":
        make_model(target, TARGET_ARCH)
        (target / "config.json").write_text("{not json")
    elif setup == "missing-shard":
        make_model(target, TARGET_ARCH, shards=3, drop=1)
    elif setup == "no-weights":
        make_model(target, TARGET_ARCH, shards=0, index=False)
    elif setup == "private":
        make_model(target, TARGET_ARCH)
        (target / "config.json").chmod(0o600)
    elif setup == "private-shard":
        make_model(target, TARGET_ARCH, shards=3)
        (target / "model-00002-of-00003.safetensors").chmod(0o640)
    elif setup == "private-dir":
        make_model(target, TARGET_ARCH, shards=3)
        target.chmod(0o700)
    elif setup == "owned-by-10001":
        make_model(target, TARGET_ARCH, shards=2)
        for path in (target, *target.iterdir()):
            os.chown(path, 10001, 10001) if os.geteuid() == 0 else pytest.skip("chown needs root")
            path.chmod(0o700 if path.is_dir() else 0o600)  # private, but the image's user owns it
    model = inputs.check_models(svc_of("baseline", MODEL_DIR=str(target)))[0]
    text = text.format(target=target)
    assert model.status == status and text in model.detail, f"{setup}: {model.line()}"
    if status == FAIL:
        assert model.fix, f"every FAIL needs a fix: {model.line()}"
    if setup == "missing":
        assert f"MODEL_DIR={target} (shell)" in model.detail, f"the error must name the variable and its source: {model.line()}"


def test_drafter_that_is_not_eagle3_warns(tmp_path):
    target = make_model(tmp_path / "k25", TARGET_ARCH)
    wrong = make_model(tmp_path / "wrong", "DeepseekV3ForCausalLM")
    drafter = inputs.check_models(svc_of(MODEL_DIR=str(target), DRAFT_MODEL_DIR=str(wrong)))[1]
    assert drafter.status == WARN and "EAGLE-3" in drafter.detail, drafter.line()


@pytest.mark.parametrize(
    "values, text",
    [
        ({"HEALTH_TIMEOUT": "25s"}, "must exceed the probe's 30s"),
        ({"SGLANG_HEALTH_CHECK_TIMEOUT": "60"}, "must exceed the probe's 70s"),
    ],
)
def test_config_health_timeouts(values, text):
    check = doctor.check_config(svc_of(**values), "", env_of(**values))
    assert check.status == FAIL and text in check.detail, check.line()


def test_a_misspelt_name_in_env_is_named_with_the_one_meant(tmp_path):
    """SGLANG_API_KY_FILE leaves the key unset without a word from Compose: the doctor names the slip."""
    key = tmp_path / "key"
    key.write_text("k" * 32)
    dotenv = tmp_path / ".env"
    dotenv.write_text(f"MODEL_DIR=/models/k\nSGLANG_API_KY_FILE={key}\nCOMPOSE_PROJECT_NAME=x\nMY_OWN_NOTE=1\n")
    env = variables.environment(env_file=dotenv, shell_env={"PATH": os.environ["PATH"]})
    assert "SGLANG_API_KEY_FILE" in env.referenced, "the names come from Compose's own reading of compose.yaml"
    check = doctor.check_config(svc_of(), "", env)
    assert check.status == WARN and (f"SGLANG_API_KY_FILE ({dotenv}:2) is read by nothing: did you mean "
                                     "SGLANG_API_KEY_FILE?") in check.detail, check.line()
    assert "COMPOSE_PROJECT_NAME" not in check.detail and "MY_OWN_NOTE" not in check.detail, check.line()
    # The old name, mistyped: meant as the key itself, which is read from a file now.
    dotenv.write_text("MODEL_DIR=/models/k\nSGLANG_API_KY=sk-123\n")
    env = variables.environment(env_file=dotenv, shell_env={"PATH": os.environ["PATH"]})
    check = doctor.check_config(svc_of(), "", env)
    assert check.status == WARN and (f"SGLANG_API_KY ({dotenv}:2) is read by nothing: did you mean SGLANG_API_KEY? "
                                     "That is no longer read either: write the value to a file and set "
                                     "SGLANG_API_KEY_FILE") in check.detail and "sk-123" not in check.line(), check.line()
    dotenv.write_text(f"MODEL_DIR=/models/k\nSGLANG_API_KEY_FILE={key}\n")
    env = variables.environment(env_file=dotenv, shell_env={"PATH": os.environ["PATH"]})
    assert doctor.check_config(svc_of(), "", env).status == OK


def test_limits_are_derived_from_the_host_and_hold_dev_shm():
    host = Facts(mem_bytes=512 * GIB)
    default = doctor.check_limits(host, svc_of())
    assert default.status == WARN and "pids_limit 16384; no memory cap" in default.detail, default.line()
    assert default.fix == "set MEM_LIMIT=504g (this host's 512 GiB less 8) in .env", default.fix
    assert doctor.check_limits(host, svc_of(MEM_LIMIT="400g")).line().startswith("ok    limits       pids_limit 16384, memory 400 GiB")
    small = doctor.check_limits(host, svc_of(MEM_LIMIT="64g"))  # SHM_SIZE's 64g alone fills it
    assert small.status == FAIL and "less than /dev/shm's 64 GiB" in small.detail and "MEM_LIMIT=81g" in small.fix, small.line()
    assert doctor.check_limits(host, svc_of(PIDS_LIMIT="512")).status == FAIL
    assert doctor.check_limits(host, svc_of(MEM_LIMIT="1024g")).status == WARN, "a cap above the host's memory is none"


def test_a_healthcheck_compose_refuses_names_its_variable():
    with pytest.raises(UserError) as err:
        svc_of(HEALTH_INTERVAL="15")
    assert str(err.value).startswith("HEALTH_INTERVAL=15 (shell): ") and "missing unit" in str(err.value), err.value


def test_image_cache_directory_ownership():
    good = doctor.check_image(facts_for("", "", cache_owner="10001:755"), svc_of())
    assert good.status == OK and "owned by uid 10001" in good.detail, good.line()
    for owner in ("0:755", "missing: stat: cannot statx '/home/sglang/.cache': No such file or directory"):
        check = doctor.check_image(facts_for("", "", cache_owner=owner), svc_of())
        assert check.status == WARN and "not be writable by uid 10001" in check.detail, f"{owner}: {check.line()}"
        assert "docker volume rm sglang-stack_cache" in check.fix, check.fix
    assert doctor.check_image(facts_for("", "", image=None), svc_of()).status == WARN, "a missing image should warn (compose can build it)"


@pytest.mark.parametrize("image", ["--help", "Bad Ref", "sglang-stack:0.5.9 --privileged"])
def test_an_image_that_is_not_a_reference_is_named_and_never_handed_to_the_engine(image, tmp_path, monkeypatch):
    check = doctor.check_image(facts_for("", ""), svc_of(SGLANG_STACK_IMAGE=image))
    assert check.status == FAIL and check.detail.startswith(f"SGLANG_STACK_IMAGE={image} (shell): {image!r} is not an "
                                                            "image reference"), check.line()
    from sglang_stack.doctor import host

    fake = fake_cli.install(tmp_path / "bin", info=fake_cli.NVIDIA_INFO, compose_version="2.40.3")
    for key, value in fake.items():
        monkeypatch.setenv(key, value)
    host.gather_engine(DOCKER, image)
    ran = fake_cli.calls(fake)
    assert ["docker", "compose", "version", "--short"] in ran, ran  # the engine was asked up to that point
    assert not [c for c in ran if c[:3] == ["docker", "image", "inspect"]], f"asked to inspect {image!r}: {ran}"


def test_the_image_must_hold_the_release_of_the_profile_compose_builds():
    def labelled(version):
        return {"Config": {"Entrypoint": ["python3", "-m", "sglang.launch_server"],
                           "Labels": {"io.sglang-stack.sglang.version": version}},
                "Size": 10e9, "Created": "2026-12-05T00:00:00Z"}

    svc = svc_of(SGLANG_PROFILE="0.5.23")
    assert svc.dockerfile == str(ROOT / "profiles" / "0.5.23" / "docker" / "Dockerfile"), svc.dockerfile
    wrong = doctor.check_image(facts_for("", "", image=labelled(PIN["sglang"])), svc)
    assert wrong.status == FAIL and f"holds SGLang {PIN['sglang']}" in wrong.detail, wrong.line()
    assert "invoke build --profile 0.5.23" in wrong.fix, wrong.fix
    right = doctor.check_image(facts_for("", "", image=labelled("0.5.23")), svc)
    assert right.status == OK and "profile 0.5.23" in right.detail, right.line()
    missing = doctor.check_image(facts_for("", "", image=None), svc)
    assert missing.status == WARN and "invoke build --profile 0.5.23" in missing.fix, missing.line()
    default = doctor.check_image(facts_for("", "", image=labelled("0.5.23")), svc_of())
    assert default.status == FAIL and "invoke build" in default.fix, "the root's profile builds docker/Dockerfile"


def test_a_profile_with_no_dockerfile_is_refused_before_compose_builds_it():
    named = doctor.check_image(facts_for("", ""), svc_of(SGLANG_PROFILE=PIN["sglang"]))
    assert named.status == FAIL, named.line()
    assert named.detail.startswith(f"SGLANG_PROFILE={PIN['sglang']} (shell): compose would build "
                                   f"profiles/{PIN['sglang']}/docker/Dockerfile, which does not exist"), named.detail
    assert "0.5.23" in named.detail, "it names the profiles there are"


ALLREDUCE = Path(__file__).parents[1] / "fixtures" / "allreduce"


def allreduce_note(fixture: str, **values: str) -> Check:
    from sglang_stack.doctor import topology

    facts = facts_for("", "", allreduce=(0, (ALLREDUCE / fixture).read_text()))
    return topology.check_all_reduce(facts, svc_of(**values))


def test_the_all_reduce_note_names_the_backend_sglang_picks():
    """Recorded from each release's own code (tests/entrypoints/test_allreduce.py): 8x RTX PRO 6000 on 0.5.23 gives the decode
    reductions to PCIe-IPC, once a probe confirms it (auto); 8x H200 keeps custom all-reduce; 0.5.9 has NCCL only."""
    auto = allreduce_note("0.5.23-tp8-pcie-p2p.json")
    assert auto.status == NOTE and "its PCIe-IPC all-reduce takes the decode reductions (workspace 458752 elements" \
        in auto.detail and "once `invoke probe eagle3` has confirmed it on this host (PCIE_ALLREDUCE=auto" in auto.detail, \
        auto.line()
    on = allreduce_note("0.5.23-tp8-pcie-p2p.json", PCIE_ALLREDUCE="on", SGLANG_PCIE_IPC_MAX_NUMEL="917504")
    assert "(SGLANG_PCIE_IPC_MAX_NUMEL=917504), PCIE_ALLREDUCE=on" in on.detail, on.line()
    off = allreduce_note("0.5.23-tp8-pcie-p2p.json", PCIE_ALLREDUCE="off")
    assert "PCIE_ALLREDUCE=off keeps it off: its PCIe-IPC all-reduce would take the decode reductions" in off.detail
    nvlink = allreduce_note("0.5.23-tp8-nvlink.json")
    assert "custom all-reduce on over NVLink" in nvlink.detail and "PCIe-IPC" not in nvlink.detail, nvlink.line()
    old = allreduce_note(f"{PIN['sglang']}-tp8-pcie-p2p.json")
    assert "every all-reduce is NCCL's, over P2P" in old.detail and "PCIe-IPC" not in old.detail, old.line()


@pytest.mark.parametrize("values, image_release, status, words", [
    ({"PCIE_ALLREDUCE": "maybe"}, "0.5.23", FAIL, "PCIE_ALLREDUCE=maybe (shell): not one of auto, on, off"),
    ({"PCIE_ALLREDUCE": "on"}, PIN["sglang"], FAIL, f"SGLang {PIN['sglang']} has no PCIe-IPC all-reduce; profile 0.5.23"),
    ({"PCIE_ALLREDUCE": "on", "TP_SIZE": "3"}, "0.5.23", WARN, "SGLang keeps TP 3 on NCCL"),
    ({"SGLANG_PCIE_IPC_MAX_NUMEL": "-1"}, "0.5.23", FAIL, "SGLANG_PCIE_IPC_MAX_NUMEL=-1 is not a whole number"),
    ({"SGLANG_PCIE_IPC_MAX_NUMEL": "1e99"}, "0.5.23", FAIL, "SGLANG_PCIE_IPC_MAX_NUMEL=1e99 is not a whole number"),
    ({"PCIE_ALLREDUCE": "on"}, "0.5.23", OK, "PCIE_ALLREDUCE=on (shell): the `all-reduce` line says"),
    ({}, PIN["sglang"], OK, f"SGLang {PIN['sglang']} has no PCIe-IPC all-reduce (profile 0.5.23 has it)"),
])
def test_the_pcie_allreduce_setting_is_checked_before_the_start(values, image_release, status, words):
    image = {"Config": {"Labels": {"io.sglang-stack.sglang.version": image_release}}}
    check = doctor.check_pcie_allreduce(facts_for("", "", image=image), svc_of(**values))
    assert check.status == status and words in check.detail, check.line()
    if status == FAIL:
        assert check.fix, check.line()


@pytest.mark.parametrize("name, values, image_release, status, words", [
    ("eagle3", {"DRAFTER": "foo"}, "0.5.23", FAIL, "DRAFTER=foo (shell): not mha or mla"),
    ("eagle3", {"SPECULATIVE_ADAPTIVE": "maybe"}, "0.5.23", FAIL, "SPECULATIVE_ADAPTIVE=maybe (shell): not 0 or 1"),
    ("baseline", {"SPECULATIVE_ADAPTIVE": "yes"}, "0.5.23", FAIL, "SPECULATIVE_ADAPTIVE=yes (shell): not 0 or 1"),
    ("eagle3", {"SPECULATIVE_ADAPTIVE": "1"}, PIN["sglang"], FAIL,
     f"SPECULATIVE_ADAPTIVE=1 (shell): SGLang {PIN['sglang']} has no adaptive speculation (--speculative-adaptive); "
     "profile 0.5.23 has it"),
    ("eagle3", {"DRAFTER": "mla"}, PIN["sglang"], FAIL,
     f"DRAFTER=mla (shell): SGLang {PIN['sglang']} cannot load the MLA drafter; profile 0.5.23 can"),
    ("eagle3", {"DRAFTER": "mla", "SPECULATIVE_ADAPTIVE": "1"}, "0.5.23", OK,
     "DRAFTER=mla, SPECULATIVE_ADAPTIVE=1 (EAGLE3, SGLang 0.5.23)"),
    ("baseline", {"SPECULATIVE_ADAPTIVE": "1"}, PIN["sglang"], OK, "baseline does not speculate, so neither applies"),
    # fail closed: an image whose release label cannot be read is not taken to have it
    ("eagle3", {"SPECULATIVE_ADAPTIVE": "1"}, "not-a-version", FAIL, "SGLang not-a-version has no adaptive speculation"),
])
def test_the_speculation_settings_are_checked_before_the_start(name, values, image_release, status, words):
    """What the container's entrypoint would refuse before SGLang starts (entrypoints/adaptive.py, drafter.py), the
    preflight of `invoke up` names first: a 1T model is not loaded to learn that a value was mistyped."""
    image = {"Config": {"Labels": {"io.sglang-stack.sglang.version": image_release}}}
    check = doctor.check_speculation(facts_for("", "", image=image), svc_of(name, **values))
    assert check.status == status and words in check.detail, check.line()
    if status == FAIL:
        assert check.fix, check.line()


def test_audit_verdicts():
    ok = doctor.check_audit(facts_for("", ""), svc_of(MODEL_DIR="/x"))
    assert ok.status == OK, ok.line()
    failing = facts_for("", "", audit=(1, "KimiK25ForConditionalGeneration lacks get_embed_and_head"))
    assert doctor.check_audit(failing, svc_of()).status == FAIL, "eagle3 cannot run with a failing audit"
    assert doctor.check_audit(failing, svc_of("baseline")).status == WARN, "baseline does not need EAGLE-3"
    skipped = doctor.check_audit(Facts(audit_skip="skipped: image not built (invoke build)"), svc_of())
    assert skipped.status == SKIP and "image not built" in skipped.detail, skipped.line()


def test_every_fail_has_a_fix_and_one_line():
    facts = Facts(docker_cli=True, docker_error="Cannot connect", smi_error="nvidia-smi: not found on PATH", shm_bytes=None,
                  disk_path="/", disk_free=1 << 30)
    checks = doctor.evaluate(facts, DOCKER, svc_of(MODEL_DIR="/nonexistent/k", DRAFT_MODEL_DIR="/nonexistent/d",
                                                     SHM_SIZE="1g"), env=env_of())
    failed = [c for c in checks if c.status == FAIL]
    assert {c.name for c in failed} >= {"model", "drafter", "docker", "gpu-runtime", "driver", "shm", "disk"}, [c.line() for c in failed]
    for check in checks:
        assert "\n" not in check.line(), f"one line per check: {check.line()!r}"
        if check.status == FAIL:
            assert check.fix and " -- fix: " in check.line(), f"a FAIL without a fix: {check.line()}"


def test_an_override_that_widens_privilege_is_said(tmp_path):
    assert doctor.check_privilege(svc_of()).status == OK, doctor.check_privilege(svc_of()).line()
    override = tmp_path / "compose.override.yaml"
    override.write_text("services:\n  eagle3:\n    privileged: true\n    cap_add: [SYS_ADMIN]\n    ipc: host\n"
                        "    read_only: false\n    volumes:\n      - /:/host\n")
    svc = composefile.service("eagle3", env_of(COMPOSE_FILE=f"compose.yaml:{override}"))  # Compose's own merge
    assert svc.shm_bytes == 64 << 30, "docker compose config's shm_size reads back"
    check = doctor.check_privilege(svc)
    assert check.status == WARN, check.line()
    for said in ("privileged: true", "cap_add: SYS_ADMIN", "ipc: host", "read_only: false", "host paths mounted beside the "
                 "models: /", "compose.override.yaml"):
        assert said in check.detail, (said, check.line())


def test_an_override_that_runs_sglang_as_root_fails(tmp_path):
    override = tmp_path / "compose.override.yaml"
    for user in ('"0:0"', "root", '"0"'):
        override.write_text(f"services:\n  eagle3:\n    user: {user}\n")
        check = doctor.check_privilege(composefile.service("eagle3", env_of(COMPOSE_FILE=f"compose.yaml:{override}")))
        assert check.status == FAIL and "runs SGLang as root" in check.detail and "compose.override.yaml" in check.detail, \
            check.line()


def test_a_key_in_an_overrides_environment_fails_and_is_never_shown(tmp_path):
    override = tmp_path / "compose.override.yaml"
    override.write_text("services:\n  eagle3:\n    environment:\n      SGLANG_API_KEY: sk-planted-in-override\n")
    check = inputs.check_api_key(composefile.service("eagle3", env_of(COMPOSE_FILE=f"compose.yaml:{override}",
                                                                       SGLANG_API_KEY_FILE="")))
    assert check.status == FAIL and "SGLANG_API_KEY is set in the service's environment" in check.detail, check.line()
    assert "sk-planted-in-override" not in check.line()


def test_the_host_network_without_a_key_fails_naming_the_network_not_bind_address():
    svc = svc_of("eagle3", COMPOSE_FILE="compose.yaml:compose.multinode.yaml", SGLANG_API_KEY_FILE="",
                 NNODES="2", NODE_RANK="0", DIST_INIT_ADDR="10.0.0.1:50000")
    check = inputs.check_api_key(svc)
    assert svc.host_network and check.status == FAIL, check.line()
    assert "network_mode: host (compose.yaml, compose.multinode.yaml)" in check.detail and "BIND_ADDRESS" not in check.detail


# --- the registry ----------------------------------------------------------------------------------


def test_the_doctor_table_of_docs_services_is_the_checks_own_docstrings():
    from sglang_stack.doctor.catalog import documented

    text = (ROOT / "docs" / "services.md").read_text()
    assert documented(text, doctor.CHECKS) == text, "docs/services.md: run `python -m sglang_stack.doctor.checklist --docs`"
    names = [n for fn in doctor.CHECKS for n in fn.spec.names]
    assert {"config", "model", "drafter", "api-key", "hub-token", "port", "docker", "gpu-runtime", "exclusive", "driver", "gpus", "arch",
            "shm", "memlock", "disk", "image", "kernels", "audit", "multinode", "privilege"} <= set(names), names
    assert all(fn.spec.passes_when and fn.spec.fix for fn in doctor.CHECKS), "every check says when it passes and its fix"


def test_a_new_check_is_one_function_and_the_loop_writes_its_skip_lines():
    """A check declares what it reads (its parameters) and when it applies; the loop runs it or says why not."""
    from sglang_stack.doctor.catalog import Context, check, evaluate

    seen = []

    @check("vram", needs=("service", "gpu"))
    def check_vram(facts, svc):
        """Each visible GPU has the memory a shard of the model needs.

        Fix: bigger GPUs, or a larger TP_SIZE.
        """
        seen.append((facts, svc))
        return Check("vram", OK, "enough")

    facts = Facts(gpus=[])
    assert evaluate([check_vram], Context(facts, None, "docker")) == [Check("vram", SKIP, "skipped: config invalid")]
    cpu = svc_of(**{"COMPOSE_FILE": "compose.yaml:tests/compose.engine.yaml"})
    skipped = evaluate([check_vram], Context(facts, cpu, DOCKER))
    assert [c.status for c in skipped] == [SKIP] and "reserves no GPU" in skipped[0].detail, skipped
    gpu = svc_of()
    assert evaluate([check_vram], Context(facts, gpu, "docker")) == [Check("vram", OK, "enough")]
    assert seen == [(facts, gpu)], "the check got the facts its parameters name"
    assert evaluate([check_vram], Context(facts, gpu, DOCKER, role="router")) == [], "a server's check is no router's"


def test_the_hub_token_reaches_a_container_only_where_it_may_go_online(tmp_path):
    token = tmp_path / "hf_token"
    token.write_text("hf_planted_token\n")
    offline = inputs.check_hub_token(svc_of("eagle3", HF_TOKEN_FILE=str(token)))
    assert offline.status == FAIL and "never goes online (HF_HUB_OFFLINE=1)" in offline.detail, offline.line()
    assert "hf_planted_token" not in offline.line()
    online = inputs.check_hub_token(svc_of("eagle3", HF_TOKEN_FILE=str(token), HF_HUB_OFFLINE="0"))
    assert online.status == OK and "may download" in online.detail, online.line()
    assert inputs.check_hub_token(svc_of("eagle3")).status == OK
