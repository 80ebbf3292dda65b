"""Scale-out settings without an engine: multi-node flags, the router's compose service and
entrypoint, the router lock entries, RDMA userspace in the image, the doctor's multi-node checks.
The router and stand-in workers on the real Docker Engine are in tests/services/test_router_engine.py."""

from __future__ import annotations

import resource
import subprocess
import sys

import dockerfile
import pytest

from sglang_stack.engine import DOCKER
from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack.image import build as buildmod
from sglang_stack.image import workflow
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.services import variables
from sglang_stack.services import composefile
from sglang_stack.doctor import checklist as doctor
from sglang_stack.doctor import gpus as gpu_checks, host
from sglang_stack.entrypoints import router
from sglang_stack.doctor.checks import FAIL, NOTE, OK, WARN
from sglang_stack.doctor.host import Facts

MULTI = {"NNODES": "2", "NODE_RANK": "1", "DIST_INIT_ADDR": "10.0.0.11:20000", "TP_SIZE": "16"}
# What .env holds on each node of a two-box RDMA setup (docs/scaling.md); several files are merged by Compose itself.
FILES = {"COMPOSE_FILE": "compose.yaml:compose.multinode.yaml:compose.rdma.yaml"}
MULTINODE_FILE, RDMA_FILE = ROOT / "compose.multinode.yaml", ROOT / "compose.rdma.yaml"
pytestmark = pytest.mark.usefixtures("compose")


def env_of(**values: str) -> variables.Environment:
    return variables.Environment(values, {k: "shell" for k in values})


def argv_of(name: str, **values: str) -> list[str]:
    return list(composefile.project(env_of(**values), (composefile.COMPOSE_FILE,)).config["services"][name]["command"])


SERVERS = ("baseline", "eagle3")


# --- multi-node tensor parallelism --------------------------------------------------------------


def test_multinode_flags_reach_eagle3_and_baseline():
    for name in SERVERS:
        argv = argv_of(name, **MULTI)
        for flag in ("--nnodes=2", "--node-rank=1", "--dist-init-addr=10.0.0.11:20000"):
            assert flag in argv, f"{name}: {flag} must reach SGLang: {argv}"
    svc = composefile.service("eagle3", env_of(**MULTI))
    assert (svc.nnodes, svc.node_rank, svc.dist_init_addr) == (2, 1, "10.0.0.11:20000"), svc


def test_host_networking_comes_from_the_override_files():
    svc = composefile.service("eagle3", env_of(**MULTI, **FILES))
    assert svc.host_network and svc.files[1:] == (MULTINODE_FILE, RDMA_FILE), svc.files
    assert "/dev/infiniband:/dev/infiniband" in svc.hardening["devices"], svc.hardening["devices"]
    assert svc.url == "http://127.0.0.1:30000", f"host networking: SGLang's own port on the host: {svc.url}"
    bridged = composefile.service("eagle3", env_of(**MULTI))
    assert not bridged.host_network and bridged.url == "http://127.0.0.1:30001", bridged.url


def test_unset_multinode_variables_leave_the_command_as_before():
    for name in SERVERS:
        argv = argv_of(name)
        assert not [a for a in argv if a.startswith(("--nnodes", "--node-rank", "--dist-init-addr"))], argv
        assert argv[argv.index("--host") + 1] == "0.0.0.0", argv


def test_doctor_fails_multinode_without_host_networking():
    svc = composefile.service("eagle3", env_of(**MULTI, SGLANG_HOST="127.0.0.1"))
    check = by_name(doctor.check_multinode(facts(), svc), "multinode")[0]
    assert check.status == FAIL and "bridge network" in check.detail, check.line()
    assert "COMPOSE_FILE=compose.yaml:compose.multinode.yaml" in check.fix, check.line()


@pytest.mark.parametrize(
    "values, message",
    [
        ({**MULTI, "NODE_RANK": "2"}, "NODE_RANK=2 (shell): must be 0..1"),
        ({**MULTI, "DIST_INIT_ADDR": ""}, "NNODES=2 needs DIST_INIT_ADDR=HOST:PORT"),
        ({**MULTI, "DIST_INIT_ADDR": "10.0.0.11"}, "DIST_INIT_ADDR=10.0.0.11 (shell): must be HOST:PORT"),
        ({**MULTI, "TP_SIZE": "9"}, "TP_SIZE=9 (shell): the total tensor-parallel size must divide by NNODES=2"),
        ({"NNODES": "two"}, "NNODES=two (shell): must be a positive integer"),
    ],
)
def test_bad_multinode_values_are_one_line_errors(values, message):
    with pytest.raises(UserError) as err:
        composefile.service("eagle3", env_of(**values))
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_docker_compose_merges_the_multinode_override():
    """The real Compose CLI: host networking, no published port, and the flags in eagle3's command."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "MODEL_DIR": "/srv/m", "DRAFT_MODEL_DIR": "/srv/d", **MULTI}
    proc = subprocess.run(["docker", "compose", "--project-directory", str(ROOT), "-f", str(composefile.COMPOSE_FILE),
                           "-f", str(MULTINODE_FILE), "-f", str(RDMA_FILE), "--profile", "eagle3",
                           "config", "--format", "json", "eagle3"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    import json

    spec = json.loads(proc.stdout)["services"]["eagle3"]
    assert spec["network_mode"] == "host" and not spec.get("ports"), f"host networking, nothing published: {spec.get('ports')}"
    assert {"--nnodes=2", "--node-rank=1", "--dist-init-addr=10.0.0.11:20000"} <= set(spec["command"]), spec["command"]
    assert any(d.get("source") == "/dev/infiniband" for d in spec["devices"]), spec["devices"]
    assert "IPC_LOCK" in spec["cap_add"], spec["cap_add"]
    for knob in ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        assert knob in spec["environment"], f"{knob} must be passed through"


# --- the doctor on a multi-node host ------------------------------------------------------------


def facts(**overrides) -> Facts:
    base = dict(docker_cli=True, shm_bytes=128 << 30, memlock=(resource.RLIM_INFINITY,) * 2,
                ib_devices=["mlx5_0", "mlx5_1"], net_ifaces=["eth0", "ib0", "lo"])
    base.update(overrides)
    return Facts(**base)


def by_name(checks, name):
    return [c for c in checks if c.name == name]



def test_doctor_multinode_checks():
    svc = composefile.service("eagle3", env_of(**MULTI, **FILES, NCCL_SOCKET_IFNAME="eth0", GLOO_SOCKET_IFNAME="eth0", SGLANG_HOST="127.0.0.1"))
    checks = doctor.check_multinode(facts(), svc)
    assert [c.status for c in checks] == [OK, OK, OK, OK], [c.line() for c in checks]
    assert "node 1 of 2" in checks[0].detail and "mlx5_0" in checks[1].detail, [c.line() for c in checks]
    no_file = composefile.service("eagle3", env_of(**MULTI, COMPOSE_FILE="compose.yaml:compose.multinode.yaml", SGLANG_HOST="127.0.0.1"))
    rdma = by_name(doctor.check_multinode(facts(), no_file), "rdma")[0]
    assert rdma.status == FAIL and "compose.rdma.yaml" in rdma.fix, f"the host has RDMA devices the container would not get: {rdma.line()}"
    no_ib = doctor.check_multinode(facts(ib_devices=None), svc)
    assert by_name(no_ib, "rdma")[0].status == WARN and "TCP sockets" in by_name(no_ib, "rdma")[0].detail
    wrong_hca = composefile.service("eagle3", env_of(**MULTI, **FILES, NCCL_IB_HCA="mlx5_7", SGLANG_HOST="127.0.0.1"))
    rdma = by_name(doctor.check_multinode(facts(), wrong_hca), "rdma")[0]
    assert rdma.status == FAIL and "mlx5_7" in rdma.detail, rdma.line()
    wrong_if = composefile.service("eagle3", env_of(**MULTI, **FILES, NCCL_SOCKET_IFNAME="enp9s0", SGLANG_HOST="127.0.0.1"))
    netif = by_name(doctor.check_multinode(facts(), wrong_if), "netif")
    assert netif[0].status == FAIL and "enp9s0" in netif[0].detail, netif[0].line()
    assert netif[1].status == WARN and "GLOO_SOCKET_IFNAME unset" in netif[1].detail, netif[1].line()
    open_api = composefile.service("eagle3", env_of(**MULTI, **FILES))
    assert "exposure" not in [c.name for c in doctor.check_multinode(facts(), open_api)], "the api-key check judges it"
    exposed = doctor.check_api_key(open_api)
    assert exposed.status == FAIL and "network_mode: host" in exposed.detail, exposed.line()
    off = composefile.service("eagle3", env_of(**MULTI, **FILES, NCCL_IB_DISABLE="1"))
    assert by_name(doctor.check_multinode(facts(ib_devices=None), off), "rdma")[0].status == NOTE


def test_doctor_counts_gpus_per_node():
    gpus = host.parse_query_csv("".join(f"{i}, NVIDIA H200, 9.0, 580.159.04, 143771\n" for i in range(8)))
    svc = composefile.service("eagle3", env_of(**MULTI))
    check = gpu_checks.check_gpus(facts(gpus=gpus), svc)
    assert check.status == OK and "8 on this node" in check.detail, check.line()


def test_host_network_reads_sysfs(monkeypatch, tmp_path):
    (tmp_path / "dev-ib").mkdir()
    (tmp_path / "sys-ib" / "mlx5_0").mkdir(parents=True)
    (tmp_path / "net" / "eth0").mkdir(parents=True)
    monkeypatch.setattr(host, "DEV_INFINIBAND", tmp_path / "dev-ib")
    monkeypatch.setattr(host, "SYS_INFINIBAND", tmp_path / "sys-ib")
    monkeypatch.setattr(host, "SYS_NET", tmp_path / "net")
    assert host.host_network() == (["mlx5_0"], ["eth0"])
    monkeypatch.setattr(host, "DEV_INFINIBAND", tmp_path / "missing")
    assert host.host_network()[0] is None, "no /dev/infiniband: no RDMA devices to pass"


# --- the router: compose service and entrypoint ------------------------------------------------


def test_router_service_defaults():
    svc = composefile.router_service(env_of(ROUTER_WORKER_URLS="http://10.0.0.11:30000,http://10.0.0.12:30000"))
    assert svc.worker_urls == ["http://10.0.0.11:30000", "http://10.0.0.12:30000"], svc.worker_urls
    assert (svc.policy, svc.url, svc.image) == ("cache_aware", "http://127.0.0.1:30080", "sglang-stack-router:0.5.9"), svc
    spec = composefile.project(env_of(), (composefile.COMPOSE_FILE,)).config["services"]["router"]
    assert spec["profiles"] == ["router"] and spec["build"]["target"] == "router", spec
    assert [(p["host_ip"], p["published"], p["target"]) for p in spec["ports"]] == [("127.0.0.1", "30080", 30080)], \
        f"loopback by default: {spec['ports']}"
    assert "/readiness" in " ".join(spec["healthcheck"]["test"]), spec["healthcheck"]
    moved = composefile.router_service(env_of(ROUTER_WORKER_URLS="http://a:1", ROUTER_PORT="31080", ROUTER_POLICY="round_robin"))
    assert (moved.host_port, moved.policy) == (31080, "round_robin"), moved


@pytest.mark.parametrize(
    "values, message",
    [
        ({}, "ROUTER_WORKER_URLS (unset) is empty"),
        ({"ROUTER_WORKER_URLS": "http://a:1 http://b:2"}, "separate the URLs with commas, no spaces"),
        ({"ROUTER_WORKER_URLS": "a:1"}, "'a:1' is not http://HOST:PORT"),
        ({"ROUTER_WORKER_URLS": "http://a:1,http://a:1"}, "names a worker twice"),
        ({"ROUTER_WORKER_URLS": "http://a:1", "ROUTER_POLICY": "fastest"}, "ROUTER_POLICY=fastest (shell): choose one of"),
        ({"ROUTER_WORKER_URLS": "http://a:1", "ROUTER_PORT": "abc"}, "ROUTER_PORT=abc (shell): Invalid hostPort: abc"),
    ],
)
def test_bad_router_values_are_one_line_errors(values, message):
    with pytest.raises(UserError) as err:
        composefile.router_service(env_of(**values))
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize("module", router.LAUNCHERS)
def test_entrypoint_splits_the_worker_list_for_the_router(module):
    argv = router.router_argv(["--host", "0.0.0.0", "--worker-urls", "http://a:30000,http://[::1]:30001/", "--policy", "cache_aware"],
                              module)
    assert argv[1:3] == ["-m", module], argv
    assert argv[3:] == ["--host", "0.0.0.0", "--worker-urls", "http://a:30000", "http://[::1]:30001", "--policy", "cache_aware"], argv
    with pytest.raises(UserError, match="ROUTER_WORKER_URLS is empty"):
        router.router_argv(["--worker-urls", "--policy", "cache_aware"])


def test_entrypoint_takes_kubernetes_discovery_instead_of_a_list():
    """What `invoke k8s` renders: no --worker-urls, the router watches the pods itself; neither is refused."""
    args = ["--service-discovery", "--selector", "app=a", "c=d", "--service-discovery-port", "30000"]
    assert router.router_argv(args, "smg.launch_router")[3:] == args
    with pytest.raises(UserError, match="no --worker-urls and no --service-discovery"):
        router.router_argv(["--policy", "cache_aware"])


def test_entrypoint_error_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "sglang_stack.entrypoints.router", "--worker-urls", "--policy", "x"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 2, proc
    assert proc.stderr.startswith("error: ROUTER_WORKER_URLS is empty") and proc.stderr.count("\n") == 1, proc.stderr


# --- lock, Dockerfile, build ---------------------------------------------------------------------


def test_router_lock_entries():
    lock = lockmod.check()
    assert lock.router.name == "sglang-router" and lock.router.version, lock.router
    assert lock.router_tag == "sglang-stack-router:0.5.9", lock.router_tag
    assert "@sha256:" in lock.router_base_image, lock.router_base_image
    for name in ("aiohttp", "fastapi", "orjson", "setproctitle", "uvicorn"):
        assert name in lock.router_requirements, f"{name} must be pinned for the router stage"
    assert "sglang-router" not in lock.router_requirements and "torch" not in lock.router_requirements


def test_router_requirement_missing_from_its_file_is_an_error(tmp_path):
    for name in ("requirements.lock.txt", "versions.lock"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    text = (ROOT / "requirements.router.lock.txt").read_text()
    start = text.index("orjson==")
    end = text.index("\n", text.index("# via", start))
    (tmp_path / "requirements.router.lock.txt").write_text(text[:start] + text[end + 1:])
    with pytest.raises(lockmod.LockProblems) as err:
        lockmod.check(tmp_path / "versions.lock")
    assert any("router.requires" in p and "orjson" in p for p in err.value.problems), err.value.problems


def test_rendered_dockerfile_has_rdma_userspace_and_a_router_stage():
    """RDMA userspace is in the image the runtime stage builds on; the router stage installs by hash and checks."""
    commands = dockerfile.parse_file(str(ROOT / "docker" / "Dockerfile"))
    stage, runs = None, {}
    for cmd in commands:
        if cmd.cmd == "FROM":
            stage = cmd.value[-1]
        elif cmd.cmd == "RUN":
            runs.setdefault(stage, []).append(cmd.value[0])
    # In deps, before the binary audit: NCCL, cuFile and NVSHMEM's IB transports need these libraries.
    rdma = [r for r in runs["deps"] if "ibverbs" in r]
    assert len(rdma) == 1, "the deps stage installs RDMA userspace in one apt step"
    for package in ("ibverbs-providers", "ibverbs-utils", "rdmacm-utils"):
        assert package in rdma[0], f"{package} missing from {rdma[0]}"
    assert "libibverbs.so.1" in rdma[0] and "librdmacm.so.1" in rdma[0], "the step must prove both libraries load"
    router_runs = " ".join(runs["router"])
    assert "python3 -B -m sglang_stack.image.steps.install router --stage router" in router_runs, router_runs
    assert "pip check" in router_runs
    router_file = (ROOT / "docker" / "build" / "requirements" / "router.txt").read_text()
    assert "sglang-router @ https://" in router_file and "--hash=sha256:" in router_file
    assert not any("cuda" in r.lower() for r in runs["router"]), "the router stage needs no CUDA"


def test_build_target_router_replaces_its_own_base():
    request = buildmod.BuildRequest(engine=DOCKER, tag="sglang-stack-router:0.5.9", target="router", base_image="localhost/debian:bookworm")
    argv = request.command()
    assert "ROUTER_BASE_IMAGE=localhost/debian:bookworm" in argv and "BASE_IMAGE=localhost/debian:bookworm" not in argv, argv
    assert workflow.default_tag("sglang-stack:0.5.9-cu130", "router", "sglang-stack-router:0.5.9") == "sglang-stack-router:0.5.9"
    with pytest.raises(UserError, match="use --base-image instead"):
        workflow.parse_build_args(["ROUTER_BASE_IMAGE=x"])
