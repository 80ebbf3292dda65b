"""`invoke k8s`: the manifests validate against the official Kubernetes schemas and the LWS CRD.

Kubernetes objects go through kubernetes-validate (PyPI; it bundles the API server's
OpenAPI schemas per release), strict, so an unknown field fails as with
`kubectl apply --validate=strict`. The LeaderWorkerSet goes through check-jsonschema
against the openAPIV3Schema of the LWS v0.8.0 CRD (tests/fixtures/k8s, pinned by
sha256), with unknown fields rejected the same way; its pod templates also go through
kubernetes-validate as core/v1 PodTemplates. No cluster runs here: nothing is applied.
"""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from sglang_stack import ROOT
from sglang_stack.errors import UserError
from sglang_stack.lock import lockfile as lockmod
from sglang_stack.services import k8s

pytestmark = pytest.mark.usefixtures("compose")  # Compose reads compose.yaml: without it, skip

LWS_CRD = Path(__file__).parents[1] / "fixtures" / "k8s" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
LWS_CRD_SHA256 = "ea523e42ff3d4e45a75371c7984bbe8ad5226c26ffa3ade8d28eb67c7cc228b6"
# The oldest release the render supports (PDB unhealthyPodEvictionPolicy is GA in 1.31, beta and on from
# 1.27) and the newest kubernetes-validate 1.37.0 bundles schemas for.
K8S_VERSIONS = ("1.30.0", "1.37.0")
MULTINODE = {"nnodes": 2, "tp_size": 16, "replicas": 3, "rdma": {"enabled": True}}


@pytest.fixture(scope="module")
def lock():
    return lockmod.check()


def documents(lock, **overrides) -> dict[str, list[dict]]:
    values = {**k8s.load_values(), **overrides}
    return {name: [d for d in yaml.safe_load_all(text) if d] for name, text in k8s.render_text(lock, values).items()}


def kinds(docs: dict[str, list[dict]]) -> list[str]:
    return sorted(f"{d['apiVersion']}/{d['kind']}" for ds in docs.values() for d in ds)


def k8s_errors(doc: dict) -> list[str]:
    """Strict validation against each bundled release; the messages of every failure."""
    errors = []
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as err:
            errors.append(f"{version}: {err.message} at {'/'.join(str(p) for p in err.path)}")
    return errors


def strict(schema):
    """The CRD schema with additionalProperties: false wherever it lists properties and
    says nothing else, as kubeconform's openapi2jsonschema --strict does."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def lws_schema(tmp_path_factory) -> Path:
    assert hashlib.sha256(LWS_CRD.read_bytes()).hexdigest() == LWS_CRD_SHA256, "the pinned LWS CRD changed: see tests/fixtures/k8s/README.md"
    crd = yaml.safe_load(LWS_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    path = tmp_path_factory.mktemp("lws") / "leaderworkerset-v1.json"
    path.write_text(json.dumps(strict(version["schema"]["openAPIV3Schema"])))
    return path


def lws_check(doc: dict, schema: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    instance = tmp_path / "lws.json"
    instance.write_text(json.dumps(doc))
    exe = Path(sys.executable).parent / "check-jsonschema"
    return subprocess.run([str(exe), "--schemafile", str(schema), str(instance)], capture_output=True, text=True, timeout=120)


def kind(docs: dict[str, list[dict]], name: str, file: str | None = None) -> dict:
    """The one object of kind ``name`` (in ``file`` when given)."""
    found = [d for f, ds in docs.items() if file in (None, f) for d in ds if d["kind"] == name]
    assert len(found) == 1, f"{len(found)} objects of kind {name}"
    return found[0]


def server_pod(docs) -> dict:
    """The server pod template's spec, from the StatefulSet or the LeaderWorkerSet."""
    for d in docs["sglang.yaml"]:
        if d["kind"] == "StatefulSet":
            return d["spec"]["template"]["spec"]
        if d["kind"] == "LeaderWorkerSet":
            return d["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    raise AssertionError("no server workload")


# --- every object passes the schemas ---------------------------------------------------------------


VARIANTS = {
    "default": {},
    "static-router": {"router": {"discovery": False, "replicas": 2, "policy": "round_robin"}},
    "external-scale": {"replicas": "external"},
    "no-cache-no-secret": {"lifecycle": {"cache_size": "0"}, "secret": "", "create_namespace": False},
    "placement": {"placement": {"node_selector": {"nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"},
                                "priority_class": "gpu-serving", "min_gpu_memory_mib": 0,
                                "topology_spread": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                                     "whenUnsatisfiable": "ScheduleAnyway",
                                                     "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "sglang-eagle3"}}}]}},
    "rdma-secondary-network": {"rdma": {"enabled": True, "network": "rdma-net", "resource": "rdma/roce_gdr"},
                               "nccl": {"NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "net1", "GLOO_SOCKET_IFNAME": "net1"}},
}


@pytest.mark.parametrize("variant", VARIANTS, ids=list(VARIANTS))
def test_single_node_objects_pass_the_kubernetes_schemas(lock, variant):
    docs = documents(lock, **VARIANTS[variant])
    for name, ds in docs.items():
        for doc in ds:
            if doc["apiVersion"].startswith("monitoring.coreos.com/"):
                continue  # a CRD of the Prometheus Operator: checked below by shape
            errors = k8s_errors(doc)
            assert not errors, f"{variant}: {name} {doc['kind']} fails the Kubernetes schema: {errors}"


def test_default_objects(lock):
    docs = documents(lock)
    assert {f: sorted(d["kind"] for d in ds) for f, ds in docs.items()} == {
        "namespace.yaml": ["Namespace"],
        "sglang.yaml": ["NetworkPolicy", "PodDisruptionBudget", "Service", "StatefulSet"],
        "router.yaml": ["Deployment", "NetworkPolicy", "Role", "RoleBinding", "Service", "ServiceAccount"],
    }


def test_the_validator_can_fail(lock):
    sts = kind(documents(lock), "StatefulSet")
    broken = copy.deepcopy(sts)
    broken["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["failureTreshold"] = 120
    assert k8s_errors(broken), "a misspelled probe field must fail strict validation"
    broken = copy.deepcopy(sts)
    broken["spec"]["replicas"] = "two"
    assert k8s_errors(broken), "a string where an integer belongs must fail"


@pytest.mark.schema
@pytest.mark.parametrize("extra", [{}, {"placement": {"exclusive_topology": "topology.kubernetes.io/zone"}},
                                   {"rdma": {"enabled": True, "network": "rdma-net"}}], ids=["host-network", "exclusive", "multus"])
def test_multinode_is_a_leaderworkerset_that_passes_the_crd_schema(lock, lws_schema, tmp_path, extra):
    docs = documents(lock, **{**MULTINODE, **extra})
    policy = ["NetworkPolicy"] if "rdma" in extra else []  # host-network pods are outside any NetworkPolicy
    assert sorted(d["kind"] for d in docs["sglang.yaml"]) == ["LeaderWorkerSet", *policy, "PodDisruptionBudget"]
    lws = kind(docs, "LeaderWorkerSet")
    result = lws_check(lws, lws_schema, tmp_path)
    assert result.returncode == 0, f"the LeaderWorkerSet fails the LWS v1 CRD schema:\n{result.stdout}{result.stderr}"
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2 and lws["spec"]["replicas"] == 3, template
    pod_template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "worker"}, "template": template["workerTemplate"]}
    errors = k8s_errors(pod_template)
    assert not errors, f"the LWS pod template fails the Kubernetes schema: {errors}"
    args = template["workerTemplate"]["spec"]["containers"][0]["args"]
    assert "--nnodes=2" in args and "--node-rank=$(LWS_WORKER_INDEX)" in args, args
    assert "--dist-init-addr=$(LWS_LEADER_ADDRESS):20000" in args, args
    assert args[args.index("--tp") + 1] == "16", args
    assert template["workerTemplate"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 8
    for name in ("router.yaml", "namespace.yaml"):
        for d in docs[name]:
            assert not k8s_errors(d), f"{name} {d['kind']}: {k8s_errors(d)}"
    assert not k8s_errors(kind(docs, "PodDisruptionBudget"))


@pytest.mark.schema
def test_the_lws_check_can_fail(lock, lws_schema, tmp_path):
    lws = kind(documents(lock, **MULTINODE), "LeaderWorkerSet")
    lws["spec"]["leaderWorkerTemplate"]["groupSize"] = lws["spec"]["leaderWorkerTemplate"].pop("size")
    assert lws_check(lws, lws_schema, tmp_path).returncode != 0, "an unknown LWS field must fail"
    lws = kind(documents(lock, **MULTINODE), "LeaderWorkerSet")
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resource"] = {}
    assert lws_check(lws, lws_schema, tmp_path).returncode != 0, "a misspelled field in the embedded pod spec must fail"


def test_pod_monitors_select_what_serves_metrics(lock):
    docs = documents(lock, metrics={"pod_monitor": True})
    monitors = {d["metadata"]["name"]: d for d in docs["monitoring.yaml"] if d["kind"] == "PodMonitor"}
    assert set(monitors) == {"sglang-eagle3", "sglang-eagle3-router"}
    server, router = monitors["sglang-eagle3"], monitors["sglang-eagle3-router"]
    sts, deploy = kind(docs, "StatefulSet"), kind(docs, "Deployment")
    assert server["spec"]["selector"]["matchLabels"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    assert router["spec"]["selector"]["matchLabels"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"] for c in sts["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
    assert server["spec"]["podMetricsEndpoints"][0]["port"] in ports, "the monitor must name a declared port"
    ports = {p["name"]: p["containerPort"] for p in deploy["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports[router["spec"]["podMetricsEndpoints"][0]["port"]] == 29000
    assert "monitoring.yaml" not in documents(lock), "off by default: not every cluster runs the Prometheus Operator"


def acceptance_rule(docs) -> dict | None:
    rules = [d for d in docs.get("monitoring.yaml", []) if d["kind"] == "PrometheusRule"]
    return rules[0]["spec"]["groups"][0]["rules"][0] if rules else None


def test_eagle3_alerts_on_sglangs_own_accept_length(lock, tmp_path, monkeypatch):
    from sglang_stack.services import models

    rule = acceptance_rule(documents(lock, metrics={"pod_monitor": True}))
    assert rule and rule["alert"] == "SGLangEagle3AcceptanceLow", rule
    assert "sglang:spec_accept_length" in rule["expr"], "SGLang's own gauge (metrics/collector.py)"
    assert f"< {models.FLOOR}" in rule["expr"] and "> 0" in rule["expr"], f"no expectation yet: the floor: {rule['expr']}"
    assert acceptance_rule(documents(lock, service="baseline", metrics={"pod_monitor": True})) is None, "baseline drafts nothing"
    overridden = acceptance_rule(documents(lock, metrics={"pod_monitor": True, "accept_length_min": 2.4}))
    assert "< 2.4" in overridden["expr"], overridden["expr"]
    # A drafter whose expectation models.lock records: the alert fires below its minimum.
    pinned = tmp_path / "models.lock"
    pinned.write_text(models.MODELS_LOCK.read_text())
    models.record_acceptance(models.Expectation(3.05, 0.15, "3/1/4", "a first run accepted"), pinned)
    monkeypatch.setattr(models, "MODELS_LOCK", pinned)
    expected = acceptance_rule(documents(lock, metrics={"pod_monitor": True}))
    assert "< 2.9" in expected["expr"], expected["expr"]


# --- values and the task ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, message",
    [
        ({"nnodes": 3, "tp_size": 16}, "tp_size: 16 does not divide by nnodes 3"),
        ({"service": "gpt"}, "service: 'gpt' should be a server of compose.yaml: baseline, eagle3"),
        ({"namespace": "Bad_NS"}, "namespace: 'Bad_NS' is not a Kubernetes name"),
        ({"image": "no spaces allowed"}, "image: 'no spaces allowed' is not an image reference"),
        ({"replicas": 0}, "replicas: 0 must be 1 or more"),
        ({"metrics": {"accept_length_min": "high"}}, "metrics.accept_length_min: 'high' should be a number"),
        ({"metrics": {"accept_length_min": 0.5}}, "accept_length_min: 0.5 should be a number of tokens per verify pass"),
        ({"replicas": "auto"}, "replicas: 'auto' should be a number, or \"external\""),
        ({"router": {"policy": "fastest"}}, "router.policy: 'fastest'"),
        ({"router": {"polcy": "random"}}, "router.polcy: not a known value"),
        ({"model_subpath": "../etc"}, "model_subpath: '../etc' is not a relative path"),
        ({"replica": 2}, "replica: not a known value"),
        ({"resources": {"memory": "64Gi"}}, "resources.memory: 64Gi does not cover shm_size 64Gi"),
        ({"resources": {"cpu": "lots"}}, "resources.cpu: 'lots' is not a quantity"),
        ({"placement": {"min_gpu_memory_mib": "96GB"}}, "placement.min_gpu_memory_mib: '96GB' should be a number"),
        ({"placement": {"node_selector": {"gpu": 8}}}, "placement.node_selector: 'gpu': 8 is not a node label"),
        ({"placement": {"tolerations": ["nvidia.com/gpu"]}}, "placement.tolerations: 'nvidia.com/gpu': each item"),
        ({"lifecycle": {"startup_minutes": 0}}, "lifecycle.startup_minutes: 0 must be 1 or more"),
        ({"nnodes": 2, "tp_size": 16}, "rdma.enabled: nnodes 2 without RDMA"),
        ({"rdma": {"enabled": "yes"}}, "rdma.enabled: 'yes' should be true or false"),
        ({"rdma": {"enabled": True, "resource": "infiniband"}}, "rdma.resource: 'infiniband' is not an extended resource"),
        ({"nccl": {"NCCL_ALGO_FAST": "1"}}, "nccl.NCCL_ALGO_FAST: not one of the variables compose.yaml passes"),
        ({"nccl": {"NCCL_IB_HCA": ["mlx5_0"]}}, "nccl.NCCL_IB_HCA: ['mlx5_0'] should be a string"),
        ({"replicas": "external", "router": {"discovery": False}}, "router.discovery: false needs a fixed replicas count"),
        # a trailing newline is not a valid name: it would end a comment line and start YAML of its own
        ({"placement": {"exclusive_topology": "kubernetes.io/hostname\nkind: Secret"}}, "is not a node label key"),
        ({"placement": {"exclusive_topology": "kubernetes.io/hostname\n"}}, "is not a node label key"),
        ({"namespace": "sglang\n"}, "namespace: 'sglang\\n' is not a Kubernetes name"),
        ({"served_model_name": ""}, "served_model_name: '' is empty or has spaces around it"),
        ({"served_model_name": "kimi-k2.5 "}, "served_model_name: 'kimi-k2.5 ' is empty or has spaces around it"),
        ({"replicas": 2**31}, "replicas: 2147483648 is more than the 2147483647 the Kubernetes API field"),
        ({"lifecycle": {"startup_minutes": 2**31}}, "lifecycle.startup_minutes: 2147483648 is more than the 536870911"),
        ({"lifecycle": {"drain_seconds": 2**63}}, "lifecycle.drain_seconds: 9223372036854775808 is more than"),
        ({"resources": {"cpu": "0"}}, "resources.cpu: '0' must be more than 0"),
        ({"resources": {"ephemeral_storage": "0.0"}}, "resources.ephemeral_storage: '0.0' must be more than 0"),
        ({"pcie_allreduce": "maybe"}, "pcie_allreduce: 'maybe' should be auto, on or off"),
        ({"preflight_probe": "yes"}, "preflight_probe: 'yes' should be true or false"),
    ],
)
def test_bad_values_are_one_line_errors(lock, values, message):
    with pytest.raises(UserError) as err:
        k8s.render_text(lock, {**k8s.load_values(), **values})
    assert message in str(err.value), f"expected {message!r} in {err.value}"
    assert "\n" not in str(err.value), f"one line: {err.value!r}"


def test_a_trimmed_values_file_takes_the_defaults(lock):
    docs = {n: [d for d in yaml.safe_load_all(t) if d] for n, t in k8s.render_text(lock, {"model_claim": "models"}).items()}
    assert kind(docs, "StatefulSet")["spec"]["replicas"] == 1
    assert server_pod(docs)["containers"][0]["resources"]["limits"]["memory"] == "768Gi"


@pytest.mark.parametrize("overrides", [{}, MULTINODE], ids=["statefulset", "leaderworkerset"])
def test_every_server_pod_probes_its_gpus_before_the_model_load(lock, overrides):
    """The init container runs the all-reduce probe in the server's image, with the pod's GPUs, /dev/shm and cache
    claim, recording PCIE_ALLREDUCE=auto's verdict where none is; the server reads the same setting."""
    pod = server_pod(documents(lock, **overrides))
    (init,) = pod["initContainers"]
    server = pod["containers"][0]
    gpus = str(overrides.get("tp_size", 8) // overrides.get("nnodes", 1))
    assert init["image"] == server["image"] and init["command"] == ["python3", "-m", "sglang_stack.entrypoints.probe"]
    assert init["args"][:2] == ["--gpus", gpus] and {"--record", "--if-needed"} <= set(init["args"]), init["args"]
    assert init["resources"] == server["resources"], "the probe needs the pod's GPUs"
    assert {m["mountPath"] for m in init["volumeMounts"]} == {"/dev/shm", "/home/sglang/.cache", "/tmp"}
    env = {e["name"]: e["value"] for e in server["env"]}
    assert env["PCIE_ALLREDUCE"] == "auto" and init["env"] == server["env"], init["env"]
    assert env["FLASHINFER_AUTOTUNE_DIR"].startswith("/home/sglang/.cache/"), "the autotune file lives in the claim"


def test_the_preflight_can_be_left_out_and_the_setting_follows_the_values(lock):
    pod = server_pod(documents(lock, preflight_probe=False, pcie_allreduce="on"))
    assert "initContainers" not in pod
    assert {e["name"]: e["value"] for e in pod["containers"][0]["env"]}["PCIE_ALLREDUCE"] == "on"


def test_image_by_digest(lock):
    digest = "registry.example.com/sglang-stack@sha256:" + "a" * 64
    assert server_pod(documents(lock, image=digest))["containers"][0]["image"] == digest


def test_invoke_k8s_writes_the_files_and_drops_stale_ones(tmp_path):
    out = tmp_path / "manifests"
    proc = subprocess.run([sys.executable, "-m", "invoke", "k8s", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["namespace.yaml", "router.yaml", "sglang.yaml"], list(out.iterdir())
    assert (out / "sglang.yaml").read_text().startswith("# GENERATED FILE"), "generated-file header"
    (out / "mine.yaml").write_text("kind: ConfigMap\n")
    values = tmp_path / "values.yaml"
    values.write_text(k8s.VALUES.read_text().replace("create_namespace: true", "create_namespace: false"))
    proc = subprocess.run([sys.executable, "-m", "invoke", "k8s", "--out", str(out), "--values", str(values)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["mine.yaml", "router.yaml", "sglang.yaml"], \
        "an earlier render's namespace.yaml must go (kubectl apply -f DIR would apply it); the user's own file stays"
    bad = tmp_path / "bad.yaml"
    bad.write_text("nnodes: 0\n")
    proc = subprocess.run([sys.executable, "-m", "invoke", "k8s", "--out", str(out), "--values", str(bad)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: bad.yaml: nnodes: 0 must be 1 or more", proc.stderr
    before = sorted(p.name for p in ROOT.iterdir())
    proc = subprocess.run([sys.executable, "-m", "invoke", "k8s", "--out", ""], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --out '': empty: name a directory"), proc.stderr
    assert sorted(p.name for p in ROOT.iterdir()) == before, "nothing is written into the repository root"
