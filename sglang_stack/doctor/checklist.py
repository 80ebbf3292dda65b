"""Host preflight: can this machine run a service of compose.yaml?

    invoke doctor [SERVICE]      or    python -m sglang_stack.doctor.checklist [SERVICE]

One line per check, each ``ok``, ``warn``, ``FAIL``, ``skip`` or ``note``; every
FAIL says how to fix it. Compose reads compose.yaml for it; without Docker the
``config`` check fails and the host's checks still run. It only runs quick commands (``docker info``, ``nvidia-smi``,
one ``docker run`` of the audit), each under a timeout, so it takes seconds.

``invoke up`` runs the same checks first, quietly, and refuses to start on the
first FAIL with that check's line.

The module gathers raw facts (``Facts``) first and judges them in pure
functions, so the tests feed it recorded ``nvidia-smi`` output. Each check is
registered (``doctor.catalog``): ``CHECKS`` is their order, a check's docstring
its row in docs/services.md.
"""

from __future__ import annotations

import resource
import socket
from typing import Callable

from sglang_stack.services import variables
from sglang_stack.services import composefile
from sglang_stack import ROOT
from sglang_stack.engine import Engine
from sglang_stack.errors import UserError
from sglang_stack.doctor.inputs import (
    check_api_key, check_hub_token, check_models, check_speculation,
)
from sglang_stack.doctor.checks import FAIL, IMAGE_USER_UID, NOTE, OK, SKIP, WARN, Check
from sglang_stack.doctor.gpus import (
    check_arch, check_driver, check_exclusive, check_gpu_runtime, check_gpus, check_kernels,
)
from sglang_stack.doctor.topology import check_all_reduce, check_pcie_allreduce, check_topology
from sglang_stack.doctor.catalog import Context, check, evaluate as run_checks
from sglang_stack.doctor.host import (
    CACHE_DIR, DEFAULT_IMAGE, Facts, gather, gather_engine, is_reference, last_line, model_architecture,
    version_tuple,
)

SHM_FAIL_GIB, SHM_WARN_GIB = 2, 32
# Free space the Docker root needs: to build the image (an estimate: the ~10 GB runtime, the
# 7.5 GB devel image its build-only stage copies one file from, and build cache) or, once
# built, for what a running server writes there. Its root is read-only, so that is the cache
# volume (the JIT kernels FlashInfer and Triton compile on the first start) and its log: less
# than DISK_RUN_FAIL_GIB stops the start, less than DISK_RUN_WARN_GIB leaves a long-running
# server's log and caches little room, which is worth a warning but not a refusal.
DISK_BUILD_GIB, DISK_RUN_FAIL_GIB, DISK_RUN_WARN_GIB = 60, 2, 10
GIB = 1 << 30


# --- checks --------------------------------------------------------------------------------


@check("config")
def check_config(svc: composefile.Service | None, error: str, env: variables.Environment | None) -> Check:
    """Compose reads .env and the compose files, every value SGLang gets is valid, Docker's healthcheck
    timeout exceeds the probe's, and no name in .env is a slip of one the compose files read (a warning).

    Fix: the value to correct, in the file and line Compose names; a misspelt name, as the line suggests.
    """
    if svc is None:
        return Check("config", FAIL, error, _config_fix(error))
    source = f".env {env.env_file}" if env and env.env_file else "no .env (compose.yaml defaults; cp .env.example .env)"
    status = OK if env and env.env_file else WARN
    detail = f"{source}; {svc.name} on {svc.url}, TP {svc.tp_size}, GPUs {svc.gpu_ids}"
    timeouts, fix = _health_timeouts(svc)
    if timeouts:
        return Check("config", FAIL, f"{detail}; {timeouts}", fix)
    slips = variables.near_misses(env) if env else []
    if slips:
        return Check("config", WARN, f"{detail}; {'; '.join(slips)}", "rename it in .env (.env.example lists the names)")
    return Check("config", status, detail, "cp .env.example .env and set MODEL_DIR" if status == WARN else "")


def _config_fix(error: str) -> str:
    """The fix for a config error, pointed at the file it names first: an override, compose.yaml or .env."""
    head = error.split(":", 1)[0].split(" (")[0]
    name = head.rsplit("/", 1)[-1]
    if name == "compose.yaml":
        return "restore compose.yaml (git checkout compose.yaml), or correct the line it names"
    if name.endswith((".yaml", ".yml")):
        return f"correct {name}, or move it aside to run without it"
    return "correct that value in .env (see .env.example)"


_HEALTH_VARS = {"interval": "HEALTH_INTERVAL", "timeout": "HEALTH_TIMEOUT", "start_period": "HEALTH_START_PERIOD"}


def _health_timeouts(svc: composefile.Service) -> tuple[str, str]:
    """A complaint and its fix when the healthcheck is malformed, or Docker would kill the probe before SGLang answers."""
    hc = svc.healthcheck
    timeout = composefile.parse_duration(hc.get("timeout", ""))
    for key, var in _HEALTH_VARS.items():
        if composefile.parse_duration(hc.get(key, "")) is None:
            return (f"healthcheck {key}={hc.get(key)!r} is not a duration such as 15s or 30m",
                    f"set {var} in .env to a duration such as 15s, 40s or 30m (or remove it for the default)")
    inner_raw = str(svc.environment.get("SGLANG_HEALTH_CHECK_TIMEOUT") or "20")
    try:
        inner = max(float(inner_raw), 20.0)
    except ValueError:
        return (f"SGLANG_HEALTH_CHECK_TIMEOUT={inner_raw!r} is not a number of seconds",
                "set SGLANG_HEALTH_CHECK_TIMEOUT in .env to a number of seconds, such as 20")
    if timeout <= inner + 10:
        return (f"healthcheck timeout {hc.get('timeout')} must exceed the probe's {inner + 10:g}s "
                f"(SGLANG_HEALTH_CHECK_TIMEOUT {inner:g}s + 10s), or Docker kills every probe",
                "raise HEALTH_TIMEOUT in .env above SGLANG_HEALTH_CHECK_TIMEOUT + 10 s")
    return "", ""


def _own_container(rows: list | None, name: str) -> dict | None:
    for row in rows or []:
        if row.get("Service") == name and row.get("State") in ("running", "restarting", "created"):
            return row
    return None


@check(needs=("service",), roles=("server", "router"))
def check_port(svc, rows: list | None) -> Check:
    """The host port is free, or held by this service's own container; connections a just-stopped service left in
    TIME_WAIT do not count, as Docker binds over them.

    Fix: stop the other listener, or set the service's port variable (compose.yaml names it) to a free port.
    """
    var = svc.port_variable or "its port variable"
    where = f"{svc.bind_address}:{svc.host_port}"
    if _own_container(rows, svc.name):
        return Check("port", OK, f"{where} is held by {svc.name}'s own container (already up)")
    family = socket.AF_INET6 if ":" in svc.bind_address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # As Docker's own listener does (Go sets SO_REUSEADDR): connections a just-stopped
        # service served linger in TIME_WAIT on its port for a minute, and they hold nothing.
        # A socket that listens there still makes the bind fail.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((svc.bind_address, svc.host_port))
        except OSError as err:
            if err.errno == 98:  # EADDRINUSE
                return Check("port", FAIL, f"{where} is already in use",
                             f"stop what listens there, or set {var} in .env to a free port")
            return Check("port", FAIL, f"cannot bind {where}: {err.strerror}",
                         "set BIND_ADDRESS in .env to an address of this host (127.0.0.1 or 0.0.0.0)")
    return Check("port", OK, f"{where} is free")


@check(roles=("server", "router"))
def check_docker(facts: Facts, engine: Engine) -> Check:
    """The engine answers and the compose plugin is there (2.17 or newer, for ``up --wait-timeout``).

    Fix: install or start Docker Engine with the compose plugin.
    """
    if not facts.docker_cli:
        return Check("docker", FAIL, f"{engine.runner} CLI not found on PATH",
                     "install Docker Engine with the compose plugin: https://docs.docker.com/engine/install/")
    if not facts.docker_info:
        return Check("docker", FAIL, f"engine not reachable: {facts.docker_error}",
                     "start it (sudo systemctl start docker) or add your user to the docker group")
    version = facts.docker_info.get("ServerVersion", "?")
    if not facts.compose_version:
        return Check("docker", FAIL, f"Docker Engine {version}, but no compose plugin",
                     "install the docker-compose-plugin package (Compose v2)")
    detail = f"Docker Engine {version}, Compose {facts.compose_version}"
    # `up --wait-timeout` arrived in Compose 2.17.0 (docker/compose#10276).
    if version_tuple(facts.compose_version) < (2, 17):
        return Check("docker", WARN, detail, "upgrade Compose to 2.17 or newer: invoke up needs up --wait-timeout")
    # Before Engine 28, a port published on 127.0.0.1 is reachable from hosts on the same L2 segment, which can
    # route to the container network through this host (moby/moby#45610).
    if version_tuple(version) < (28,):
        return Check("docker", WARN, f"{detail}: before Engine 28 a port published on 127.0.0.1 is reachable from "
                     "the same network segment (moby/moby#45610)",
                     "upgrade Docker Engine to 28 or newer, or set SGLANG_API_KEY_FILE so the API asks for a key")
    return Check("docker", OK, detail)


@check()
def check_shm(facts: Facts, svc: composefile.Service | None = None) -> Check:
    """The /dev/shm the workers get is 32 GiB or more (under 2 GiB fails) and not above the host's memory: the
    container's own (``SHM_SIZE``), or the host's where an override sets ``ipc: host``.

    Fix: set SHM_SIZE in .env.
    """
    if svc is not None and svc.ipc != "host":
        if svc.shm_bytes is None:
            return Check("shm", FAIL, "no shm_size: the container's /dev/shm is Docker's 64 MB",
                         "set SHM_SIZE=64g in .env (compose.yaml's default), or restore shm_size in your override")
        gib = svc.shm_bytes / GIB
        detail = f"/dev/shm {gib:.0f} GiB, the container's own (SHM_SIZE)"
        if facts.mem_bytes is not None and svc.shm_bytes > facts.mem_bytes:
            # A tmpfs size is a ceiling, not a reservation: it costs memory only as it fills.
            return Check("shm", WARN, f"{detail}: more than this host's {facts.mem_bytes / GIB:.0f} GiB of memory; "
                         "a full /dev/shm would exhaust it", f"set SHM_SIZE to at most half the host's memory, e.g. "
                         f"{max(1, int(facts.mem_bytes / GIB / 2))}g")
        return shm_size_check(gib, detail, f"set SHM_SIZE={SHM_WARN_GIB * 2}g in .env")
    if facts.shm_bytes is None:
        return Check("shm", FAIL, "/dev/shm is missing", "mount a tmpfs at /dev/shm (the container shares it: ipc: host)")
    gib = facts.shm_bytes / GIB
    grow = f"sudo mount -o remount,size={SHM_WARN_GIB}G /dev/shm"
    return shm_size_check(gib, f"/dev/shm {gib:.0f} GiB, shared with the container (ipc: host)", grow, f"grow it: {grow}")


PIDS_FLOOR = 4096  # a TP 8 server runs about 2,000 threads, each counted by the pids cgroup
MEM_HEADROOM_GIB = 16  # what SGLang's processes want beside /dev/shm: the tokenizer, pinned buffers, Python


@check(needs=("service",))
def check_limits(facts: Facts, svc: composefile.Service) -> Check:
    """The container has a process cap of 4096 or more (``PIDS_LIMIT``) and a memory cap (``MEM_LIMIT``) that
    holds a full /dev/shm plus 16 GiB and no more than the host has; no memory cap is a warning that names the
    value this host allows.

    Fix: set PIDS_LIMIT or MEM_LIMIT in .env, as the line says.
    """
    if svc.pids_limit is None:
        return Check("limits", WARN, "no pids_limit: a runaway fork can exhaust the host's processes (CIS Docker 5.28)",
                     "set PIDS_LIMIT=16384 in .env (compose.yaml's default), or restore pids_limit in your override")
    if svc.pids_limit < PIDS_FLOOR:
        return Check("limits", FAIL, f"pids_limit {svc.pids_limit}: a TP {svc.tp_size} server runs about "
                     f"{svc.tp_size * 250} threads, and each counts", "set PIDS_LIMIT=16384 in .env")
    detail = f"pids_limit {svc.pids_limit}"
    host = facts.mem_bytes
    shm = svc.shm_bytes if svc.ipc != "host" and svc.shm_bytes else 0
    need = shm + MEM_HEADROOM_GIB * GIB
    if svc.mem_limit is None:
        allow = f"MEM_LIMIT={max(int((host - 8 * GIB) / GIB), 1)}g (this host's {host / GIB:.0f} GiB less 8)" if host \
            else "MEM_LIMIT (the host's memory less 8 GiB)"
        return Check("limits", WARN, f"{detail}; no memory cap: a leak takes the host's memory (CIS Docker 5.10)",
                     f"set {allow} in .env")
    detail += f", memory {svc.mem_limit / GIB:.0f} GiB"
    if svc.mem_limit < need:
        return Check("limits", FAIL, f"{detail}: less than /dev/shm's {shm / GIB:.0f} GiB (its pages count against the "
                     f"cap) plus {MEM_HEADROOM_GIB} GiB for SGLang's processes", f"set MEM_LIMIT={int(need / GIB) + 1}g "
                     "or more in .env, or lower SHM_SIZE")
    if host and svc.mem_limit > host:
        return Check("limits", WARN, f"{detail}: more than this host's {host / GIB:.0f} GiB, so no cap at all",
                     f"set MEM_LIMIT={max(int((host - 8 * GIB) / GIB), 1)}g in .env")
    return Check("limits", OK, detail)


def shm_size_check(gib: float, detail: str, fix: str, fail_fix: str | None = None) -> Check:
    """A /dev/shm of ``gib`` against what 8 workers' NCCL and CUDA IPC want, whichever /dev/shm it is."""
    if gib < SHM_FAIL_GIB:
        return Check("shm", FAIL, detail, fail_fix or fix)
    if gib < SHM_WARN_GIB:
        return Check("shm", WARN, f"{detail}; NCCL and CUDA IPC across 8 workers want {SHM_WARN_GIB}+ GiB", fix)
    return Check("shm", OK, detail)


@check(needs=("service",))
def check_privilege(svc: composefile.Service) -> Check:
    """SGLang runs as compose.yaml runs it: the image's user (uid 10001), no capability, no privilege gained, a
    read-only root. An override that runs it as root fails; one that widens the rest (``privileged``, ``cap_add``,
    ``ipc``/``pid: host``, a writable root, devices or host mounts beside the models) is named, with the compose
    files (a warning).

    Fix: drop it from the override unless you mean it.
    """
    h = svc.hardening
    user = h.get("user", "")
    if user.split(":")[0] in ("0", "root"):
        return Check("privilege", FAIL, f"user: {user} runs SGLang as root, with write access to everything it mounts "
                     f"({_files(svc)})", "remove user: from the override: the image runs as uid 10001")
    found = []
    if h.get("privileged"):
        found.append("privileged: true (every device and capability of the host)")
    if h.get("cap_add"):
        found.append(f"cap_add: {', '.join(map(str, h['cap_add']))}")
    if not any(str(o).replace("=", ":").startswith("no-new-privileges:true") or o == "no-new-privileges"
               for o in h.get("security_opt", [])):
        found.append("no-new-privileges is off")
    if not h.get("read_only"):
        found.append("the root file system is writable (read_only: false)")
    if h.get("host_mounts"):
        found.append(f"host paths mounted beside the models: {', '.join(map(str, h['host_mounts']))}")
    if h.get("pid") == "host":
        found.append("pid: host")
    if svc.ipc == "host":
        found.append("ipc: host (the host's /dev/shm and its segments)")
    odd = [d for d in h.get("devices", []) if "/dev/infiniband" not in str(d)]
    if odd:
        found.append(f"devices: {', '.join(map(str, odd))}")
    if not found:
        return Check("privilege", OK, "no capability, no-new-privileges, read-only root, no host mount beyond the models")
    return Check("privilege", WARN, f"{'; '.join(found)} ({_files(svc)})",
                 "drop it from the override unless you mean it: compose.yaml needs none of it")


def _limit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else f"{value // 1024} KiB"


@check()
def check_memlock(facts: Facts, svc: composefile.Service | None = None) -> Check:
    """A container of the built image starts with compose.yaml's ulimits (memlock -1); without the image, the
    host's and rootless Docker's limits allow it.

    Fix: ``LimitMEMLOCK=infinity`` for dockerd, or limits.conf for rootless Docker.
    """
    soft, hard = facts.memlock
    host = f"host ulimit -l {_limit(soft)} (hard {_limit(hard)})"
    if svc is not None and "memlock" not in svc.ulimits:
        return Check("memlock", SKIP, f"skipped: {svc.name} sets no memlock limit ({_files(svc)})")
    if facts.ulimit_error:
        return Check("memlock", FAIL, f"the engine refused a container compose.yaml's ulimits: {facts.ulimit_error}",
                     "let dockerd raise memlock (sudo systemctl edit docker: [Service] LimitMEMLOCK=infinity, then "
                     "sudo systemctl restart docker); NCCL and CUDA graphs need pinned host memory")
    if facts.ulimits_tried and facts.cache_owner:
        return Check("memlock", OK, f"a container of the image started with compose.yaml's ulimits (memlock -1); {host}")
    options = " ".join((facts.docker_info or {}).get("SecurityOptions") or [])
    if "rootless" in options:
        if hard != resource.RLIM_INFINITY:
            return Check("memlock", FAIL, f"rootless Docker cannot give the container more than the {host}",
                         "set 'memlock unlimited' for your user in /etc/security/limits.conf and log in again, or use rootful Docker")
        return Check("memlock", OK, f"{host}; rootless Docker can grant compose.yaml's memlock -1")
    return Check("memlock", OK, f"the container gets memlock unlimited from compose.yaml; {host}")


@check()
def check_disk(facts: Facts) -> Check:
    """Free space at Docker's root: 60 GiB to build the image (an estimate); once it is built, 2 GiB for the
    caches and log a first start writes, and a warning below 10 GiB.

    Fix: free space there, or move Docker's data-root.
    """
    if facts.disk_free is None:
        return Check("disk", SKIP, "skipped: no local Docker root directory")
    free = facts.disk_free / GIB
    fix = "free space there, or move Docker's data-root to a larger disk"
    if not facts.image:
        detail = f"{facts.disk_path}: {free:.1f} GiB free; {DISK_BUILD_GIB} GiB wanted to build the image (estimate)"
        return Check("disk", FAIL, detail, fix) if free < DISK_BUILD_GIB else Check("disk", OK, detail)
    detail = (f"{facts.disk_path}: {free:.1f} GiB free; a first start needs {DISK_RUN_FAIL_GIB} GiB for its caches "
              f"and log, {DISK_RUN_WARN_GIB} GiB leaves a long-running server room")
    if free < DISK_RUN_FAIL_GIB:
        return Check("disk", FAIL, detail, fix)
    if free < DISK_RUN_WARN_GIB:
        return Check("disk", WARN, detail, fix)
    return Check("disk", OK, detail)


@check()
def check_image(facts: Facts, svc: composefile.Service | None) -> Check:
    """The service's image exists, holds the SGLang release of the profile compose builds it from (``SGLANG_PROFILE``),
    runs SGLang's launcher, and owns /home/sglang/.cache as uid 10001 (the cache volume takes that owner).

    Fix: ``invoke build`` (with ``--profile NAME`` for the profile ``SGLANG_PROFILE`` names).
    """
    name = svc.image if svc else DEFAULT_IMAGE
    if svc and not is_reference(name):
        where = svc.env.where("SGLANG_STACK_IMAGE") if "SGLANG_STACK_IMAGE" in svc.env.values else \
            f"compose.yaml: services.{svc.name}.image"
        return Check("image", FAIL, f"{where}: {name!r} is not an image reference ([registry/]name[:tag][@sha256:"
                     "digest], lowercase)", "set SGLANG_STACK_IMAGE in .env to an image reference, or unset it")
    wanted, refusal = composefile.built_profile(svc)
    if refusal:
        return Check("image", FAIL, refusal, "unset SGLANG_PROFILE in .env, or set it to a folder of profiles/")
    build = "invoke build" + (f" --profile {wanted}" if wanted and wanted != composefile.default_profile() else "")
    if not facts.docker_info:
        return Check("image", SKIP, "skipped: no Docker engine")
    if not facts.image:
        return Check("image", WARN, f"{name} is not built", f"{build} (docker compose up would build the same "
                     "profile's Dockerfile, without the lock checks)")
    config = facts.image.get("Config") or {}
    size = (facts.image.get("Size") or 0) / 1e9
    created = str(facts.image.get("Created", "?"))[:10]
    # The profile is the SGLang release the image was built from (its label), whatever its tag says.
    profile = (config.get("Labels") or {}).get("io.sglang-stack.sglang.version")
    detail = f"{name}: {size:.1f} GB, created {created}" + (f", profile {profile}" if profile else "")
    if wanted and profile and profile != wanted:
        return Check("image", FAIL, f"{detail}: it holds SGLang {profile}, and compose builds and runs profile {wanted} "
                     f"({svc.env.where('SGLANG_PROFILE')})", f"{build}, or set SGLANG_PROFILE to {profile}")
    entry = config.get("Entrypoint") or []
    if entry[-1:] not in (["sglang_stack.entrypoints.serve"], ["sglang.launch_server"]):
        return Check("image", WARN, f"{detail}; its entrypoint {entry} is not SGLang's launch_server",
                     "rebuild with invoke build, or set SGLANG_STACK_IMAGE to this stack's image")
    owner = facts.cache_owner.split(":")[0]
    if facts.cache_owner and owner != str(IMAGE_USER_UID):
        return Check("image", WARN, f"{detail}; {CACHE_DIR} in the image is {facts.cache_owner or 'missing'}, so the "
                     f"cache volume would not be writable by uid {IMAGE_USER_UID}",
                     f"rebuild with an image that creates {CACHE_DIR} owned by {IMAGE_USER_UID}, then docker volume rm sglang-stack_cache")
    return Check("image", OK, detail + (f"; {CACHE_DIR} owned by uid {owner}" if facts.cache_owner else ""))


@check()
def check_audit(facts: Facts, svc: composefile.Service | None) -> Check:
    """The EAGLE-3 audit passes in the image for the model's architecture (a FAIL where the service mounts a
    drafter, a warning otherwise).

    Fix: rebuild the image with the patch series (``invoke build``).
    """
    if facts.audit is None:
        return Check("audit", SKIP, facts.audit_skip or "skipped")
    code, output = facts.audit
    last = last_line(output)
    arch = model_architecture(svc.model_dir if svc else None)
    severity = FAIL if svc is not None and svc.draft_dir is not None else WARN
    if code == 0:
        return Check("audit", OK, f"EAGLE-3 audit passes for {arch} in the image{': ' + last if last else ''}")
    if code == 1:
        return Check("audit", severity, f"EAGLE-3 audit fails for {arch}: {last}",
                     "rebuild the image with the patch series (invoke build); eagle3 would die after loading")
    return Check("audit", severity, f"EAGLE-3 audit could not run (exit {code}): {last}",
                 "check the image with: docker run --rm --entrypoint python3 IMAGE -m sglang_stack.audit.eagle3 --help")


@check("multinode", "rdma", "netif", needs=("service", "multinode"))
def check_multinode(facts: Facts, svc: composefile.Service) -> list[Check]:
    """Across nodes: host networking, the rank and rendezvous, RDMA devices the container gets
    (``/dev/infiniband``, ``NCCL_IB_HCA``), the interfaces NCCL and Gloo bind to, and no open API on every
    interface.

    Fix: compose.multinode.yaml (and compose.rdma.yaml) in COMPOSE_FILE, on every node; the NCCL variables in .env.
    """
    nccl = {k: str(v) for k, v in svc.environment.items() if v is not None}  # what the container gets
    where = f"node {svc.node_rank} of {svc.nnodes}, rendezvous {svc.dist_init_addr}, TP {svc.tp_size} in all"
    if not svc.host_network:
        out = [Check("multinode", FAIL, f"{where}, but {svc.name} is on Docker's bridge network ({_files(svc)}): "
                                        "NCCL cannot reach the other nodes through its NAT",
                     "set COMPOSE_FILE=compose.yaml:compose.multinode.yaml in .env (host networking), on every node")]
    else:
        out = [Check("multinode", OK, f"{where}; host networking ({_files(svc)})")]
    rdma_devices = any("/dev/infiniband" in str(d) for d in svc.hardening.get("devices", []))
    hca = nccl.get("NCCL_IB_HCA") or ""
    ib_off = (nccl.get("NCCL_IB_DISABLE") or "") == "1"
    if ib_off:
        out.append(Check("rdma", NOTE, "NCCL_IB_DISABLE=1: NCCL uses TCP sockets between nodes"))
    elif facts.ib_devices is None:
        out.append(Check("rdma", WARN, "no /dev/infiniband: NCCL falls back to TCP sockets between nodes, at a fraction of the bandwidth",
                         "install the RDMA driver and rdma-core on the host (InfiniBand or RoCE NICs), or set NCCL_IB_DISABLE=1 to choose TCP"))
    elif not facts.ib_devices:
        out.append(Check("rdma", FAIL, "/dev/infiniband exists but /sys/class/infiniband lists no device",
                         "load the NIC's RDMA driver (e.g. mlx5_ib) and check with ibv_devinfo"))
    else:
        wanted = [h.split(":")[0].lstrip("^=") for h in hca.split(",") if h.strip()]
        missing = [h for h in wanted if not any(d.startswith(h) for d in facts.ib_devices)]
        if missing and not hca.startswith("^"):
            out.append(Check("rdma", FAIL, f"NCCL_IB_HCA={hca} names {', '.join(missing)}, but the host has {', '.join(facts.ib_devices)}",
                             "set NCCL_IB_HCA in .env to devices ibv_devinfo lists"))
        elif not rdma_devices:
            out.append(Check("rdma", FAIL, f"RDMA devices {', '.join(facts.ib_devices)} on the host, but the container gets none: "
                                           "NCCL would fall back to TCP sockets",
                             "add compose.rdma.yaml to COMPOSE_FILE in .env (compose.yaml:compose.multinode.yaml:compose.rdma.yaml)"))
        else:
            out.append(Check("rdma", OK, f"RDMA devices {', '.join(facts.ib_devices)}; compose.rdma.yaml passes /dev/infiniband"
                                         + (f", NCCL_IB_HCA={hca}" if hca else "")))
    for var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        value = nccl.get(var) or ""
        if not value:
            out.append(Check("netif", WARN, f"{var} unset: it picks an interface by itself, possibly docker0 or one the other nodes cannot reach",
                             f"set {var} in .env to the interface that holds DIST_INIT_ADDR's network (ip -br addr)"))
            continue
        names = [n for n in value.split(",") if n and not n.startswith("^")]
        unknown = [n for n in names if not any(i == n.lstrip("=") or (not n.startswith("=") and i.startswith(n)) for i in facts.net_ifaces)]
        if unknown and facts.net_ifaces:
            out.append(Check("netif", FAIL, f"{var}={value}: no interface {', '.join(unknown)} (host has {', '.join(facts.net_ifaces)})",
                             f"set {var} in .env to one of the host's interfaces"))
        else:
            out.append(Check("netif", OK, f"{var}={value}"))
    return out


# --- running -------------------------------------------------------------------------------


@check("config", roles=("router",))
def check_router(svc: composefile.RouterService | None, error: str) -> Check:
    """A router's settings resolve: ``ROUTER_WORKER_URLS``, its policy and its port.

    Fix: the value to correct in .env (see .env.example).
    """
    if svc is None:
        return Check("config", FAIL, error, "correct that value in .env (see .env.example)")
    return Check("config", OK, f"{svc.name} on {svc.url}, policy {svc.policy}, {len(svc.worker_urls)} workers: "
                 f"{', '.join(svc.worker_urls)}")


# The order they print in: what you asked for, then the host, then the image.
CHECKS = (check_config, check_router, check_models, check_speculation, check_api_key, check_hub_token, check_port, check_docker, check_gpu_runtime,
          check_exclusive, check_driver, check_gpus, check_arch, check_topology, check_all_reduce, check_pcie_allreduce, check_multinode, check_privilege, check_shm, check_limits,
          check_memlock, check_disk, check_image, check_kernels, check_audit)


def evaluate(facts: Facts, engine: Engine, svc: composefile.Service | None, config_error: str = "",
             env: variables.Environment | None = None, role: str = composefile.SERVER) -> list[Check]:
    """Every check of ``CHECKS`` that applies to this role and service, in order."""
    return run_checks(CHECKS, Context(facts, svc, engine, env, config_error, role))


def _files(svc: composefile.Service) -> str:
    return "compose files: " + ", ".join(str(f.relative_to(ROOT)) if f.is_relative_to(ROOT) else str(f) for f in svc.files)


def run(engine: Engine, name: str | None, show: bool = False, env: variables.Environment | None = None,
        svc: "composefile.Service | composefile.RouterService | None" = None, notes: bool = True) -> list[Check]:
    """Every check of service ``name`` (default: compose.yaml's); ``svc``, when the caller resolved it already, is
    not resolved again. Files Compose cannot read are the ``config`` check's FAIL, and the host's checks still run;
    a name compose.yaml does not have is an error."""
    error, role = "", composefile.SERVER
    try:
        env = env if env is not None else variables.environment()
        proj = composefile.project(env)
    except UserError as err:
        error = str(err)
    else:
        name = proj.check(name or proj.default)
        role = proj.role(name)
        try:
            svc = svc or composefile.resolve(name, env)
        except UserError as err:
            error = str(err)
    if role == composefile.ROUTER:
        facts = gather_engine(engine, None, proj=composefile.project(env) if not error else None)
    else:
        facts = gather(engine, svc, show=show, notes=notes)
    return evaluate(facts, engine, svc, error, env, role)


def summary(checks: list[Check]) -> str:
    counts = {status: sum(1 for c in checks if c.status == status) for status in (OK, WARN, FAIL, SKIP, NOTE)}
    words = [f"{counts[OK]} ok", f"{counts[WARN]} warn", f"{counts[FAIL]} FAIL", f"{counts[SKIP]} skipped"]
    return ", ".join(words)


def doctor(engine: Engine, name: str | None, out: Callable[[str], None] = print, show: bool = True) -> int:
    """Print every check of service ``name`` (default: compose.yaml's); return 1 when any failed."""
    env_file = variables.ENV_FILE if variables.ENV_FILE.exists() else None
    checks = run(engine, name, show=show)
    shown = name or "compose.yaml's default"
    out(f"sglang-stack doctor: service {shown}" + (f", {env_file}" if env_file else ", no .env"))
    for line in checks:
        out(line.line())
    out(f"doctor: {summary(checks)}")
    return 1 if any(c.status == FAIL for c in checks) else 0


def preflight(engine: Engine, name: str, out: Callable[[str], None] = print, *, env: variables.Environment | None = None,
              svc: "composefile.Service | composefile.RouterService | None" = None) -> list[Check]:
    """``invoke up``'s gate: quiet unless something is wrong; the first FAIL is the error.

    ``env`` and ``svc``: what the caller resolved already (``composefile.resolve``), so it is read once."""
    checks = run(engine, name, show=False, env=env, svc=svc, notes=False)  # a note is never shown here
    failed = [c for c in checks if c.status == FAIL]
    if failed:
        first = failed[0]
        more = f" (+{len(failed) - 1} more: invoke doctor --service {name})" if len(failed) > 1 else ""
        raise UserError(f"preflight {first.name}: {first.detail} -- fix: {first.fix}{more}")
    for found in checks:
        if found.status == WARN:
            out(found.line())
    out(f"preflight: {summary(checks)}")
    return checks


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sglang_stack.doctor.checklist", description="Host preflight for sglang-stack.")
    parser.add_argument("service", nargs="?", default=None,
                        help="a service of compose.yaml (default: compose.yaml's x-sglang-stack.default)")
    parser.add_argument("--engine", default="docker", help="container CLI (default: docker)")
    parser.add_argument("--docs", action="store_true", help="write the table of checks into docs/services.md")
    args = parser.parse_args(argv)
    if args.docs:
        from sglang_stack.atomic import write as atomic_write
        from sglang_stack.doctor.catalog import documented
        from sglang_stack.errors import read_text

        path = ROOT / "docs" / "services.md"
        atomic_write(path, documented(read_text(path), CHECKS))
        print(f"wrote {path.relative_to(ROOT)}")
        return 0
    return doctor(Engine(args.engine), args.service)


if __name__ == "__main__":
    from sglang_stack.errors import run_main

    run_main(main)
