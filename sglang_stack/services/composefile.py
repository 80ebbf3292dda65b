"""compose.yaml as Docker Compose resolves it: which services there are, what each one is, and its settings.

compose.yaml is the one list of services. Each says what the tools need to know about it in an
``x-sglang-stack`` extension field: its ``role``, ``server`` (SGLang on GPUs) or ``router``. A
service without one (a sidecar in an override) is not ours and is left alone. The top level's
``x-sglang-stack.default`` names the service a task takes when none is given. Everything else is
read from the service itself: its command (whether it speculates, and with which drafter), its
published port and the variable that sets it, its GPU reservation, mounts and environment.

Compose reads the files (``variables.config``): ``.env``, the shell, interpolation, overrides
(``COMPOSE_FILE``, compose.override.yaml) and profiles are Compose's own. The commands that run
the services: ``compose``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from sglang_stack import ROOT, yaml_file
from sglang_stack.errors import UserError
from sglang_stack.services.variables import Environment, config, environment, unescape

COMPOSE_FILE = ROOT / "compose.yaml"
EXTENSION = "x-sglang-stack"
SERVER, ROUTER = "server", "router"  # the roles a service's x-sglang-stack gives it
ROLES = (SERVER, ROUTER)
TARGET_MOUNT = "/models/target"
DRAFT_MOUNT = "/models/draft"
CONTAINER_PORT = 30000


# --- the project ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Project:
    """``docker compose config`` of this checkout, every profile's services included."""

    config: dict
    env: Environment
    files: tuple[Path, ...] = ()  # given explicitly; () for what Compose picks (COMPOSE_FILE or the defaults)
    _raw: dict = field(default_factory=dict, compare=False, repr=False)

    def names(self, role: str | None = None) -> tuple[str, ...]:
        """The services that have a role (or this role), in compose.yaml's order as Compose prints it."""
        return tuple(n for n, spec in self.config["services"].items()
                     if _role(spec) and (role is None or _role(spec) == role))

    def role(self, name: str) -> str:
        return _role(self.config["services"].get(name) or {})

    def check(self, name: str, role: str | None = None) -> str:
        """``name`` when it is one of the services (of ``role``); otherwise one line listing them."""
        if role and name in self.names() and self.role(name) != role:
            raise UserError(f"{name!r} is a {self.role(name)} of compose.yaml, not a {role}: choose one of "
                            f"{', '.join(self.names(role)) or 'none'}")
        if name not in self.names(role):
            what = f"compose.yaml's {role}s" if role else "compose.yaml"
            raise UserError(f"unknown service {name!r}: choose one of {', '.join(self.names(role)) or 'none'} ({what})")
        return name

    @property
    def default(self) -> str:
        """The service a task takes when none is named: compose.yaml's ``x-sglang-stack.default``."""
        name = str((self.config.get(EXTENSION) or {}).get("default") or "")
        if not name:
            raise UserError(f"compose.yaml: no {EXTENSION}.default: name the service to take when none is given")
        return self.check(name)

    def raw(self) -> dict:
        """The same files uninterpolated (``--no-interpolate``): which variable each setting comes from."""
        if not self._raw:
            text = config(["--profile", "*", "config", "--no-interpolate", "--no-path-resolution", "--format", "yaml"], self.env, files=self.files)
            self._raw.update(yaml_file.loads(text, "docker compose config --no-interpolate") or {})
        return self._raw

    def variable(self, name: str, flag: str, fallback: str) -> str:
        """The variable that gives ``flag`` its value in service ``name``'s command (``--tp ${TP_SIZE:-8}``)."""
        try:
            command = (self.raw().get("services") or {}).get(name, {}).get("command") or ""
        except UserError:
            return fallback
        text = command if isinstance(command, str) else " ".join(map(str, command))
        m = re.search(rf"{re.escape(flag)}[ =]\S*?\$\{{?([A-Za-z_][A-Za-z0-9_]*)", text)
        return m.group(1) if m else fallback

    def port_variable(self, name: str, container_port: int) -> str:
        """The variable that sets the host port publishing ``container_port`` (``${EAGLE3_PORT:-30001}:30000``)."""
        try:
            ports = (self.raw().get("services") or {}).get(name, {}).get("ports") or []
        except UserError:
            ports = []
        for entry in ports:
            m = re.search(rf"\$\{{([A-Za-z_][A-Za-z0-9_]*)[^}}]*\}}:{container_port}(/tcp)?$", str(entry))
            if m:
                return m.group(1)
        return f"the host port of services.{name}.ports"

    def api_key(self) -> str | None:
        """The API key compose.yaml hands the servers (its sglang_api_key secret), read as the entrypoint reads it."""
        from sglang_stack.entrypoints import serve

        source = ((self.config.get("secrets") or {}).get("sglang_api_key") or {}).get("file") or os.devnull
        if source == os.devnull:
            return None
        try:
            return serve.api_key({"SGLANG_API_KEY_FILE": source})
        except serve.KeyError_ as err:
            raise UserError(f"{self.env.where('SGLANG_API_KEY_FILE')}: {err}") from None

    def secret_file(self, secret: str) -> Path | None:
        """The host file behind one of compose.yaml's secrets; None when it is /dev/null (none)."""
        source = ((self.config.get("secrets") or {}).get(secret) or {}).get("file") or os.devnull
        return None if source == os.devnull else Path(source)

    def compose_files(self) -> tuple[Path, ...]:
        """The files Compose read, for a message: ``files``, else COMPOSE_FILE as Compose read it, else the defaults."""
        if self.files:
            return self.files
        from sglang_stack.services.variables import listed_files

        if listed := listed_files(self.env):
            return listed
        return (COMPOSE_FILE, *[f for f in (ROOT / "compose.override.yaml",) if f.is_file()])


def _role(spec: dict) -> str:
    ext = spec.get(EXTENSION) if isinstance(spec, dict) else None
    return str(ext.get("role") or "") if isinstance(ext, dict) else ""


_projects: dict[int, tuple[Environment, Project]] = {}


def project(env: Environment | None = None, files: tuple[Path, ...] = ()) -> Project:
    """The compose files as Compose resolves them with ``env`` (default: ``.env`` and the shell); read once per ``env``."""
    env = env if env is not None else environment()
    key = id(env) ^ hash(files)
    if key in _projects and _projects[key][0] is env and _projects[key][1].files == files:
        return _projects[key][1]
    text = config(["--profile", "*", "config", "--format", "yaml"], env, files=files)
    data = unescape(yaml_file.loads(text, "docker compose config") or {})
    if not isinstance(data.get("services"), dict):
        raise UserError("compose.yaml: no 'services' mapping")
    for name, spec in data["services"].items():
        role = _role(spec)
        if role and role not in ROLES:
            raise UserError(f"compose.yaml: services.{name}.{EXTENSION}.role: {role!r} should be one of {', '.join(ROLES)}")
    found = Project(data, env, files)
    if len(_projects) > 8:
        _projects.clear()
    _projects[key] = (env, found)
    return found


# --- one service --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Service:
    """What the preflight and the tasks need to know about one server."""

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
    port_variable: str = ""
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
    api_key_file: Path | None = None  # the host file of its sglang_api_key secret; None: no key
    hub_token_file: Path | None = None  # the host file of its hf_token secret; None: no token
    mem_limit: int | None = None  # bytes of host memory the container may use (MEM_LIMIT); None: no cap
    pids_limit: int | None = None  # processes and threads (PIDS_LIMIT); None: no cap
    dockerfile: str = ""  # the Dockerfile `docker compose up` builds the image from when it is missing; "": none

    @property
    def url(self) -> str:
        return _url(self.bind_address, self.host_port)

    def flag(self, name: str) -> str | None:
        """The last value given to ``--name`` in the command line (SGLANG_EXTRA_ARGS may repeat it)."""
        return _flag(self.argv, name)

    @property
    def speculative(self) -> str:
        """The speculative algorithm its command asks SGLang for (``EAGLE3``, ``NGRAM``), or ''."""
        return (self.flag("--speculative-algorithm") or "").upper()

    @property
    def drafter_role(self) -> str:
        """models.lock's role for the drafter ``DRAFTER`` names (``drafter``, ``drafter-mla``); a value that is
        neither is one line naming where it was set."""
        from sglang_stack.entrypoints import drafter

        try:
            return drafter.ROLES[drafter.choice(self.environment)]
        except drafter.Refused as err:
            raise UserError(f"{self.env.where(drafter.SETTING)}: {err}") from None


@dataclass(frozen=True)
class RouterService:
    """A router service as compose.yaml resolves it."""

    name: str
    image: str
    argv: list[str]
    worker_urls: list[str]
    policy: str
    bind_address: str
    host_port: int
    healthcheck: dict
    env: Environment
    port_variable: str = ""

    @property
    def url(self) -> str:
        return _url(self.bind_address, self.host_port)


def _url(host: str, port: int) -> str:
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def parse_duration(text: str) -> float | None:
    """Compose durations: ``15s``, ``30m``, ``1h30m``, ``30m0s``, ``500ms``."""
    text = str(text).strip()
    parts = re.findall(r"([0-9.]+)(ms|us|h|m|s)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    scale = {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 1e-6}
    return sum(float(n) * scale[u] for n, u in parts)


def wait_timeout(svc: Service | RouterService) -> int:
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


def service(name: str, env: Environment | None = None, files: tuple[Path, ...] = ()) -> Service:
    """Resolve server ``name`` from the compose files; a bad value is one line naming its variable."""
    proj = project(env, files)
    env = proj.env
    proj.check(name, SERVER)
    spec = proj.config["services"][name]
    argv = [str(a) for a in spec.get("command") or []]
    mounts = {m.get("target"): m.get("source") for m in spec.get("volumes", []) if isinstance(m, dict)}
    if TARGET_MOUNT not in mounts:
        raise UserError(f"compose.yaml: services.{name} mounts nothing at {TARGET_MOUNT}")

    def number(flag: str, fallback: str, *aliases: str) -> int:
        raw = next((v for v in (_flag(argv, f) for f in (flag, *aliases)) if v is not None), "")
        return _positive_int(raw, proj.variable(name, flag, fallback), env)

    tp = number("--tp", "TP_SIZE", "--tp-size", "--tensor-parallel-size")
    for flag, fallback in (("--speculative-num-steps", "SGLANG_SPEC_NUM_STEPS"),
                           ("--speculative-eagle-topk", "SGLANG_SPEC_EAGLE_TOPK"),
                           ("--speculative-num-draft-tokens", "SGLANG_SPEC_NUM_DRAFT_TOKENS")):
        if flag in argv:
            number(flag, fallback)
    nnodes, node_rank, dist_init_addr = _multinode(proj, name, argv, tp)
    host_network = spec.get("network_mode") == "host"
    if host_network:  # compose.multinode.yaml: nothing is published, SGLang listens on the host itself
        bind, port = _flag(argv, "--host") or "0.0.0.0", CONTAINER_PORT
    else:
        bind, port = _published(proj, spec, name, CONTAINER_PORT)
    reserved = (((spec.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
    devices = reserved or [{}]
    gpu_ids = ",".join(devices[0].get("device_ids") or ["all"])
    if not re.fullmatch(r"all|[A-Za-z0-9-]+(,[A-Za-z0-9-]+)*", gpu_ids):
        raise UserError(f"{env.where('GPU_IDS')}: use 'all' or comma-separated GPU indices or UUIDs, e.g. 0,1,2,3")
    if twice := next((g for i, g in enumerate(gpu_ids.split(",")) if g in gpu_ids.split(",")[:i]), None):
        # Counted twice, one GPU would pass for two (TP_SIZE=2 on GPU_IDS=0,0), and two shards would share it.
        raise UserError(f"{env.where('GPU_IDS')}: names GPU {twice} twice; each GPU once, e.g. 0,1,2,3")
    volumes = spec.get("volumes") or []
    build = spec.get("build") if isinstance(spec.get("build"), dict) else {}
    return Service(
        name=name,
        dockerfile=str(Path(build.get("context") or ".") / build["dockerfile"]) if build.get("dockerfile") else "",
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
        port_variable="" if host_network else proj.port_variable(name, CONTAINER_PORT),
        gpus=bool(reserved),
        ulimits=dict(spec.get("ulimits") or {}),
        files=proj.compose_files(),
        nnodes=nnodes,
        node_rank=node_rank,
        dist_init_addr=dist_init_addr,
        host_network=host_network,
        ipc=str(spec.get("ipc") or ""),
        shm_bytes=_bytes(spec["shm_size"], "SHM_SIZE", env) if spec.get("shm_size") not in (None, "") else None,
        hardening={"privileged": spec.get("privileged") is True, "cap_add": list(spec.get("cap_add") or []),
                   "security_opt": list(spec.get("security_opt") or []), "read_only": spec.get("read_only") is True,
                   "host_mounts": [m.get("source") for m in volumes if isinstance(m, dict) and m.get("type") == "bind"
                                   and m.get("target") not in (TARGET_MOUNT, DRAFT_MOUNT)],
                   "pid": str(spec.get("pid") or ""),
                   "user": str(spec.get("user") or ""),  # empty: the image's own (uid 10001)
                   "devices": [d if isinstance(d, str) else f"{d.get('source')}:{d.get('target')}"
                               for d in spec.get("devices") or []]},
        api_key_file=proj.secret_file("sglang_api_key") if "sglang_api_key" in _secret_names(spec) else None,
        hub_token_file=proj.secret_file("hf_token") if "hf_token" in _secret_names(spec) else None,
        mem_limit=_bytes(spec["mem_limit"], "MEM_LIMIT", env) if spec.get("mem_limit") not in (None, "", "0", 0) else None,
        pids_limit=int(spec["pids_limit"]) if isinstance(spec.get("pids_limit"), int) and spec["pids_limit"] > 0 else None,
    )


def _secret_names(spec: dict) -> list[str]:
    return [s if isinstance(s, str) else str(s.get("source")) for s in spec.get("secrets") or []]


def router_service(env: Environment | None = None, files: tuple[Path, ...] = (), *, name: str | None = None,
                   need_workers: bool = True) -> RouterService:
    """Resolve a router (default: the only one) from the compose files; a bad ROUTER_* value is one line naming it."""
    from sglang_stack.entrypoints import router as routermod

    proj = project(env, files)
    env = proj.env
    routers = proj.names(ROUTER)
    if name is None:
        if not routers:
            raise UserError(f"compose.yaml: no service with {EXTENSION}.role: router")
        name = routers[0]
    proj.check(name, ROUTER)
    spec = proj.config["services"][name]
    argv = [str(a) for a in spec.get("command") or []]
    workers = []
    if need_workers:
        # As compose.yaml passes it: ROUTER_WORKER_URLS verbatim after --worker-urls.
        workers = routermod.parse_worker_urls(env.get(routermod.VARIABLE) or "", env.where(routermod.VARIABLE))
    if "--worker-startup-timeout-secs" in argv:
        _positive_int(_flag(argv, "--worker-startup-timeout-secs") or "",
                      proj.variable(name, "--worker-startup-timeout-secs", "ROUTER_WORKER_STARTUP_TIMEOUT"), env)
    policy = _flag(argv, "--policy") or ""
    if policy not in routermod.POLICIES:
        raise UserError(f"{env.where(proj.variable(name, '--policy', 'ROUTER_POLICY'))}: choose one of {', '.join(routermod.POLICIES)}")
    bind, port = _published(proj, spec, name, routermod.CONTAINER_PORT)
    return RouterService(name, str(spec.get("image") or ""), argv, workers, policy, bind, port,
                         dict(spec.get("healthcheck") or {}), env, proj.port_variable(name, routermod.CONTAINER_PORT))


def resolve(name: str, env: Environment | None = None) -> Service | RouterService:
    """SERVICE as compose.yaml resolves it: a router's settings, or a server's; resolved once and handed on."""
    proj = project(env)
    proj.check(name)
    return router_service(proj.env, name=name) if proj.role(name) == ROUTER else service(name, proj.env)


def endpoint(name: str, env: Environment | None = None) -> str:
    """The base URL on the host for service ``name``, e.g. ``http://127.0.0.1:30001``."""
    proj = project(env)
    proj.check(name)
    if proj.role(name) == ROUTER:
        return router_service(proj.env, name=name, need_workers=False).url
    return service(name, proj.env).url


def api_key(env: Environment | None = None) -> str | None:
    """The API key compose.yaml hands the servers (SGLANG_API_KEY_FILE), read as the entrypoint reads it; None: none."""
    return project(env).api_key()


def model_dirs(env: Environment | None = None) -> dict[str, Path]:
    """The host directories the servers mount as the target model and as the drafter, by models.lock role
    (``target``, and ``drafter`` or ``drafter-mla`` as ``DRAFTER`` says)."""
    proj = project(env)
    out: dict[str, Path] = {}
    for name in proj.names(SERVER):
        svc = service(name, proj.env)
        out.setdefault("target", svc.model_dir)
        if svc.draft_dir is not None:
            out.setdefault(svc.drafter_role, svc.draft_dir)
    return out


def _multinode(proj: Project, name: str, argv: list[str], tp: int) -> tuple[int, int, str]:
    """NNODES, NODE_RANK, DIST_INIT_ADDR as SGLang will get them, checked the way SGLang would refuse them."""
    env = proj.env
    nnodes_var = proj.variable(name, "--nnodes", "NNODES")
    rank_var = proj.variable(name, "--node-rank", "NODE_RANK")
    addr_var = proj.variable(name, "--dist-init-addr", "DIST_INIT_ADDR")
    tp_var = proj.variable(name, "--tp", "TP_SIZE")
    nnodes = _positive_int(_flag(argv, "--nnodes") or "1", nnodes_var, env)
    raw_rank = _flag(argv, "--node-rank") or "0"
    if not re.fullmatch(r"[0-9]+", raw_rank) or int(raw_rank) >= nnodes:
        shown = env.where(rank_var) if rank_var in env.values else f"{rank_var}={raw_rank!r}"
        raise UserError(f"{shown}: must be 0..{nnodes - 1} (NNODES={nnodes})")
    addr = _flag(argv, "--dist-init-addr") or ""
    if nnodes > 1:
        if not addr:
            raise UserError(f"{env.where(addr_var)}: NNODES={nnodes} needs DIST_INIT_ADDR=HOST:PORT of node rank 0, the same on every node")
        if not re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}", addr) or not 1 <= int(addr.rsplit(":", 1)[1]) <= 65535:
            raise UserError(f"{env.where(addr_var)}: must be HOST:PORT, e.g. 10.0.0.11:20000")
        if tp % nnodes:
            raise UserError(f"{env.where(tp_var)}: the total tensor-parallel size must divide by NNODES={nnodes} (SGLang refuses it)")
    return nnodes, int(raw_rank), addr


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


def _published(proj: Project, spec: dict, name: str, container_port: int) -> tuple[str, int]:
    """The host address and port that publish the container's port (30000, a router's 30080).

    Compose has checked both already (``Invalid hostPort``); here only which entry it is, and that it is one port:
    with 0 or a range Docker picks the port, and the service's URL would be a guess.
    """
    for entry in spec.get("ports") or []:
        if isinstance(entry, dict) and str(entry.get("target")) == str(container_port) and entry.get("published"):
            published = str(entry["published"])
            if not published.isdigit() or int(published) == 0:
                var = proj.port_variable(name, container_port)
                shown = proj.env.where(var) if var in proj.env.values else var
                raise UserError(f"{shown}: publishes {published}, and Docker would pick the port: give one port "
                                "from 1 to 65535")
            return str(entry.get("host_ip") or "0.0.0.0"), int(published)
    raise UserError(f"compose.yaml: services.{name} publishes no port for the container's {container_port}")


def _host_path(source: str | None) -> Path:
    path = Path(os.path.expanduser(source or ""))
    return path if path.is_absolute() else (ROOT / path)


def built_profile(svc: Service | None) -> tuple[str | None, str]:
    """The profile whose Dockerfile compose builds ``svc`` from when its image is missing (None: not one of this
    checkout's), and a refusal when that Dockerfile does not exist."""
    from sglang_stack.lock import profiles

    if svc is None or not svc.dockerfile:
        return None, ""
    path = Path(svc.dockerfile)
    if not path.is_file():
        try:
            names = ", ".join(p for p, prof in profiles.available().items() if not prof.default)
        except UserError:
            names = ""
        return None, (f"{svc.env.where(profiles.ENV)}: compose would build {profiles.display(path)}, which does not "
                      f"exist; leave it unset for the root's profile" + (f", or name one of profiles/: {names}" if names else ""))
    try:
        known = profiles.available()
    except UserError as err:
        return None, str(err)
    return next((name for name, prof in known.items() if prof.dockerfile.resolve() == path.resolve()), None), ""


def default_profile() -> str:
    """The root's profile name (its SGLang release), or "" where its lock cannot be read."""
    from sglang_stack.lock import profiles

    try:
        return profiles.default().name
    except UserError:
        return ""
