"""Kubernetes manifests from versions.lock and a small values file.

    invoke k8s --out DIR [--values deploy/k8s/values.yaml]

Writes, into ``DIR``:

- ``namespace.yaml``: the Namespace, labelled with the PodSecurity level the pods need
  (unless ``create_namespace: false``);
- ``sglang.yaml``: the servers: a StatefulSet and its headless Service, or a LeaderWorkerSet
  when ``nnodes`` > 1; a PodDisruptionBudget;
- ``router.yaml``: SGLang's router: its ServiceAccount, Role and RoleBinding (to watch the
  server pods), Deployment, Service, and a PodDisruptionBudget when it has several replicas;
- ``monitoring.yaml``: PodMonitors, with ``metrics.pod_monitor``.

Pure and offline, like ``invoke render``: the templates in ``deploy/k8s/`` go through the
same Jinja environment as the Dockerfile (StrictUndefined: a missing value fails the
render), with one context object, ``k8s``. Nothing secret is rendered: the API key and the
Hugging Face token are Secret keys mounted as files. docs/kubernetes.md explains each choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jinja2

from sglang_stack import ROOT, yaml_file
from sglang_stack.atomic import prepare_dir, write_all
from sglang_stack.errors import UserError
from sglang_stack.lock.lockfile import Lock
from sglang_stack.templates import environment
from sglang_stack.services import k8s_values

TEMPLATE_DIR = ROOT / "deploy" / "k8s"
VALUES = TEMPLATE_DIR / "values.yaml"
OUTPUTS = {"namespace.yaml": "namespace.yaml.j2", "sglang.yaml": "sglang.yaml.j2", "router.yaml": "router.yaml.j2",
           "monitoring.yaml": "monitoring.yaml.j2"}
SERVER_PORT, DIST_PORT, ROUTER_PORT, ROUTER_METRICS_PORT = 30000, 20000, 30080, 29000
PROBE_PERIOD_S, PRE_STOP_S = k8s_values.PROBE_PERIOD_S, k8s_values.PRE_STOP_S
SECRET_DIR = "/run/secrets/sglang-stack"  # not /run/secrets: /var/run/secrets/kubernetes.io lives beside it
LWS_LEADER_LABEL = ("leaderworkerset.sigs.k8s.io/worker-index", "0")
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # GPU Feature Discovery, in MiB

HEADER = """\
# GENERATED FILE: do not edit. Rendered by `invoke k8s` from deploy/k8s/*.j2, versions.lock
# and a values file (deploy/k8s/values.yaml unless --values names another)."""


@dataclass(frozen=True)
class Context:
    """What the templates see as ``k8s``: the checked values (``v``) and what follows from them."""

    v: dict
    name: str
    image: str
    router_image: str
    gpus_per_pod: int
    args: tuple[str, ...]
    speculative: str  # the server's --speculative-algorithm, or ''
    drafter: bool  # whether it mounts a drafter (/models/draft)
    router_args: tuple[str, ...]
    env: tuple[dict, ...]
    resources: dict
    server_labels: dict
    server_selector: dict
    """The pods the router sends requests to and the servers' PDB counts: for a LeaderWorkerSet, its leaders."""
    affinity: dict
    pod_security: str
    startup_failures: int
    grace_seconds: int
    router_grace_seconds: int
    multinode: bool
    rdma: bool
    host_network: bool
    sglang_version: str
    router_version: str  # the pinned router distribution and its version, as the lock names them
    accept_length_min: float  # the alert's threshold on sglang:spec_accept_length (eagle3)
    sglang_port: int = SERVER_PORT
    dist_port: int = DIST_PORT
    router_port: int = ROUTER_PORT
    router_metrics_port: int = ROUTER_METRICS_PORT
    probe_period: int = PROBE_PERIOD_S
    pre_stop: int = PRE_STOP_S
    secret_dir: str = SECRET_DIR
    api_key_file: str = f"{SECRET_DIR}/sglang_api_key"
    lws_exclusive: str = LWS_EXCLUSIVE
    header: str = HEADER


def load_values(path: Path = VALUES) -> dict:
    data = yaml_file.load(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of values")
    return data


def _server(v: dict):
    """The server ``v["service"]`` as compose.yaml defines it, with the values' numbers for its variables.

    Compose resolves its command (``--tp ${TP_SIZE:-8}`` ...) from compose.yaml alone, neither this
    host's .env nor its shell, so a pod runs what ``docker compose up`` of that service would.
    """
    from sglang_stack.services import composefile
    from sglang_stack.services.variables import Environment

    files = (composefile.COMPOSE_FILE,)
    proj = composefile.project(Environment({}), files)
    name = v["service"]
    given = {"--tp": v["tp_size"], "--served-model-name": v["served_model_name"],
             "--speculative-num-steps": v["spec_num_steps"], "--speculative-eagle-topk": v["spec_eagle_topk"],
             "--speculative-num-draft-tokens": v["spec_num_draft_tokens"]}
    values = {proj.variable(name, flag, flag): str(value) for flag, value in given.items()}
    return composefile.service(name, Environment(values, dict.fromkeys(values, "values")), files)


def _router_args(v: dict, name: str, selector: dict) -> list[str]:
    # Health checks go to /health_generate, which runs a one-token generation: the servers'
    # /health is the cheap liveness answer here (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=false).
    args = ["--host", "0.0.0.0", "--port", str(ROUTER_PORT), "--policy", v["router_policy"],
            "--health-check-endpoint", "/health_generate", "--health-check-interval-secs", "15",
            "--health-check-timeout-secs", "30", "--health-failure-threshold", "3",
            "--prometheus-port", str(ROUTER_METRICS_PORT), "--shutdown-grace-period-secs", str(v["router_drain_seconds"])]
    if v["router_discovery"]:
        # sglang-router's own Kubernetes discovery: Running and Ready pods that match are added,
        # deleted ones removed, so a scale, a restart or a rescheduled pod is followed.
        args += ["--service-discovery", "--selector", *(f"{k}={val}" for k, val in selector.items()),
                 "--service-discovery-port", str(SERVER_PORT), "--service-discovery-namespace", v["namespace"]]
    else:
        # Each replica's leader (or only pod) has a stable DNS name through the headless Service.
        workers = ",".join(f"http://{name}-{i}.{name}.{v['namespace']}.svc.cluster.local:{SERVER_PORT}"
                           for i in range(v["replicas"]))
        args += ["--worker-urls", workers]
    return args + v["router_extra_args"]


def _env(v: dict) -> list[dict]:
    env = {
        "SGLANG_HEALTH_CHECK_TIMEOUT": "20",
        # /health answers without generating (still 503 while loading or draining), for the
        # liveness probe; /health_generate generates, for readiness and the router.
        "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": "/home/sglang/.cache/huggingface",
        "TRITON_CACHE_DIR": "/home/sglang/.cache/triton",
        # As compose.yaml: the entrypoint resolves it at start (entrypoints/pcie_ipc.py); FlashInfer's autotune
        # results stay in the cache claim, where the preflight's verdict is recorded too.
        "PCIE_ALLREDUCE": v["pcie_allreduce"],
        "FLASHINFER_AUTOTUNE_DIR": "/home/sglang/.cache/flashinfer/autotune",
    }
    if v["secret"]:
        env["SGLANG_API_KEY_FILE"] = f"{SECRET_DIR}/sglang_api_key"
        env["HF_TOKEN_PATH"] = f"{SECRET_DIR}/hf_token"
    env.update(v["nccl"])
    return [{"name": k, "value": val} for k, val in env.items()]


def _affinity(v: dict) -> dict:
    if not v["min_gpu_memory_mib"]:
        return {}
    term = {"key": GPU_MEMORY_LABEL, "operator": "Gt", "values": [str(v["min_gpu_memory_mib"] - 1)]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [term]}]}}}


def context(lock: Lock, values: dict, where: str = "values.yaml", pinned: dict[str, str] | None = None,
            images: dict[str, str] | None = None) -> Context:
    """Check every value (one line naming the key) and derive the rest from the lock. ``pinned`` maps a lock's tag to
    the registry digest known for it (``REPOSITORY@sha256:...``): with no image in the values, the pods run that.
    ``images`` (``image``, ``router_image``: by digest, from the command line) come before the values."""
    pinned, images = pinned or {}, images or {}
    v = k8s_values.read(values, where)
    name = f"sglang-{v['service']}"
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": "server", "app.kubernetes.io/part-of": "sglang-stack"}
    multinode = v["nnodes"] > 1
    selector = {**labels, **dict([LWS_LEADER_LABEL])} if multinode else dict(labels)
    rdma = v["rdma"]["enabled"]
    server = _server(v)
    return Context(
        v=v,
        name=name,
        image=images.get("image") or v["image"] or pinned.get(lock.tag) or lock.tag,
        router_image=images.get("router_image") or v["router_image"] or pinned.get(lock.router_tag) or lock.router_tag,
        gpus_per_pod=v["tp_size"] // v["nnodes"],
        args=tuple(server.argv + ["--enable-metrics"] + v["extra_args"]),
        speculative=server.speculative,
        drafter=server.draft_dir is not None,
        router_args=tuple(_router_args(v, name, selector)),
        env=tuple(_env(v)),
        # the RDMA device plugin's resource (it also puts /dev/infiniband into the pod)
        resources={**v["resources"], "nvidia.com/gpu": v["tp_size"] // v["nnodes"],
                   **({v["rdma"]["resource"]: v["rdma"]["count"]} if rdma else {})},
        server_labels=labels,
        server_selector=selector,
        affinity=_affinity(v),
        # IPC_LOCK and a host network are outside what PodSecurity baseline admits.
        pod_security="privileged" if rdma else "restricted",
        startup_failures=max(1, v["startup_minutes"] * 60 // PROBE_PERIOD_S),
        grace_seconds=PRE_STOP_S + v["drain_seconds"] + 30,
        router_grace_seconds=PRE_STOP_S + v["router_drain_seconds"] + 15,
        multinode=multinode,
        rdma=rdma,
        host_network=rdma and v["rdma"]["network"] == "host",
        sglang_version=lock.sglang.version,
        router_version=f"{lock.router.name} {lock.router.version}",
        accept_length_min=_accept_length_min(v),
    )


def _accept_length_min(v: dict) -> float:
    """The values' threshold, else what `invoke acceptance` expects of the drafter, else its floor."""
    from sglang_stack.services import models

    if v["accept_length_min"] is not None:
        return float(v["accept_length_min"])
    drafter = models.load().get("drafter")
    if drafter and drafter.acceptance:
        return models.Expectation(**drafter.acceptance).minimum
    return models.FLOOR


def render_text(lock: Lock, values: dict, where: str = "values.yaml", template_dir: Path = TEMPLATE_DIR,
                pinned: dict[str, str] | None = None, images: dict[str, str] | None = None) -> dict[str, str]:
    """File name -> manifest text; a file with no object in it (namespace, monitoring when off) is left out."""
    ctx = context(lock, values, where, pinned, images)
    env = environment(template_dir)
    out = {}
    for output, template in OUTPUTS.items():
        try:
            text = env.get_template(template).render(k8s=ctx)
        except jinja2.UndefinedError as err:
            raise UserError(f"{template_dir / template}: {err.message}") from None
        except jinja2.TemplateSyntaxError as err:
            raise UserError(f"{err.filename or template_dir / template}:{err.lineno}: {err.message}") from None
        if "\nkind: " in text:
            out[output] = text
    return out


def write(lock: Lock, out_dir: Path, values_path: Path = VALUES, pinned: dict[str, str] | None = None,
          images: dict[str, str] | None = None) -> list[Path]:
    """Render every manifest into ``out_dir``, each file atomically; remove those this render no longer makes."""
    texts = render_text(lock, load_values(values_path), values_path.name, pinned=pinned, images=images)
    # Only files an earlier render wrote are replaced: anything else of that name is the user's, and stays.
    for name in texts:
        target = out_dir / name
        if target.is_symlink() or (target.exists() and not _ours(target)):
            raise UserError(f"{target}: not a file `invoke k8s` wrote (a link, or no generated header): move it, or "
                            "render into another --out")
    prepare_dir(out_dir, "--out", need=64 << 10)
    # The set whole or not at all: `kubectl apply -f DIR` must never meet half a render.
    write_all({out_dir / name: text for name, text in texts.items()})
    written = [out_dir / name for name in texts]
    for name in set(OUTPUTS) - set(texts):
        stale = out_dir / name
        if not stale.is_symlink() and stale.is_file() and _ours(stale):
            stale.unlink()  # a file of an earlier render, which `kubectl apply -f DIR` would still apply
    return written


def _ours(path: Path) -> bool:
    """Whether ``path`` is a regular file that begins with the header every render writes."""
    first = HEADER.splitlines()[0].encode()
    try:
        with open(path, "rb") as handle:
            return path.is_file() and handle.read(len(first)) == first
    except OSError:
        return False
