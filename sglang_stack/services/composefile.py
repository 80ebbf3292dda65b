"""compose.yaml as the host sees it: the services' settings, resolved the way Docker Compose resolves them.

compose.yaml is the single source of every service setting and default. This module reads it the way
Docker Compose does (``.env``, then the shell, then ``${VAR:-default}`` interpolation, in
``sglang_stack.services.variables``), so the preflight, ``invoke status`` and the bench read the same model
directory, port and TP size that ``docker compose`` will use, without a second copy of the defaults. It
needs no Docker for one file: the preflight must run on a host without it. Several files (COMPOSE_FILE)
are merged by ``docker compose config`` itself. The commands that run the services: ``compose``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sglang_stack import ROOT, shell, yaml_file
from sglang_stack.errors import UserError
from sglang_stack.services.variables import Environment, environment, interpolate_tree

COMPOSE_FILE = ROOT / "compose.yaml"
# Overrides for multi-node tensor parallelism (host networking) and RDMA devices, named in COMPOSE_FILE.
MULTINODE_FILE = ROOT / "compose.multinode.yaml"
RDMA_FILE = ROOT / "compose.rdma.yaml"
SERVICES = ("baseline", "eagle3")  # the GPU services: one at a time, every GPU each
ROUTER = "router"
ALL_SERVICES = (*SERVICES, ROUTER)
TARGET_MOUNT = "/models/target"
DRAFT_MOUNT = "/models/draft"
CONTAINER_PORT = 30000


# --- compose.yaml --------------------------------------------------------------------------


def load_raw(path: Path = COMPOSE_FILE) -> dict:
    """compose.yaml as YAML, anchors and merge keys resolved, nothing interpolated."""
    data = yaml_file.load(path)
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
        raise UserError(f"{path}: no 'services' mapping")
    return data


def compose_files(env: Environment | None = None) -> list[Path]:
    """The files ``docker compose`` reads in this directory, in order.

    ``COMPOSE_FILE`` (from the shell or ``.env``, split on ``COMPOSE_PATH_SEPARATOR``,
    default ``:``; relative to this directory) when set; otherwise compose.yaml, plus
    compose.override.yaml when it exists, as Compose itself does.
    """
    env = env if env is not None else environment()
    listed = env.get("COMPOSE_FILE") or ""
    if listed:
        separator = env.get("COMPOSE_PATH_SEPARATOR") or os.pathsep
        files = [Path(os.path.expanduser(part)) for part in listed.split(separator) if part]
        files = [f if f.is_absolute() else ROOT / f for f in files]
    else:
        files = [COMPOSE_FILE] + [f for f in (ROOT / "compose.override.yaml",) if f.is_file()]
    for f in files:
        if not f.is_file():
            raise UserError(f"{env.where('COMPOSE_FILE')}: {f}: no such file")
    return files


def load(path: Path | None = None, env: Environment | None = None) -> dict:
    """The compose configuration after interpolation, as ``docker compose config`` sees it.

    One file (compose.yaml, or ``path``) is read here, without Docker, so the
    preflight runs on a host that has none yet. Several files (an override in
    ``COMPOSE_FILE``) are merged by Compose itself: ``docker compose config``.
    """
    env = env if env is not None else environment()
    files = [path] if path is not None else compose_files(env)
    if len(files) == 1:
        return interpolate_tree(load_raw(files[0]), env.values)
    return merged_config(files, env)


def merged_config(files: list[Path], env: Environment) -> dict:
    """``docker compose config --format json`` of several files: Compose's own merge (``!reset``, ``!override``)."""
    if not shutil.which("docker"):
        raise UserError(f"{env.where('COMPOSE_FILE')}: merging several compose files needs the docker CLI with the compose plugin")
    # Without the plugin, `docker compose config` fails with words that read as if COMPOSE_FILE were at fault.
    from sglang_stack import engine

    try:
        engine.require_plugin("compose")
    except UserError as err:
        raise UserError(f"{env.where('COMPOSE_FILE')}: merging several compose files needs Compose v2: {err}") from None
    argv = ["docker", "compose", "--project-directory", str(ROOT)]
    for f in files:
        argv += ["--file", str(f)]
    for profile in ALL_SERVICES:
        argv += ["--profile", profile]
    for f in files:  # a YAML syntax error is named with its file here; Compose's own message says only "yaml: line 3"
        yaml_file.load(f)
    variables = {"PATH": os.environ.get("PATH", "")} | dict(env.values)
    proc = shell.run([*argv, "config", "--format", "json"], env=variables, capture=True, check=False, quiet=True, timeout=60)
    if proc.returncode != 0:
        said = (proc.stderr or "").strip().splitlines()
        last = said[-1] if said else f"exit {proc.returncode}"
        if m := re.match(r"validating (\S+): (.*)", last):  # lead with the file Compose found at fault
            raise UserError(f"{m.group(1)}: {m.group(2)}")
        raise UserError(f"docker compose config ({', '.join(str(f) for f in files)}): {last}")
    return json.loads(proc.stdout)


@dataclass(frozen=True)
class Service:
    """What the preflight and the tasks need to know about one service."""

    name: str
    image: str
    argv: list[str]
    model_dir: Path
    draft_dir: Path | None
    bind_address: str
    host_port: int
    tp_size: int
    gpu_ids: str
    environment: dict
    healthcheck: dict
    env: Environment
    gpus: bool = True  # whether it reserves GPUs (deploy.resources.reservations.devices)
    ulimits: dict = field(default_factory=dict)
    files: tuple[Path, ...] = (COMPOSE_FILE,)
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str = ""
    host_network: bool = False
    ipc: str = ""  # "host" where an override shares the host's IPC namespace (and its /dev/shm)
    shm_bytes: int | None = None  # the container's own /dev/shm (shm_size); None: Docker's 64 MB
    hardening: dict = field(default_factory=dict)  # privileged, cap_add, security_opt, read_only, host mounts

    @property
    def url(self) -> str:
        host = self.bind_address
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.host_port}"

    def flag(self, name: str) -> str | None:
        """The last value given to ``--name`` in the command line (SGLANG_EXTRA_ARGS may repeat it)."""
        return _flag(self.argv, name)


def parse_duration(text: str) -> float | None:
    """Compose durations: ``15s``, ``30m``, ``1h30m``, ``1m30s``, ``500ms``."""
    text = str(text).strip()
    parts = re.findall(r"([0-9.]+)(ms|us|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    return sum(float(n) * scale[u] for n, u in parts)


def wait_timeout(svc: Service) -> int:
    """Seconds ``up --wait`` may take: the start period plus every retry after it, and 2 minutes more."""
    hc = svc.healthcheck
    start = parse_duration(hc.get("start_period", "")) or 0
    step = (parse_duration(hc.get("interval", "")) or 30) + (parse_duration(hc.get("timeout", "")) or 30)
    retries = int(hc.get("retries") or 3)
    return int(start + retries * step + 120)


def unhealthy_within(svc: Service) -> float:
    """Seconds after which a server that stops answering is marked unhealthy, at most.

    Once the start period is over, Docker probes every ``interval``; a probe that
    hangs is killed after ``timeout``; ``retries`` failures in a row mark the
    container unhealthy: retries x (interval + timeout), 2 min 45 s by default.
    """
    hc = svc.healthcheck
    step = (parse_duration(hc.get("interval", "")) or 30) + (parse_duration(hc.get("timeout", "")) or 30)
    return int(hc.get("retries") or 3) * step


def check_service_name(name: str, allowed: tuple[str, ...] = ALL_SERVICES) -> str:
    if name not in allowed:
        raise UserError(f"unknown service {name!r}: choose one of {', '.join(allowed)} (compose.yaml)")
    return name


def service(name: str, env: Environment | None = None, path: Path | None = None) -> Service:
    """Resolve GPU service ``name`` from the compose files; a bad value is one line naming its variable."""
    check_service_name(name, SERVICES)
    env = env if env is not None else environment()
    files = (path,) if path is not None else tuple(compose_files(env))
    path = files[-1]
    config = load(path if len(files) == 1 else None, env)
    spec = config["services"].get(name)
    if not isinstance(spec, dict):
        raise UserError(f"{path}: service {name!r} is missing")
    command = spec.get("command") or ""
    try:
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    except ValueError as err:
        raise UserError(f"{path}: services.{name}.command: {err} (check SGLANG_EXTRA_ARGS)") from None
    mounts = {m.get("target"): m.get("source") for m in spec.get("volumes", []) if isinstance(m, dict)}
    if TARGET_MOUNT not in mounts:
        raise UserError(f"{path}: services.{name} mounts nothing at {TARGET_MOUNT}")
    tp_raw = _flag(argv, "--tp") or _flag(argv, "--tp-size") or _flag(argv, "--tensor-parallel-size") or ""
    tp = _positive_int(tp_raw, "TP_SIZE", env)
    for var, flag in (
        ("SGLANG_SPEC_NUM_STEPS", "--speculative-num-steps"),
        ("SGLANG_SPEC_EAGLE_TOPK", "--speculative-eagle-topk"),
        ("SGLANG_SPEC_NUM_DRAFT_TOKENS", "--speculative-num-draft-tokens"),
    ):
        if flag in argv:
            _positive_int(_flag(argv, flag) or "", var, env)
    nnodes, node_rank, dist_init_addr = _multinode(argv, tp, env)
    host_network = spec.get("network_mode") == "host"
    if host_network:  # compose.multinode.yaml: nothing is published, SGLang listens on the host itself
        bind, port = _flag(argv, "--host") or "0.0.0.0", CONTAINER_PORT
    else:
        bind, port = _published(spec.get("ports") or [], name, env, path)
    reserved = (((spec.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
    devices = reserved or [{}]
    gpu_ids = ",".join(devices[0].get("device_ids") or ["all"])
    if not re.fullmatch(r"all|[A-Za-z0-9-]+(,[A-Za-z0-9-]+)*", gpu_ids):
        raise UserError(f"{env.where('GPU_IDS')}: use 'all' or comma-separated GPU indices or UUIDs, e.g. 0,1,2,3")
    return Service(
        name=name,
        image=str(spec.get("image") or ""),
        argv=argv,
        model_dir=_host_path(mounts[TARGET_MOUNT]),
        draft_dir=_host_path(mounts[DRAFT_MOUNT]) if DRAFT_MOUNT in mounts else None,
        bind_address=bind,
        host_port=port,
        tp_size=tp,
        gpu_ids=gpu_ids,
        environment=dict(spec.get("environment") or {}),
        healthcheck=dict(spec.get("healthcheck") or {}),
        env=env,
        gpus=bool(reserved),
        ulimits=dict(spec.get("ulimits") or {}),
        files=files,
        nnodes=nnodes,
        node_rank=node_rank,
        dist_init_addr=dist_init_addr,
        host_network=host_network,
        ipc=str(spec.get("ipc") or ""),
        shm_bytes=_bytes(spec["shm_size"], "SHM_SIZE", env) if spec.get("shm_size") not in (None, "") else None,
        hardening={"privileged": spec.get("privileged") is True, "cap_add": list(spec.get("cap_add") or []),
                   "security_opt": list(spec.get("security_opt") or []), "read_only": spec.get("read_only") is True,
                   "host_mounts": [m.get("source") for m in spec.get("volumes", []) if isinstance(m, dict)
                                   and m.get("type") == "bind" and m.get("target") not in (TARGET_MOUNT, DRAFT_MOUNT)]
                   + [v.split(":", 1)[0] for v in spec.get("volumes", []) if isinstance(v, str) and v.startswith(("/", "."))],
                   "pid": str(spec.get("pid") or ""), "devices": list(spec.get("devices") or [])},
    )


def resolve(name: str, env: Environment | None = None) -> "Service | RouterService":
    """SERVICE as compose.yaml resolves it: the router's settings, or a GPU service's; resolved once and handed on."""
    check_service_name(name)
    return router_service(env) if name == ROUTER else service(name, env)


def _multinode(argv: list[str], tp: int, env: Environment) -> tuple[int, int, str]:
    """NNODES, NODE_RANK, DIST_INIT_ADDR as SGLang will get them, checked the way SGLang would refuse them."""
    nnodes = _positive_int(_flag(argv, "--nnodes") or "1", "NNODES", env)
    raw_rank = _flag(argv, "--node-rank") or "0"
    if not re.fullmatch(r"[0-9]+", raw_rank) or int(raw_rank) >= nnodes:
        shown = env.where("NODE_RANK") if "NODE_RANK" in env.values else f"NODE_RANK={raw_rank!r}"
        raise UserError(f"{shown}: must be 0..{nnodes - 1} (NNODES={nnodes})")
    addr = _flag(argv, "--dist-init-addr") or ""
    if nnodes > 1:
        if not addr:
            raise UserError(f"{env.where('DIST_INIT_ADDR')}: NNODES={nnodes} needs DIST_INIT_ADDR=HOST:PORT of node rank 0, the same on every node")
        if not re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}", addr) or not 1 <= int(addr.rsplit(":", 1)[1]) <= 65535:
            raise UserError(f"{env.where('DIST_INIT_ADDR')}: must be HOST:PORT, e.g. 10.0.0.11:20000")
        if tp % nnodes:
            raise UserError(f"{env.where('TP_SIZE')}: the total tensor-parallel size must divide by NNODES={nnodes} (SGLang refuses it)")
    return nnodes, int(raw_rank), addr


@dataclass(frozen=True)
class RouterService:
    """The ``router`` service as compose.yaml resolves it."""

    name: str
    image: str
    argv: list[str]
    worker_urls: list[str]
    policy: str
    bind_address: str
    host_port: int
    healthcheck: dict
    env: Environment

    @property
    def url(self) -> str:
        return Service.url.fget(self)  # the same loopback rule as the GPU services


def router_service(env: Environment | None = None, path: Path | None = None, *, need_workers: bool = True) -> RouterService:
    """Resolve the router from the compose files; a bad ROUTER_* value is one line naming it."""
    from sglang_stack.entrypoints import router as routermod

    env = env if env is not None else environment()
    files = [path] if path is not None else compose_files(env)
    path = files[-1]
    spec = load(files[0] if len(files) == 1 else None, env)["services"].get(ROUTER)
    if not isinstance(spec, dict):
        raise UserError(f"{path}: service {ROUTER!r} is missing")
    try:
        command = spec.get("command") or ""
        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
    except ValueError as err:
        raise UserError(f"{path}: services.router.command: {err} (check ROUTER_EXTRA_ARGS)") from None
    workers = []
    if need_workers:
        # As compose.yaml passes it: ROUTER_WORKER_URLS verbatim after --worker-urls.
        workers = routermod.parse_worker_urls(env.get(routermod.VARIABLE) or "", env.where(routermod.VARIABLE))
    if "--worker-startup-timeout-secs" in argv:
        _positive_int(_flag(argv, "--worker-startup-timeout-secs") or "", "ROUTER_WORKER_STARTUP_TIMEOUT", env)
    policy = _flag(argv, "--policy") or ""
    if policy not in routermod.POLICIES:
        raise UserError(f"{env.where('ROUTER_POLICY')}: choose one of {', '.join(routermod.POLICIES)}")
    bind, port = _published(spec.get("ports") or [], ROUTER, env, path, routermod.CONTAINER_PORT)
    return RouterService(ROUTER, str(spec.get("image") or ""), argv, workers, policy, bind, port,
                         dict(spec.get("healthcheck") or {}), env)


def _flag(argv: list[str], name: str) -> str | None:
    found = None
    for i, token in enumerate(argv):
        if token == name and i + 1 < len(argv):
            found = argv[i + 1]
        elif token.startswith(name + "="):
            found = token.split("=", 1)[1]
    return found


def _bytes(raw, var: str, env: Environment) -> int:
    """A Docker size (``64g``, ``32768m``, ``1gb``, bytes) in bytes, or a one-line refusal naming ``var``."""
    m = re.fullmatch(r"([0-9]{1,15})\s*([bkmg]?)b?", str(raw).strip().lower())
    if not m or int(m.group(1)) == 0:
        shown = env.where(var) if var in env.values else f"{var}={raw!r}"
        raise UserError(f"{shown}: not a size such as 64g or 32768m")
    return int(m.group(1)) * {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2)]


def _positive_int(raw: str, var: str, env: Environment) -> int:
    if not re.fullmatch(r"[0-9]+", raw or "") or int(raw) < 1:
        shown = env.where(var) if var in env.values else f"{var}={raw!r}"
        raise UserError(f"{shown}: must be a positive integer")
    return int(raw)


def _published(ports: list, name: str, env: Environment, path: Path, container_port: int = CONTAINER_PORT) -> tuple[str, int]:
    """The host address and port that publish the container's port (30000, the router's 30080).

    Short syntax only, as compose.yaml writes it: ``[IP:]HOST_PORT:30000``
    (an IPv6 address in brackets).
    """
    var = {"baseline": "BASELINE_PORT", "eagle3": "EAGLE3_PORT", ROUTER: "ROUTER_PORT"}[name]
    for entry in ports:
        if isinstance(entry, dict):  # long syntax, as `docker compose config` prints it
            entry = f"[{entry.get('host_ip') or '0.0.0.0'}]:{entry.get('published', '')}:{entry.get('target')}"
        parts = str(entry).removesuffix("/tcp").rsplit(":", 2)
        if len(parts) < 2 or parts[-1] != str(container_port):
            continue
        ip = parts[0].strip("[]") if len(parts) == 3 else "0.0.0.0"
        host = parts[-2]
        if not re.fullmatch(r"[0-9]+", host) or not 1 <= int(host) <= 65535:
            shown = env.where(var) if var in env.values else f"{var}={host!r}"
            raise UserError(f"{shown}: must be a port number 1-65535")
        if not re.fullmatch(r"[0-9A-Fa-f:.]+", ip):
            raise UserError(f"{env.where('BIND_ADDRESS')}: must be an IP address such as 127.0.0.1 or 0.0.0.0")
        return ip, int(host)
    raise UserError(f"{path}: services.{name} publishes no port for the container's {container_port}")


def _host_path(source: str | None) -> Path:
    path = Path(os.path.expanduser(source or ""))
    return path if path.is_absolute() else (ROOT / path)


def endpoint(name: str, env: Environment | None = None) -> str:
    """The base URL on the host for service ``name``, e.g. ``http://127.0.0.1:30001``."""
    if name == ROUTER:
        return router_service(env, need_workers=False).url
    return service(name, env).url


SECRET_FILES = {"sglang_api_key": "SGLANG_API_KEY_FILE", "hf_token": "HF_TOKEN_FILE"}
"""compose.yaml's secrets, each a file named by a variable (unset: /dev/null, no secret)."""
LEGACY_SECRETS = ("SGLANG_API_KEY", "HF_TOKEN")  # what .env held before the secrets became files


def secret_path(env: Environment, variable: str) -> Path | None:
    """The file ``variable`` names, relative to this directory as Compose takes it; None when unset."""
    raw = env.get(variable) or ""
    if not raw:
        return None
    path = Path(os.path.expanduser(raw))
    return path if path.is_absolute() else ROOT / path


def api_key(env: Environment | None = None) -> str | None:
    """The API key compose.yaml hands the server (SGLANG_API_KEY_FILE), read as the entrypoint reads it; None: none."""
    from sglang_stack.entrypoints import serve

    env = env if env is not None else environment()
    path = secret_path(env, "SGLANG_API_KEY_FILE")
    if path is None:
        return None
    try:
        return serve.api_key({"SGLANG_API_KEY_FILE": str(path)})
    except serve.KeyError_ as err:
        raise UserError(f"{env.where('SGLANG_API_KEY_FILE')}: {err}") from None
