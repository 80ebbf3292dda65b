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
from sglang_stack.image import lock as lockmod
from sglang_stack.services import k8s

LWS_CRD = Path(__file__).parent / "fixtures" / "k8s" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"
LWS_CRD_SHA256 = "ea523e42ff3d4e45a75371c7984bbe8ad5226c26ffa3ade8d28eb67c7cc228b6"
# The oldest and the newest Kubernetes release kubernetes-validate 1.37.0 bundles schemas for.
K8S_VERSIONS = ("1.25.0", "1.37.0")
MULTINODE = {"nnodes": 2, "tp_size": 16, "replicas": 3}


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


# --- one node per replica: StatefulSet, Services, router -------------------------------------


def test_single_node_manifests_pass_the_kubernetes_schemas(lock):
    docs = documents(lock)
    assert kinds(docs) == ["apps/v1/Deployment", "apps/v1/StatefulSet", "v1/Service", "v1/Service"], kinds(docs)
    for name, ds in docs.items():
        for doc in ds:
            errors = k8s_errors(doc)
            assert not errors, f"{name} {doc['kind']} fails the Kubernetes schema: {errors}"


def test_the_validator_can_fail(lock):
    sts = next(d for d in documents(lock)["sglang.yaml"] if d["kind"] == "StatefulSet")
    broken = copy.deepcopy(sts)
    broken["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["failureTreshold"] = 120
    assert k8s_errors(broken), "a misspelled probe field must fail strict validation"
    broken = copy.deepcopy(sts)
    broken["spec"]["replicas"] = "two"
    assert k8s_errors(broken), "a string where an integer belongs must fail"


def test_pod_spec_gpus_shm_probes_and_secrets(lock):
    docs = documents(lock)
    sts = next(d for d in docs["sglang.yaml"] if d["kind"] == "StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == lock.tag, f"default image is the lock's tag: {container['image']}"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8, container["resources"]
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"]["medium"] == "Memory", f"/dev/shm must be memory-backed: {shm}"
    assert {"name": "shm", "mountPath": "/dev/shm"} in container["volumeMounts"], container["volumeMounts"]
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/health", startup
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 30 * 60, f"startup budget under 30 min: {startup}"
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/health", f"{probe} must use SGLang's real /health"
        assert container[probe]["timeoutSeconds"] > 20, f"{probe} must outwait SGLang's 20 s health generation"
    env = {e["name"]: e for e in container["env"]}
    assert "SGLANG_API_KEY" not in env, "the key must not be an environment variable: the pod spec and inspect show those"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["optional"] is True, env["HF_TOKEN"]
    assert not [a for a in container["args"] if "api-key" in a or "API_KEY" in a], f"the key is on the command line: {container['args']}"
    mount = next(m for m in container["volumeMounts"] if m["name"] == "api-key")
    assert mount == {"name": "api-key", "mountPath": "/run/secrets/sglang_api_key", "subPath": "sglang_api_key", "readOnly": True}, mount
    volume = next(v for v in pod["volumes"] if v["name"] == "api-key")
    assert volume["secret"]["secretName"] == "sglang-stack" and volume["secret"]["items"] == [{"key": "SGLANG_API_KEY", "path": "sglang_api_key"}], volume
    router = next(d for d in documents(lock)["router.yaml"] if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert not [a for a in router["containers"][0]["args"] if "api-key" in a], router["containers"][0]["args"]
    assert any(m["mountPath"] == "/run/secrets/sglang_api_key" for m in router["containers"][0]["volumeMounts"]), "the router needs the key too"
    text = "".join(k8s.render_text(lock, k8s.load_values()).values())
    assert "kind: Secret" not in text and "hf_" not in text, "no secret object or value is rendered"


def test_router_lists_every_replica(lock):
    docs = documents(lock, replicas=3)
    router = next(d for d in docs["router.yaml"] if d["kind"] == "Deployment")
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    urls = args[args.index("--worker-urls") + 1].split(",")
    assert urls == [f"http://sglang-eagle3-{i}.sglang-eagle3.sglang.svc.cluster.local:30000" for i in range(3)], urls
    assert args[args.index("--policy") + 1] == "cache_aware", args
    assert router["spec"]["template"]["spec"]["containers"][0]["image"] == lock.router_tag


# --- several nodes per replica: LeaderWorkerSet -----------------------------------------------


def test_multinode_is_a_leaderworkerset_that_passes_the_crd_schema(lock, lws_schema, tmp_path):
    docs = documents(lock, **MULTINODE)
    assert kinds(docs) == ["apps/v1/Deployment", "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet", "v1/Service"], kinds(docs)
    lws = next(d for d in docs["sglang.yaml"] if d["kind"] == "LeaderWorkerSet")
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
    for d in docs["router.yaml"]:
        assert not k8s_errors(d), f"router.yaml {d['kind']}: {k8s_errors(d)}"


def test_the_lws_check_can_fail(lock, lws_schema, tmp_path):
    lws = next(d for d in documents(lock, **MULTINODE)["sglang.yaml"] if d["kind"] == "LeaderWorkerSet")
    lws["spec"]["leaderWorkerTemplate"]["groupSize"] = lws["spec"]["leaderWorkerTemplate"].pop("size")
    assert lws_check(lws, lws_schema, tmp_path).returncode != 0, "an unknown LWS field must fail"
    lws = next(d for d in documents(lock, **MULTINODE)["sglang.yaml"] if d["kind"] == "LeaderWorkerSet")
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["resource"] = {}
    assert lws_check(lws, lws_schema, tmp_path).returncode != 0, "a misspelled field in the embedded pod spec must fail"


# --- values and the task ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, message",
    [
        ({"nnodes": 3, "tp_size": 16}, "tp_size: 16 does not divide by nnodes 3"),
        ({"service": "gpt"}, "service: 'gpt' should be baseline or eagle3"),
        ({"namespace": "Bad_NS"}, "namespace: 'Bad_NS' is not a Kubernetes name"),
        ({"image": "no spaces allowed"}, "image: 'no spaces allowed' is not an image reference"),
        ({"replicas": 0}, "replicas: 0 must be 1 or more"),
        ({"router": {"policy": "fastest"}}, "router.policy: 'fastest'"),
        ({"model_subpath": "../etc"}, "model_subpath: '../etc' is not a relative path"),
        ({"replica": 2}, "replica: not a known value"),
    ],
)
def test_bad_values_are_one_line_errors(lock, values, message):
    with pytest.raises(UserError) as err:
        k8s.render_text(lock, {**k8s.load_values(), **values})
    assert message in str(err.value), f"expected {message!r} in {err.value}"
    assert "\n" not in str(err.value), f"one line: {err.value!r}"


def test_image_by_digest(lock):
    digest = "registry.example.com/sglang-stack@sha256:" + "a" * 64
    docs = documents(lock, image=digest)
    sts = next(d for d in docs["sglang.yaml"] if d["kind"] == "StatefulSet")
    assert sts["spec"]["template"]["spec"]["containers"][0]["image"] == digest


def test_invoke_k8s_writes_the_files(tmp_path):
    out = tmp_path / "manifests"
    proc = subprocess.run([sys.executable, "-m", "invoke", "k8s", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["router.yaml", "sglang.yaml"], list(out.iterdir())
    assert (out / "sglang.yaml").read_text().startswith("# GENERATED FILE"), "generated-file header"
    bad = tmp_path / "bad.yaml"
    bad.write_text("nnodes: 0\n")
    proc = subprocess.run([sys.executable, "-m", "invoke", "k8s", "--out", str(out), "--values", str(bad)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == "error: bad.yaml: nnodes: 0 must be 1 or more", proc.stderr
