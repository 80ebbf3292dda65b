"""What the doctor judges: the facts of this host and its Docker engine, gathered once.

``gather`` asks Docker, ``nvidia-smi`` and the kernel, each under a timeout; ``Facts`` holds
the answers, so the checks in ``doctor`` are pure functions that tests feed recorded output.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sglang_stack import shell
from sglang_stack.engine import Engine, image_reference
from sglang_stack.errors import UserError
from sglang_stack.services import compose
from sglang_stack.services import composefile
from sglang_stack.services import progress

DEFAULT_IMAGE = "sglang-stack:0.5.9-cu130"
# compose.yaml mounts the cache volume here. Docker seeds a new named volume with the
# image's directory and its owner; when the image lacks the directory, the volume is
# root-owned and uid 10001 cannot write FlashInfer's, Triton's or Hugging Face's caches.
CACHE_DIR = "/home/sglang/.cache"
AUDIT_TIMEOUT_S = 90
# Multi-node: where the host shows its RDMA devices and network interfaces.
DEV_INFINIBAND = Path("/dev/infiniband")
SYS_INFINIBAND = Path("/sys/class/infiniband")
SYS_NET = Path("/sys/class/net")


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    compute_cap: str
    driver: str
    memory_mib: int

    @property
    def sm(self) -> int:
        major, _, minor = self.compute_cap.partition(".")
        return int(major) * 10 + int(minor or 0)


@dataclass
class Facts:
    """Everything the checks judge, gathered once (or built by a test)."""

    docker_cli: bool = False
    docker_info: dict | None = None
    docker_error: str = ""
    compose_version: str = ""
    image: dict | None = None
    ps_rows: list | None = None  # None: could not ask Docker
    held: dict = field(default_factory=dict)  # running server -> the GPUs its container reserves (held_gpus)
    gpus: list = field(default_factory=list)
    cuda_version: str = ""
    smi_error: str = ""
    nvidia_hook: bool = False
    shm_bytes: int | None = None
    mem_bytes: int | None = None  # the host's MemTotal: a container's /dev/shm pages are host memory
    memlock: tuple = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
    disk_path: str = ""
    disk_free: int | None = None
    cache_owner: str = ""  # "uid:mode" of the image's cache directory, "" when not asked
    ulimit_error: str = ""  # what the engine said when a container with the service's ulimits failed to start
    ulimits_tried: bool = False
    audit: tuple | None = None  # (exit code, output) of the in-image audit
    audit_skip: str = ""
    ib_devices: list | None = None  # RDMA devices (/sys/class/infiniband); None: no /dev/infiniband
    net_ifaces: list = field(default_factory=list)
    topology: object | None = None  # doctor.topology.Topology: P2P, links, ACS, IOMMU; None: not asked
    allreduce: tuple | None = None  # (exit code, output) of SGLang's all-reduce start-up run in the image
    allreduce_skip: str = ""


# --- parsing ---------------------------------------------------------------------------------

QUERY_FIELDS = "index,name,compute_cap,driver_version,memory.total"


def parse_query_csv(text: str) -> list[Gpu]:
    """``nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.total --format=csv[,noheader][,nounits]``.

    Extra trailing columns (such as ``pci.bus_id``) are ignored; a header line and
    ``MiB`` units are accepted.
    """
    gpus = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.lower().startswith("index"):
            continue
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 5 or not cols[0].isdigit():
            raise UserError(f"nvidia-smi --query-gpu: unexpected line {line!r}")
        memory = re.match(r"[0-9]+", cols[4])
        gpus.append(Gpu(int(cols[0]), cols[1], cols[2], cols[3], int(memory.group()) if memory else 0))
    return gpus


def parse_cuda_version(text: str) -> str:
    """The CUDA version the driver supports, from ``nvidia-smi``'s banner or ``-q -x`` XML."""
    match = re.search(r"CUDA Version:\s*([0-9]+\.[0-9]+)", text) or re.search(
        r"<cuda_version>\s*([0-9]+\.[0-9]+)\s*</cuda_version>", text
    )
    return match.group(1) if match else ""


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"[0-9]+", text))


# --- gathering ---------------------------------------------------------------------------------


def _capture(argv: list[str], timeout: float, show: bool) -> tuple[int | None, str, str]:
    """(exit code, stdout, stderr); exit code None when the command is missing or timed out."""
    try:
        proc = shell.run(argv, capture=True, check=False, quiet=not show, timeout=timeout)
    except UserError as err:
        return None, "", str(err)
    return proc.returncode, proc.stdout or "", proc.stderr or ""


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def gather_engine(engine: Engine, image: str | None, show: bool = False, proj=None) -> Facts:
    """The engine's facts: CLI, ``docker info``, Compose, the image (when named), the containers of ``proj``
    (a ``composefile.Project``; none when Compose could not read the files)."""
    facts = Facts(docker_cli=shutil.which(engine.runner) is not None)
    if not facts.docker_cli:
        return facts
    code, out, err = _capture([engine.runner, "info", "--format", "{{json .}}"], 15, show)
    try:
        info = json.loads(out) if out.strip() else None
    except json.JSONDecodeError:
        info = None
    server_errors = (info or {}).get("ServerErrors") or []
    if code == 0 and info and not server_errors and info.get("ServerVersion"):
        facts.docker_info = info
    else:
        facts.docker_error = (server_errors[0] if server_errors else "") or last_line(err) or f"exit {code}"
        return facts
    code, out, _ = _capture([engine.runner, "compose", "version", "--short"], 10, show)
    facts.compose_version = out.strip() if code == 0 else ""
    if image and is_reference(image):  # never `docker image inspect --help`: check_image names a bad one
        code, out, _ = _capture([engine.runner, "image", "inspect", image], 10, show)
        if code == 0:
            try:
                facts.image = (json.loads(out) or [None])[0]
            except json.JSONDecodeError:
                facts.image = None
    if proj is None:
        return facts
    code, out, _ = _capture(compose.compose_argv(engine, proj, "ps", "--all", "--format", "json"), 15, show)
    if code == 0:
        try:
            facts.ps_rows = progress.parse_ps(out)
        except UserError:
            facts.ps_rows = None
    servers = proj.names(composefile.SERVER)
    for row in facts.ps_rows or []:
        if row.get("Service") in servers and row.get("State") in ("running", "restarting"):
            code, out, _ = _capture([engine.runner, "inspect", "--format", "{{json .HostConfig.DeviceRequests}}",
                                     row.get("ID") or row.get("Name") or ""], 10, show)
            if code == 0:
                facts.held[row["Service"]] = held_gpus(out)
    return facts


def held_gpus(text: str) -> str | None:
    """The GPUs a container's device requests reserve (``docker inspect``'s HostConfig.DeviceRequests): ``all``,
    a comma-separated list of indices or UUIDs as compose passes GPU_IDS, "" for none; None where the answer
    cannot be read. A request by count (``--gpus 2``) takes GPUs the engine picks at start: counted as all."""
    try:
        requests = json.loads(text or "null") or []
    except json.JSONDecodeError:
        return None
    if not isinstance(requests, list):
        return None
    ids: list[str] = []
    for request in requests:
        if not isinstance(request, dict):
            return None
        capabilities = [c for group in request.get("Capabilities") or [] for c in group or []]
        if request.get("Driver") != "nvidia" and "gpu" not in capabilities:
            continue
        if not request.get("DeviceIDs"):
            return "all" if request.get("Count") else ""
        ids += [i.strip() for entry in request["DeviceIDs"] for i in str(entry).split(",") if i.strip()]
    return "all" if "all" in ids else ",".join(ids)


def gather(engine: Engine, svc: composefile.Service | None, show: bool = False, audit: bool = True,
           notes: bool = True) -> Facts:
    """Ask the host; never raises for a missing tool or an unreachable daemon. ``notes``: also gather what only a
    note reads (SGLang's all-reduce start-up in the image, seconds per rank), which `invoke up`'s gate never shows."""
    facts = gather_engine(engine, svc.image if svc else DEFAULT_IMAGE, show, composefile.project(svc.env) if svc else None)
    facts.nvidia_hook = shutil.which("nvidia-container-runtime-hook") is not None
    code, out, err = _capture(["nvidia-smi", f"--query-gpu={QUERY_FIELDS}", "--format=csv,noheader,nounits"], 20, show)
    if code == 0:
        try:
            facts.gpus = parse_query_csv(out)
        except UserError as exc:
            facts.smi_error = str(exc)
        code, out, _ = _capture(["nvidia-smi"], 20, show)
        facts.cuda_version = parse_cuda_version(out) if code == 0 else ""
        if len(facts.gpus) > 1:
            from sglang_stack.doctor import topology

            facts.topology = topology.gather(len(facts.gpus), lambda argv, timeout: _capture(argv, timeout, show))
    else:
        facts.smi_error = last_line(err) or last_line(out) or f"nvidia-smi exited {code}"
    try:
        st = os.statvfs("/dev/shm")
        facts.shm_bytes = st.f_frsize * st.f_blocks
    except OSError:
        facts.shm_bytes = None
    try:
        meminfo = Path("/proc/meminfo").read_text()
        facts.mem_bytes = int(re.search(r"^MemTotal:\s+([0-9]+) kB", meminfo, re.M).group(1)) * 1024
    except (OSError, AttributeError):
        facts.mem_bytes = None
    facts.memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    root = (facts.docker_info or {}).get("DockerRootDir") or "/var/lib/docker"
    for candidate in (root, os.path.dirname(root) or "/", "/"):
        if os.path.exists(candidate):
            st = os.statvfs(candidate)
            label = candidate if candidate == root else f"{candidate} (for {root}, not there yet)"
            facts.disk_path, facts.disk_free = label, st.f_frsize * st.f_bavail
            break
    if facts.image:
        # One short container of the service's image, with the service's ulimits: it reads the
        # cache directory's owner, and proves the engine can grant those limits (a sandboxed or
        # rootless engine refuses memlock -1 with "error setting rlimit type 8").
        image = svc.image if svc else DEFAULT_IMAGE
        limits = [f"--ulimit={name}={_ulimit_arg(value)}" for name, value in sorted((svc.ulimits if svc else {}).items())]
        code, out, err = _capture([engine.runner, "run", "--rm", "--network", "none", *limits, "--entrypoint", "stat", image,
                                   "-c", "%u:%a", CACHE_DIR], 30, show)
        facts.ulimits_tried = bool(limits)
        said = [line.strip() for line in err.splitlines() if "rlimit" in line]
        if code != 0 and said:
            # "... error setting rlimit type 8: operation not permitted: unknown": the runtime's own words.
            facts.ulimit_error = said[-1][said[-1].find("error setting rlimit"):] if "error setting rlimit" in said[-1] else said[-1]
        else:
            facts.cache_owner = out.strip() if code == 0 else f"missing: {last_line(err) or 'exit ' + str(code)}"
    if audit:
        _gather_audit(facts, engine, svc, show)
    if notes and svc is not None and facts.topology is not None:
        from sglang_stack.doctor import topology

        topology.gather_allreduce(facts, engine, svc, lambda argv, timeout: _capture(argv, timeout, show))
    facts.ib_devices, facts.net_ifaces = host_network()
    return facts


def _ulimit_arg(value) -> str:
    """compose's ``ulimits`` value (``-1``, ``N`` or ``{soft, hard}``) as ``docker run --ulimit``'s ``SOFT[:HARD]``."""
    if isinstance(value, dict):
        return f"{value.get('soft', -1)}:{value.get('hard', value.get('soft', -1))}"
    return f"{value}:{value}"


def host_network() -> tuple[list | None, list]:
    """(RDMA device names, or None without /dev/infiniband; network interface names)."""
    ib = None
    if DEV_INFINIBAND.is_dir():
        ib = sorted(p.name for p in SYS_INFINIBAND.iterdir()) if SYS_INFINIBAND.is_dir() else []
    nets = sorted(p.name for p in SYS_NET.iterdir()) if SYS_NET.is_dir() else []
    return ib, nets


def model_architecture(directory: Path | None) -> str:
    """``architectures[0]`` of ``directory/config.json``, or '' when unreadable."""
    if directory is None:
        return ""
    try:
        config = json.loads((directory / "config.json").read_text())
        return str((config.get("architectures") or [""])[0])
    except (OSError, ValueError, AttributeError):
        return ""


def _gather_audit(facts: Facts, engine: Engine, svc: composefile.Service | None, show: bool) -> None:
    arch = model_architecture(svc.model_dir if svc else None)
    if not facts.docker_info:
        facts.audit_skip = "skipped: no Docker engine to run the image"
    elif not facts.image:
        facts.audit_skip = "skipped: image not built (invoke build)"
    elif not arch:
        facts.audit_skip = "skipped: no architecture (MODEL_DIR has no readable config.json)"
    else:
        argv = [engine.runner, "run", "--rm", "--network", "none", "--entrypoint", "python3", svc.image,
                "-m", "sglang_stack.audit.eagle3", "--sglang-src", "/opt/sglang", "--arch", arch]
        code, out, err = _capture(argv, AUDIT_TIMEOUT_S, show)
        facts.audit = (code, (out + err).strip())


def release(facts: Facts, svc: composefile.Service) -> str:
    """The SGLang release ``svc`` runs: its built image's label, else the profile compose would build it from, else
    the root's."""
    labels = ((facts.image or {}).get("Config") or {}).get("Labels") or {}
    return labels.get("io.sglang-stack.sglang.version") or composefile.built_profile(svc)[0] or \
        composefile.default_profile()


def release_has(release: str, first: str) -> bool | None:
    """Whether SGLang ``release`` has what SGLang ``first`` brought, the first release of this checkout's profiles
    that has it (the tests run both releases' code); None when the version cannot be read."""
    from packaging.version import InvalidVersion, Version

    try:
        return Version(release) >= Version(first)
    except InvalidVersion:
        return None


def is_reference(image: str) -> bool:
    """Whether ``image`` reads as an image reference or ID (``engine.image_reference``), as an engine would take it."""
    try:
        image_reference(image, "image")
    except UserError:
        return False
    return True
