"""Kubernetes manifests from versions.lock and a small values file.

    invoke k8s --out DIR [--values deploy/k8s/values.yaml]

Writes ``DIR/sglang.yaml`` (a StatefulSet and its headless Service, or a
LeaderWorkerSet when ``nnodes`` > 1) and ``DIR/router.yaml`` (SGLang's router:
a Deployment and its Service). Pure and offline, like ``invoke render``: the
templates in ``deploy/k8s/`` go through the same Jinja environment as the
Dockerfile (StrictUndefined: a missing value fails the render), with one
context object, ``k8s``. Nothing secret is rendered: the API key and the
Hugging Face token are Secret references.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from sglang_stack import ROOT, yaml_file
from sglang_stack.atomic import prepare_dir, write as atomic_write
from sglang_stack.errors import UserError
from sglang_stack.image.lock import Lock
from sglang_stack.image.render import environment
from sglang_stack.services.router import POLICIES

TEMPLATE_DIR = ROOT / "deploy" / "k8s"
VALUES = TEMPLATE_DIR / "values.yaml"
OUTPUTS = {"sglang.yaml": "sglang.yaml.j2", "router.yaml": "router.yaml.j2"}
DIST_PORT = 20000  # torch.distributed's rendezvous on the leader, beside SGLang's 30000
STARTUP_BUDGET_S = 30 * 60  # the same 30 minutes as compose.yaml's HEALTH_START_PERIOD
PROBE_PERIOD_S = 15

HEADER = """\
# GENERATED FILE: do not edit. Rendered by `invoke k8s` from deploy/k8s/*.j2, versions.lock
# and a values file (deploy/k8s/values.yaml unless --values names another)."""

# A DNS-1123 label: names, namespaces, claims and Secrets.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# [registry/]repository[:tag][@sha256:digest]
_IMAGE = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$")
_SUBPATH = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")


@dataclass(frozen=True)
class Context:
    """What the templates see as ``k8s``."""

    name: str
    namespace: str
    service: str
    replicas: int
    nnodes: int
    tp_size: int
    gpus_per_pod: int
    image: str
    router_image: str
    model_claim: str
    model_subpath: str
    draft_subpath: str
    shm_size: str
    secret: str
    args: tuple[str, ...]
    extra_args: tuple[str, ...]
    router_args: tuple[str, ...]
    router_replicas: int
    sglang_version: str
    router_version: str
    dist_port: int = DIST_PORT
    startup_failures: int = STARTUP_BUDGET_S // PROBE_PERIOD_S
    header: str = HEADER


def load_values(path: Path = VALUES) -> dict:
    data = yaml_file.load(path)
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of values")
    return data


def context(lock: Lock, values: dict, where: str = "values.yaml") -> Context:
    """Check every value (one line naming the key) and derive the rest from the lock."""

    def get(key: str, kind: type, default=None):
        value = values.get(key, default)
        if value is None or isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            raise UserError(f"{where}: {key}: {value!r} should be a {'number' if kind is int else kind.__name__}")
        return value

    def positive(key: str, default=None) -> int:
        value = get(key, int, default)
        if value < 1:
            raise UserError(f"{where}: {key}: {value} must be 1 or more")
        return value

    def name(key: str, default=None, empty: bool = False) -> str:
        value = get(key, str, default)
        if not (empty and value == "") and not _NAME.match(value):
            raise UserError(f"{where}: {key}: {value!r} is not a Kubernetes name (lowercase letters, digits, '-')")
        return value

    known = {"namespace", "service", "replicas", "nnodes", "tp_size", "image", "router_image", "model_claim",
             "model_subpath", "draft_subpath", "served_model_name", "spec_num_steps", "spec_eagle_topk",
             "spec_num_draft_tokens", "shm_size", "extra_args", "secret", "router"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"{where}: {unknown[0]}: not a known value (see deploy/k8s/values.yaml)")
    service = get("service", str, "eagle3")
    if service not in ("baseline", "eagle3"):
        raise UserError(f"{where}: service: {service!r} should be baseline or eagle3")
    nnodes, tp = positive("nnodes", 1), positive("tp_size", 8)
    if tp % nnodes:
        raise UserError(f"{where}: tp_size: {tp} does not divide by nnodes {nnodes} (SGLang refuses it)")
    images = {}
    for key, default in (("image", lock.tag), ("router_image", lock.router_tag)):
        images[key] = get(key, str, "") or default
        if not _IMAGE.match(images[key]):
            raise UserError(f"{where}: {key}: {images[key]!r} is not an image reference (repository[:tag][@sha256:...])")
    shm = str(values.get("shm_size", "64Gi"))
    if not _QUANTITY.match(shm):
        raise UserError(f"{where}: shm_size: {shm!r} is not a quantity such as 64Gi")
    subpaths = {}
    for key in ("model_subpath", "draft_subpath"):
        subpaths[key] = get(key, str, "")
        if not _SUBPATH.match(subpaths[key]) or ".." in subpaths[key].split("/"):
            raise UserError(f"{where}: {key}: {subpaths[key]!r} is not a relative path inside the claim")
    served = get("served_model_name", str, "kimi-k2.5")
    extra = get("extra_args", list, [])
    if not all(isinstance(a, str) for a in extra):
        raise UserError(f"{where}: extra_args: every item must be a string, e.g. [\"--mem-fraction-static\", \"0.85\"]")
    router = get("router", dict, {})
    policy = router.get("policy", "cache_aware")
    if policy not in POLICIES:
        raise UserError(f"{where}: router.policy: {policy!r} should be one of {', '.join(POLICIES)}")
    router_replicas = router.get("replicas", 1)
    if not isinstance(router_replicas, int) or isinstance(router_replicas, bool) or router_replicas < 1:
        raise UserError(f"{where}: router.replicas: {router_replicas!r} must be 1 or more")

    args = ["--model-path", "/models/target", "--served-model-name", served, "--host", "0.0.0.0", "--port", "30000",
            "--tp", str(tp), "--trust-remote-code", "--tool-call-parser", "kimi_k2", "--reasoning-parser", "kimi_k2"]
    if service == "eagle3":
        args += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/models/draft"]
        for key, flag, default in (("spec_num_steps", "--speculative-num-steps", 3), ("spec_eagle_topk", "--speculative-eagle-topk", 1),
                                   ("spec_num_draft_tokens", "--speculative-num-draft-tokens", 4)):
            args += [flag, str(positive(key, default))]
    replicas = positive("replicas", 1)
    namespace, workload = name("namespace", "sglang"), f"sglang-{service}"
    # Each replica set's leader (or only pod) has a stable DNS name through the headless Service.
    workers = ",".join(f"http://{workload}-{i}.{workload}.{namespace}.svc.cluster.local:30000" for i in range(replicas))
    router_args = ("--host", "0.0.0.0", "--port", "30080", "--worker-urls", workers, "--policy", policy,
                   "--health-check-interval-secs", "15", "--health-check-timeout-secs", "30", "--health-failure-threshold", "3")
    return Context(
        name=workload,
        namespace=namespace,
        service=service,
        replicas=replicas,
        nnodes=nnodes,
        tp_size=tp,
        gpus_per_pod=tp // nnodes,
        image=images["image"],
        router_image=images["router_image"],
        model_claim=name("model_claim"),
        model_subpath=subpaths["model_subpath"],
        draft_subpath=subpaths["draft_subpath"],
        shm_size=shm,
        secret=name("secret", "", empty=True),
        args=tuple(args),
        extra_args=tuple(extra),
        router_args=router_args,
        router_replicas=router_replicas,
        sglang_version=lock.sglang.version,
        router_version=lock.router.version,
    )


def render_text(lock: Lock, values: dict, where: str = "values.yaml", template_dir: Path = TEMPLATE_DIR) -> dict[str, str]:
    """File name -> manifest text."""
    ctx = context(lock, values, where)
    env = environment(template_dir)
    out = {}
    for output, template in OUTPUTS.items():
        try:
            out[output] = env.get_template(template).render(k8s=ctx)
        except jinja2.UndefinedError as err:
            raise UserError(f"{template_dir / template}: {err.message}") from None
        except jinja2.TemplateSyntaxError as err:
            raise UserError(f"{err.filename or template_dir / template}:{err.lineno}: {err.message}") from None
    return out


def write(lock: Lock, out_dir: Path, values_path: Path = VALUES) -> list[Path]:
    """Render every manifest into ``out_dir``, each file atomically."""
    texts = render_text(lock, load_values(values_path), values_path.name)
    prepare_dir(out_dir, "--out")
    written = []
    for name, text in texts.items():
        atomic_write(out_dir / name, text)
        written.append(out_dir / name)
    return written
