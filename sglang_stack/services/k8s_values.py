"""The values file of `invoke k8s`: every key, its type and its range, each problem one line naming it.

``read(values, where)`` returns the checked values as plain Python objects, with the
defaults of deploy/k8s/values.yaml filled in for what a trimmed file leaves out. The
rules that join several values (RDMA for several nodes, memory that covers the shm)
live here too, so a refusal names every key it weighs.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field

from sglang_stack.errors import UserError
from sglang_stack.entrypoints.router import POLICIES

# A DNS-1123 label: names, namespaces, claims and Secrets.
NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# [registry/]repository[:tag][@sha256:digest]
IMAGE = re.compile(r"[A-Za-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)*(:[\w][\w.-]{0,127})?(@sha256:[0-9a-f]{64})?")
QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|K|M|G|T)?")
SUBPATH = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")
# A label key: an optional DNS prefix and a name (the node labels of GFD, topology keys).
LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
HOST_MEMORY_MIN = 32 * 2**30  # what SGLang holds in host memory beside the shm, at the least
# The widths of the Kubernetes API's integer fields (replicas, failureThreshold: int32;
# terminationGracePeriodSeconds: int64): a value past them renders, and the API server refuses it.
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1
PROBE_PERIOD_S = 15
PRE_STOP_S = 15  # before SIGTERM: time for the router and the EndpointSlices to drop a terminating pod
GRACE_MARGIN_S = PRE_STOP_S + 30  # the most a grace period adds to a drain (k8s.py)

SECTIONS = {
    "resources": {"cpu", "memory", "ephemeral_storage"},
    "placement": {"min_gpu_memory_mib", "node_selector", "tolerations", "priority_class", "exclusive_topology",
                  "topology_spread"},
    "lifecycle": {"startup_minutes", "drain_seconds", "cache_size", "cache_storage_class"},
    "rdma": {"enabled", "resource", "count", "network", "allow_tcp"},
    "metrics": {"pod_monitor", "accept_length_min"},
    "network_policy": {"enabled", "from_namespaces", "egress_to"},
    "router": {"replicas", "policy", "discovery", "drain_seconds", "extra_args"},
}
TOP = {"namespace", "create_namespace", "service", "replicas", "nnodes", "tp_size", "image", "router_image",
       "model_claim", "model_subpath", "draft_subpath", "served_model_name", "spec_num_steps", "spec_eagle_topk",
       "spec_num_draft_tokens", "shm_size", "extra_args", "secret", "nccl", "pcie_allreduce", "preflight_probe",
       *SECTIONS}


def quantity_bytes(text: str) -> float:
    """``64Gi`` -> bytes (``QUANTITY`` already matched)."""
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", text).groups()
    return float(number) * UNITS.get(unit, 1)


@dataclass
class Reader:
    """Typed access to one mapping of the values file; each error names ``where: key``."""

    data: dict
    where: str
    prefix: str = ""
    seen: set = field(default_factory=set)

    def fail(self, key: str, message: str) -> UserError:
        return UserError(f"{self.where}: {self.prefix}{key}: {message}")

    def get(self, key: str, kind: type | tuple, default=None):
        value = self.data.get(key, default)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if value is None or isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            names = " or ".join("a number" if k is int else "true or false" if k is bool else f"a {k.__name__}" for k in kinds)
            raise self.fail(key, f"{value!r} should be {names}")
        return value

    def integer(self, key: str, default: int, minimum: int = 1, maximum: int = INT32_MAX) -> int:
        value = self.get(key, int, default)
        if value < minimum:
            raise self.fail(key, f"{value} must be {minimum} or more")
        if value > maximum:
            raise self.fail(key, f"{value} is more than the {maximum} the Kubernetes API field it sets can hold")
        return value

    def name(self, key: str, default: str = "", empty: bool = False) -> str:
        value = self.get(key, str, default)
        if not (empty and value == "") and not NAME.fullmatch(value):
            raise self.fail(key, f"{value!r} is not a Kubernetes name (lowercase letters, digits, '-')")
        return value

    def quantity(self, key: str, default: str, zero: str = "") -> str:
        """A quantity above 0; or, where ``zero`` says what 0 means, 0 spelled "0"."""
        value = str(self.data.get(key, default))
        if not QUANTITY.fullmatch(value):
            raise self.fail(key, f"{value!r} is not a quantity such as 64Gi or 500m")
        if zero and quantity_bytes(value) == 0:
            return "0"
        if not quantity_bytes(value) > 0:  # a zero request is no request: the pod would not be QoS Guaranteed
            raise self.fail(key, f"{value!r} must be more than 0 (equal requests and limits above 0 keep the pod Guaranteed)")
        return value

    def strings(self, key: str) -> list[str]:
        from sglang_stack.redact import key_flag

        value = self.get(key, list, [])
        if not all(isinstance(a, str) for a in value):
            raise self.fail(key, "every item must be a string, e.g. [\"--flag\", \"value\"]")
        if flag := next((a for a in value if key_flag(a)), None):
            raise self.fail(key, f"{flag.split('=', 1)[0]!r} is taken as {key_flag(flag)}: a key there would be "
                            "rendered in clear; the Secret (values: secret) carries it as a file")
        return value

    def section(self, key: str) -> Reader:
        value = self.get(key, dict, {})
        unknown = sorted(set(value) - SECTIONS[key])
        if unknown:
            raise UserError(f"{self.where}: {key}.{unknown[0]}: not a known value (see deploy/k8s/values.yaml)")
        return Reader(value, self.where, f"{key}.")


def _labels(reader: Reader, key: str) -> dict[str, str]:
    value = reader.get(key, dict, {})
    for k, v in value.items():
        if not isinstance(k, str) or not LABEL_KEY.fullmatch(k) or not isinstance(v, str) or not LABEL_VALUE.fullmatch(v):
            raise reader.fail(key, f"{k!r}: {v!r} is not a node label and value (quote numbers: \"8\")")
    return value


def _objects(reader: Reader, key: str, required: set[str]) -> list[dict]:
    value = reader.get(key, list, [])
    for item in value:
        if not isinstance(item, dict) or not required <= set(item):
            raise reader.fail(key, f"{item!r}: each item is a mapping with {', '.join(sorted(required))}")
    return value


def _servers():
    """compose.yaml's own project (no .env, no shell): the servers a values file may name."""
    from sglang_stack.services import composefile
    from sglang_stack.services.variables import Environment

    return composefile.project(Environment({}), (composefile.COMPOSE_FILE,))


def nccl_variables() -> list[str]:
    """The NCCL_*/GLOO_* variables compose.yaml passes through to its servers: the same set is accepted here."""
    from sglang_stack.services.composefile import SERVER

    proj = _servers()
    names = {k for n in proj.names(SERVER) for k in proj.config["services"][n].get("environment") or {}}
    return sorted(k for k in names if k.startswith(("NCCL_", "GLOO_")))


def read(values: dict, where: str) -> dict:
    """Every value checked, with defaults; a problem is a ``UserError`` naming its key."""
    top = Reader(values, where)
    unknown = sorted(set(values) - TOP)
    if unknown:
        raise UserError(f"{where}: {unknown[0]}: not a known value (see deploy/k8s/values.yaml)")
    out: dict = {}
    from sglang_stack.services.composefile import SERVER

    proj = _servers()
    out["service"] = top.get("service", str, proj.default)
    if out["service"] not in proj.names(SERVER):
        raise top.fail("service", f"{out['service']!r} should be a server of compose.yaml: {', '.join(proj.names(SERVER))}")
    out["nnodes"], out["tp_size"] = top.integer("nnodes", 1), top.integer("tp_size", 8)
    if out["tp_size"] % out["nnodes"]:
        raise top.fail("tp_size", f"{out['tp_size']} does not divide by nnodes {out['nnodes']} (SGLang refuses it)")
    replicas = values.get("replicas", 1)
    if isinstance(replicas, str) and replicas != "external":
        raise top.fail("replicas", f"{replicas!r} should be a number, or \"external\" (kubectl scale or an autoscaler owns it)")
    out["replicas"] = None if replicas == "external" else top.integer("replicas", 1)
    out["namespace"] = top.name("namespace", "sglang")
    out["create_namespace"] = top.get("create_namespace", bool, True)
    for key in ("image", "router_image"):
        out[key] = top.get(key, str, "")
        if out[key] and not IMAGE.fullmatch(out[key]):
            raise top.fail(key, f"{out[key]!r} is not an image reference (repository[:tag][@sha256:...])")
    out["shm_size"] = top.quantity("shm_size", "64Gi")
    for key, default in (("model_subpath", "Kimi-K2.5"), ("draft_subpath", "Kimi-K2.5-eagle3")):
        out[key] = top.get(key, str, default)
        if not SUBPATH.fullmatch(out[key]) or ".." in out[key].split("/"):
            raise top.fail(key, f"{out[key]!r} is not a relative path inside the claim")
    out["model_claim"] = top.name("model_claim")
    out["served_model_name"] = top.get("served_model_name", str, "kimi-k2.5")
    if not out["served_model_name"].strip() or out["served_model_name"] != out["served_model_name"].strip():
        # The name clients put in "model": SGLang answers an empty one with the model's path, and a request's
        # "model" never matches one with spaces around it.
        raise top.fail("served_model_name", f"{out['served_model_name']!r} is empty or has spaces around it")
    for key, default in (("spec_num_steps", 3), ("spec_eagle_topk", 1), ("spec_num_draft_tokens", 4)):
        out[key] = top.integer(key, default)
    out["extra_args"] = top.strings("extra_args")
    out["pcie_allreduce"] = top.get("pcie_allreduce", str, "auto")
    if out["pcie_allreduce"] not in ("auto", "on", "off"):
        raise top.fail("pcie_allreduce", f"{out['pcie_allreduce']!r} should be auto, on or off")
    out["preflight_probe"] = top.get("preflight_probe", bool, True)
    out["secret"] = top.name("secret", "", empty=True)

    res = top.section("resources")
    out["resources"] = {"cpu": res.quantity("cpu", "64"), "memory": res.quantity("memory", "768Gi"),
                        "ephemeral-storage": res.quantity("ephemeral_storage", "100Gi")}
    if quantity_bytes(out["resources"]["memory"]) < quantity_bytes(out["shm_size"]) + HOST_MEMORY_MIN:
        raise res.fail("memory", f"{out['resources']['memory']} does not cover shm_size {out['shm_size']} plus 32Gi "
                                 "for SGLang itself: the memory-backed /dev/shm counts against the limit")

    place = top.section("placement")
    out["min_gpu_memory_mib"] = place.integer("min_gpu_memory_mib", 90000, minimum=0, maximum=INT64_MAX)
    out["node_selector"] = _labels(place, "node_selector")
    out["tolerations"] = _objects(place, "tolerations", {"operator"})
    out["priority_class"] = place.name("priority_class", "", empty=True)
    out["exclusive_topology"] = place.get("exclusive_topology", str, "")
    if out["exclusive_topology"] and not LABEL_KEY.fullmatch(out["exclusive_topology"]):
        raise place.fail("exclusive_topology", f"{out['exclusive_topology']!r} is not a node label key")
    out["topology_spread"] = _objects(place, "topology_spread", {"maxSkew", "topologyKey", "whenUnsatisfiable"})

    life = top.section("lifecycle")
    # failureThreshold (int32) = minutes * 60 / the probe period: the minutes that keep it in range.
    out["startup_minutes"] = life.integer("startup_minutes", 30, maximum=INT32_MAX * PROBE_PERIOD_S // 60)
    # terminationGracePeriodSeconds (int64) = preStop + drain + a margin.
    out["drain_seconds"] = life.integer("drain_seconds", 300, minimum=0, maximum=INT64_MAX - GRACE_MARGIN_S)
    out["cache_size"] = life.quantity("cache_size", "50Gi", zero="no cache: the JIT kernels compile at every start")
    out["cache_storage_class"] = life.name("cache_storage_class", "", empty=True)

    rdma = top.section("rdma")
    out["rdma"] = {"enabled": rdma.get("enabled", bool, False), "resource": rdma.get("resource", str, "rdma/ib"),
                   "count": rdma.integer("count", 1), "network": rdma.get("network", str, "host"),
                   "allow_tcp": rdma.get("allow_tcp", bool, False)}
    if not re.fullmatch(r"[a-z0-9.-]+/[A-Za-z0-9._-]+", out["rdma"]["resource"]):
        raise rdma.fail("resource", f"{out['rdma']['resource']!r} is not an extended resource such as rdma/ib")
    if out["rdma"]["network"] != "host" and not NAME.fullmatch(out["rdma"]["network"].rsplit("/", 1)[-1]):
        raise rdma.fail("network", f"{out['rdma']['network']!r} is neither host nor a NetworkAttachmentDefinition name")
    if out["nnodes"] > 1 and not out["rdma"]["enabled"] and not out["rdma"]["allow_tcp"]:
        raise rdma.fail("enabled", f"nnodes {out['nnodes']} without RDMA: NCCL would run tensor parallelism over TCP on "
                                   "the pod network; set rdma.enabled (and its resource and network), or rdma.allow_tcp "
                                   "for a test cluster")
    nccl = top.get("nccl", dict, {})
    allowed = nccl_variables()
    for key, value in nccl.items():
        if key not in allowed:
            raise UserError(f"{where}: nccl.{key}: not one of the variables compose.yaml passes ({', '.join(allowed)})")
        if not isinstance(value, (str, int)) or isinstance(value, bool):
            raise UserError(f"{where}: nccl.{key}: {value!r} should be a string (quote it)")
    out["nccl"] = {k: str(v) for k, v in sorted(nccl.items())}

    policy = top.section("network_policy")
    egress_to = policy.get("egress_to", list, [])
    for cidr in egress_to:
        try:
            ipaddress.ip_network(cidr if isinstance(cidr, str) else None)  # an int would read as an address
        except (TypeError, ValueError):
            raise policy.fail("egress_to", f"{cidr!r} is not a CIDR such as 10.0.0.0/8") from None
    out["network_policy"] = {"enabled": policy.get("enabled", bool, True),
                             "from_namespaces": _labels(policy, "from_namespaces"), "egress_to": egress_to}

    metrics = top.section("metrics")
    out["pod_monitor"] = metrics.get("pod_monitor", bool, False)
    # None: the drafter's expectation in models.lock, else the floor (bench/acceptance.py).
    out["accept_length_min"] = metrics.data.get("accept_length_min")
    if out["accept_length_min"] is not None:
        value = metrics.get("accept_length_min", (int, float))
        if not 1.0 <= value <= 64:
            raise metrics.fail("accept_length_min", f"{value!r} should be a number of tokens per verify pass, 1 to 64")

    router = top.section("router")
    out["router_policy"] = router.get("policy", str, "cache_aware")
    if out["router_policy"] not in POLICIES:
        raise router.fail("policy", f"{out['router_policy']!r} should be one of {', '.join(POLICIES)}")
    out["router_replicas"] = router.integer("replicas", 1)
    out["router_discovery"] = router.get("discovery", bool, True)
    out["router_drain_seconds"] = router.integer("drain_seconds", 180, minimum=0, maximum=INT64_MAX - GRACE_MARGIN_S)
    out["router_extra_args"] = router.strings("extra_args")
    if out["router_discovery"] is False and out["replicas"] is None:
        raise router.fail("discovery", "false needs a fixed replicas count: a static worker list cannot follow a scale")
    return out
