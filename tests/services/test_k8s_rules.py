"""`invoke k8s`, its rules as behaviour: what the cluster will do with the rendered objects.

Each test reads the objects the way the component that acts on them does: the QoS class
as the kubelet computes it, the router's selector against the pods' labels, what a
re-apply does to a scaled count, what PodSecurity `restricted` refuses, and so on.
"""

from __future__ import annotations

import re

import pytest
import yaml

from sglang_stack.errors import UserError
from sglang_stack.services import k8s
import test_k8s
from test_k8s import MULTINODE, documents, kind, server_pod

pytestmark = pytest.mark.usefixtures("compose")  # Compose reads compose.yaml: without it, skip

lock = test_k8s.lock  # the fixture, shared with test_k8s


def qos_class(pod: dict) -> str:
    """The pod's QoS class, by the kubelet's rule (pkg/apis/core/helper/qos): Guaranteed when every
    container limits cpu and memory and requests equal limits; BestEffort when none asks for either."""
    containers = pod.get("containers", []) + pod.get("initContainers", [])
    asked = [(c.get("resources", {}).get("requests", {}), c.get("resources", {}).get("limits", {})) for c in containers]
    if not any(r.get(x) or lim.get(x) for r, lim in asked for x in ("cpu", "memory")):
        return "BestEffort"
    for requests, limits in asked:
        for res in ("cpu", "memory"):
            if res not in limits or requests.get(res, limits[res]) != limits[res]:
                return "Burstable"
    return "Guaranteed"


def restricted_violations(pod: dict) -> list[str]:
    """What PodSecurity `restricted` (v1.30 and later) refuses in a pod spec, rule by rule
    (kubernetes.io/docs/concepts/security/pod-security-standards)."""
    out = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(key)
    allowed_volumes = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= allowed_volumes:
            out.append(f"volume {volume['name']}: {sorted(kinds - allowed_volumes)}")
    pod_sc = pod.get("securityContext", {})
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            out.append(f"{c['name']}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: allowPrivilegeEscalation must be false")
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            out.append(f"{c['name']}: runAsNonRoot")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append(f"{c['name']}: runAsUser 0")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{c['name']}: seccompProfile {seccomp}")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            out.append(f"{c['name']}: capabilities.drop must include ALL")
        extra = set(caps.get("add", [])) - {"NET_BIND_SERVICE"}
        if extra:
            out.append(f"{c['name']}: capabilities.add {sorted(extra)}")
        for port in c.get("ports", []):
            if port.get("hostPort"):
                out.append(f"{c['name']}: hostPort")
    return out


def baseline_violations(pod: dict) -> list[str]:
    """The subset of those rules that `baseline` keeps too (no host namespaces, no extra capabilities
    beyond its list, no hostPath, not privileged)."""
    baseline_caps = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                     "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
    out = [k for k in ("hostNetwork", "hostPID", "hostIPC") if pod.get(k)]
    out += [f"volume {v['name']}: hostPath" for v in pod.get("volumes", []) if "hostPath" in v]
    for c in pod.get("containers", []):
        sc = c.get("securityContext", {})
        out += [f"{c['name']}: privileged"] if sc.get("privileged") else []
        extra = set(sc.get("capabilities", {}).get("add", [])) - baseline_caps
        out += [f"{c['name']}: capabilities.add {sorted(extra)}"] if extra else []
    return out


def router_pod(docs) -> dict:
    return kind(docs, "Deployment")["spec"]["template"]["spec"]


def flag(args: list[str], name: str) -> list[str]:
    """The values after ``name`` up to the next flag."""
    i = args.index(name) + 1
    out = []
    while i < len(args) and not args[i].startswith("--"):
        out.append(args[i])
        i += 1
    return out


# --- resources, QoS -------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [{}, MULTINODE], ids=["statefulset", "leaderworkerset"])
def test_every_pod_is_qos_guaranteed_and_the_memory_limit_covers_the_shm(lock, values):
    docs = documents(lock, **values)
    pod = server_pod(docs)
    assert qos_class(pod) == "Guaranteed", pod["containers"][0]["resources"]
    assert qos_class(router_pod(docs)) == "Guaranteed"
    limits = pod["containers"][0]["resources"]["limits"]
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")["emptyDir"]["sizeLimit"]
    from sglang_stack.services.k8s_values import quantity_bytes
    assert quantity_bytes(limits["memory"]) >= quantity_bytes(shm) + 32 * 2**30, (limits, shm)
    assert limits["ephemeral-storage"], "the JIT cache and logs need ephemeral storage too"


def test_the_qos_rule_can_fail():
    assert qos_class({"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}) == "BestEffort"
    assert qos_class({"containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                                                                 "limits": {"cpu": "2", "memory": "1Gi"}}}]}) == "Burstable"


def test_resources_come_from_values(lock):
    pod = server_pod(documents(lock, resources={"cpu": "120", "memory": "1800Gi", "ephemeral_storage": "200Gi"}))
    assert pod["containers"][0]["resources"]["limits"] == {"cpu": "120", "memory": "1800Gi", "ephemeral-storage": "200Gi",
                                                            "nvidia.com/gpu": 8}


# --- the router follows the cluster ---------------------------------------------------------------


@pytest.mark.parametrize("values", [{}, MULTINODE], ids=["statefulset", "leaderworkerset"])
def test_the_router_discovers_the_serving_pods_with_least_rights(lock, values):
    docs = documents(lock, **values)
    args = router_pod(docs)["containers"][0]["args"]
    assert "--service-discovery" in args and "--worker-urls" not in args, args
    selector = dict(item.split("=", 1) for item in flag(args, "--selector"))
    if "nnodes" in values:
        template = kind(docs, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
        # LWS labels every pod with its index in the group; the leader, index 0, serves the API.
        assert selector.pop("leaderworkerset.sigs.k8s.io/worker-index") == "0", "only the leaders serve the API"
    else:
        template = kind(docs, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= template.items(), f"the selector {selector} misses the server pods {template}"
    assert flag(args, "--service-discovery-namespace") == ["sglang"] and flag(args, "--service-discovery-port") == ["30000"]
    role = kind(docs, "Role")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}], role
    binding = kind(docs, "RoleBinding")
    account = kind(docs, "ServiceAccount")["metadata"]["name"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": "sglang"}]
    assert router_pod(docs)["serviceAccountName"] == account
    assert server_pod(docs)["automountServiceAccountToken"] is False, "the servers never talk to the API"


def test_a_scale_needs_no_new_render_and_external_leaves_the_count_alone(lock):
    two, five = documents(lock, replicas=2), documents(lock, replicas=5)
    assert two["router.yaml"] == five["router.yaml"], "with discovery the router does not depend on the count"
    assert kind(two, "StatefulSet")["spec"]["replicas"] == 2
    external = documents(lock, replicas="external")
    for docs in (external, documents(lock, **{**MULTINODE, "replicas": "external"})):
        workload = next(d for d in docs["sglang.yaml"] if d["kind"] in ("StatefulSet", "LeaderWorkerSet"))
        # Absent from what is applied, the field belongs to whoever scaled: `kubectl apply` (its
        # last-applied annotation never held it) and server-side apply (no field manager of ours) leave it.
        assert "replicas" not in workload["spec"], workload["spec"]


def test_a_static_router_lists_every_stable_name(lock):
    docs = documents(lock, replicas=3, router={"discovery": False})
    pod = router_pod(docs)
    urls = flag(pod["containers"][0]["args"], "--worker-urls")[0].split(",")
    assert urls == [f"http://sglang-eagle3-{i}.sglang-eagle3.sglang.svc.cluster.local:30000" for i in range(3)], urls
    assert pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert not [d for d in docs["router.yaml"] if d["kind"] in ("Role", "RoleBinding", "ServiceAccount")]
    assert kind(docs, "Service", "sglang.yaml")["spec"]["publishNotReadyAddresses"] is True


def test_router_flags_from_values_and_health_on_the_generating_endpoint(lock):
    args = router_pod(documents(lock, router={"extra_args": ["--max-concurrent-requests", "512"], "policy": "power_of_two"}))["containers"][0]["args"]
    assert args[-2:] == ["--max-concurrent-requests", "512"] and flag(args, "--policy") == ["power_of_two"]
    assert flag(args, "--health-check-endpoint") == ["/health_generate"], "the router must check that a server generates"


# --- RDMA across nodes ---------------------------------------------------------------------------


def test_several_nodes_without_rdma_are_refused_unless_tcp_is_accepted(lock):
    with pytest.raises(UserError, match=r"rdma\.enabled: nnodes 2 without RDMA"):
        k8s.render_text(lock, {**k8s.load_values(), "nnodes": 2, "tp_size": 16})
    docs = documents(lock, nnodes=2, tp_size=16, rdma={"allow_tcp": True})
    pod = server_pod(docs)
    assert not pod.get("hostNetwork") and "IPC_LOCK" not in str(pod["containers"][0]["securityContext"])
    assert kind(docs, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("network", ["host", "rdma-net"])
def test_rdma_carries_devices_ipc_lock_the_network_and_nccl_settings(lock, network):
    nccl = {"NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "bond0", "GLOO_SOCKET_IFNAME": "bond0", "NCCL_IB_GID_INDEX": 3}
    docs = documents(lock, **{**MULTINODE, "rdma": {"enabled": True, "network": network, "resource": "rdma/roce_gdr", "count": 2}},
                     nccl=nccl)
    lws = kind(docs, "LeaderWorkerSet")
    pod = server_pod(docs)
    container = pod["containers"][0]
    assert container["resources"]["limits"]["rdma/roce_gdr"] == 2 == container["resources"]["requests"]["rdma/roce_gdr"]
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
    env = {e["name"]: e["value"] for e in container["env"]}
    assert {k: env[k] for k in nccl} == {k: str(v) for k, v in nccl.items()}
    annotations = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"].get("annotations", {})
    if network == "host":
        assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert not annotations
    else:
        assert "hostNetwork" not in pod and annotations == {"k8s.v1.cni.cncf.io/networks": "rdma-net"}
    assert restricted_violations(pod) and baseline_violations(pod), "RDMA is outside both levels: the rules must say so"
    assert kind(docs, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def test_nccl_variables_are_the_set_compose_passes():
    from sglang_stack.services import k8s_values
    from sglang_stack.services import composefile

    from sglang_stack.services.variables import Environment

    proj = composefile.project(Environment({}), (composefile.COMPOSE_FILE,))
    env = proj.config["services"][proj.default]["environment"]
    assert k8s_values.nccl_variables() == sorted(k for k in env if re.match(r"(NCCL|GLOO)_", k))
    assert {"NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"} <= set(k8s_values.nccl_variables())


# --- placement and disruptions ---------------------------------------------------------------------


def test_only_nodes_with_enough_gpu_memory_qualify(lock):
    pod = server_pod(documents(lock))
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    (rule,) = term["matchExpressions"]
    assert rule["key"] == "nvidia.com/gpu.memory" and rule["operator"] == "Gt"
    qualifies = lambda mib: mib > int(rule["values"][0])  # noqa: E731 (how the scheduler reads Gt)
    assert qualifies(97887) and qualifies(143771), "RTX PRO 6000 Blackwell (96 GB) and H200 must qualify"
    assert not qualifies(81559), "an 80 GB H100 cannot hold Kimi-K2.5 at TP 8"
    assert pod["tolerations"] == [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]
    assert "affinity" not in server_pod(documents(lock, placement={"min_gpu_memory_mib": 0}))


def test_placement_values_reach_the_pods(lock):
    spread = [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}]
    placement = {"node_selector": {"pool": "gpu"}, "priority_class": "serving", "topology_spread": spread,
                 "exclusive_topology": "example.com/rack"}
    pod = server_pod(documents(lock, placement=placement))
    assert pod["nodeSelector"] == {"pool": "gpu"} and pod["priorityClassName"] == "serving"
    assert pod["topologySpreadConstraints"] == spread
    lws = kind(documents(lock, **MULTINODE, placement=placement), "LeaderWorkerSet")
    assert lws["metadata"]["annotations"] == {"leaderworkerset.sigs.k8s.io/exclusive-topology": "example.com/rack"}


@pytest.mark.parametrize("values", [{}, MULTINODE], ids=["statefulset", "leaderworkerset"])
def test_disruption_budgets(lock, values):
    docs = documents(lock, **values)
    pdb = kind(docs, "PodDisruptionBudget", "sglang.yaml")
    assert pdb["spec"]["maxUnavailable"] == 1
    args = router_pod(docs)["containers"][0]["args"]
    selector = dict(item.split("=", 1) for item in flag(args, "--selector"))
    assert pdb["spec"]["selector"]["matchLabels"] == selector, "the budget counts exactly the pods that serve"
    assert not [d for d in docs["router.yaml"] if d["kind"] == "PodDisruptionBudget"], "one router: a budget would block drains"
    two = documents(lock, **values, router={"replicas": 2})
    router_pdb = kind(two, "PodDisruptionBudget", "router.yaml")
    labels = kind(two, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert router_pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


# --- probes, shutdown, cache ---------------------------------------------------------------------


def test_probes_split_cheap_liveness_from_generating_readiness(lock):
    container = server_pod(documents(lock, lifecycle={"startup_minutes": 45}))["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] == "false", "/health must not generate for liveness"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health_generate"
    assert container["readinessProbe"]["timeoutSeconds"] > 20, "must outwait SGLang's 20 s health generation"
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] == "/health"
    assert startup["periodSeconds"] * startup["failureThreshold"] == 45 * 60, startup
    assert "--enable-metrics" in container["args"]


def test_grace_periods_outlast_the_drains(lock):
    docs = documents(lock, lifecycle={"drain_seconds": 600}, router={"drain_seconds": 120})
    pod, router = server_pod(docs), router_pod(docs)
    stop = pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert stop[0] == "sleep" and pod["terminationGracePeriodSeconds"] >= int(stop[1]) + 600
    args = router["containers"][0]["args"]
    assert flag(args, "--shutdown-grace-period-secs") == ["120"]
    stop = router["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert router["terminationGracePeriodSeconds"] >= int(stop[1]) + 120


def test_the_jit_cache_survives_a_restart(lock):
    docs = documents(lock, lifecycle={"cache_size": "80Gi", "cache_storage_class": "local-nvme"})
    sts = kind(docs, "StatefulSet")
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "cache" and claim["spec"]["resources"]["requests"]["storage"] == "80Gi"
    assert claim["spec"]["storageClassName"] == "local-nvme"
    assert "cache" not in {v["name"] for v in sts["spec"]["template"]["spec"]["volumes"]}, "the claim, not an emptyDir"
    assert sts["spec"]["template"]["spec"]["securityContext"]["fsGroup"] == 10001, "uid 10001 must write a fresh claim"
    lws = kind(documents(lock, **MULTINODE), "LeaderWorkerSet")
    assert lws["spec"]["leaderWorkerTemplate"]["volumeClaimTemplates"][0]["metadata"]["name"] == "cache"
    pod = server_pod(documents(lock, lifecycle={"cache_size": "0"}))
    assert {"name": "cache", "emptyDir": {}} in pod["volumes"]


# --- hardening, secrets ----------------------------------------------------------------------------


def test_single_node_pods_pass_podsecurity_restricted(lock):
    docs = documents(lock)
    for pod in (server_pod(docs), router_pod(docs)):
        assert restricted_violations(pod) == [], restricted_violations(pod)
    assert server_pod(docs)["enableServiceLinks"] is False and router_pod(docs)["enableServiceLinks"] is False
    assert kind(docs, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_restricted_rules_can_fail():
    pod = {"containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                                                            "capabilities": {"drop": ["ALL"]}}}]}
    assert restricted_violations(pod) == ["c: seccompProfile None"]
    pod["securityContext"] = {"seccompProfile": {"type": "RuntimeDefault"}}
    assert restricted_violations(pod) == []
    pod["volumes"] = [{"name": "ib", "hostPath": {"path": "/dev/infiniband"}}]
    assert restricted_violations(pod) == ["volume ib: ['hostPath']"] and baseline_violations(pod)


def test_secrets_are_files_and_nothing_secret_is_rendered(lock):
    docs = documents(lock)
    pod = server_pod(docs)
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert not {"SGLANG_API_KEY", "HF_TOKEN"} & set(env), "no secret may be an environment variable"
    assert env["HF_TOKEN_PATH"]["value"] == "/run/secrets/sglang-stack/hf_token"
    assert env["SGLANG_API_KEY_FILE"]["value"] == "/run/secrets/sglang-stack/sglang_api_key"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    # the whole directory, never a subPath: the kubelet swaps a rotated Secret in place only then
    assert mounts["secrets"] == {"name": "secrets", "mountPath": "/run/secrets/sglang-stack", "readOnly": True}
    assert not [m for m in container["volumeMounts"] if m["name"] == "secrets" and "subPath" in m]
    sources = {s["secret"]["items"][0]["key"]: s["secret"] for s in {v["name"]: v for v in pod["volumes"]}["secrets"]["projected"]["sources"]}
    assert sources["SGLANG_API_KEY"]["items"] == [{"key": "SGLANG_API_KEY", "path": "sglang_api_key"}]
    assert not sources["SGLANG_API_KEY"].get("optional"), "a missing key must stop the pod, not start it open"
    assert sources["HF_TOKEN"]["optional"] is True
    assert not [a for a in container["args"] if "api-key" in a.lower() or "hf-token" in a.lower()], container["args"]
    router_spec = router_pod(docs)
    router = router_spec["containers"][0]
    assert {m["mountPath"] for m in router["volumeMounts"]} == {"/run/secrets/sglang-stack", "/tmp"}
    assert router["env"] == [{"name": "SGLANG_API_KEY_FILE", "value": "/run/secrets/sglang-stack/sglang_api_key"}]
    router_sources = {v["name"]: v for v in router_spec["volumes"]}["secrets"]["projected"]["sources"]
    assert [s["secret"]["items"][0]["key"] for s in router_sources] == ["SGLANG_API_KEY"], "the router needs the key only"
    text = "".join(k8s.render_text(lock, k8s.load_values()).values())
    assert "kind: Secret\n" not in text, "no Secret object is rendered"
    assert not re.search(r"hf_[A-Za-z0-9]{20,}", text), "no token value is rendered"


def test_the_servers_take_connections_only_from_the_namespace_the_router_and_each_other(lock):
    docs = documents(lock, network_policy={"from_namespaces": {"kubernetes.io/metadata.name": "monitoring"}})
    policy = kind(docs, "NetworkPolicy", "sglang.yaml")
    pod_labels = kind(docs, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items(), "the policy selects the servers"
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"], "what the servers may open is a list too"
    server_labels = policy["spec"]["podSelector"]["matchLabels"]
    assert policy["spec"]["egress"] == [{"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
                                        {"to": [{"podSelector": {"matchLabels": server_labels}}]}], \
        "DNS and the servers of the set: no internet for a server of a mounted model"
    rules = policy["spec"]["ingress"]
    assert rules[0] == {"from": [{"podSelector": {}}], "ports": [{"port": 30000, "protocol": "TCP"}]}, \
        "every pod of the namespace, the router too, on SGLang's port only"
    assert rules[1] == {"from": [{"podSelector": {"matchLabels": policy["spec"]["podSelector"]["matchLabels"]}}]}, \
        "the servers of one set reach each other on any port (torch.distributed, NCCL)"
    assert rules[2]["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    router_labels = kind(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert router_labels, "the router is a pod of the namespace: the first rule admits it"
    assert "NetworkPolicy" not in [d["kind"] for d in documents(lock, network_policy={"enabled": False})["sglang.yaml"]]
    router_policy = next(d for d in docs["router.yaml"] if d["kind"] == "NetworkPolicy")
    assert router_policy["spec"]["podSelector"]["matchLabels"].items() <= router_labels.items(), "the router's own policy"
    assert router_policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {}}], "ports": [{"port": 30080, "protocol": "TCP"}]},
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
         "ports": [{"port": 30080, "protocol": "TCP"}, {"port": 29000, "protocol": "TCP"}]}], \
        "its metrics port only from the namespaces selected (a Prometheus)"
    assert {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]} in router_policy["spec"]["egress"], \
        "discovery reads the Kubernetes API"
    static = documents(lock, router={"discovery": False}, network_policy={"egress_to": ["10.20.0.0/16"]})
    static_policy = next(d for d in static["router.yaml"] if d["kind"] == "NetworkPolicy")
    assert static_policy["spec"]["egress"][2:] == [{"to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}]}], \
        "no API server without discovery; egress_to adds its CIDRs"
    with pytest.raises(UserError, match="egress_to.*'the internet' is not a CIDR"):
        documents(lock, network_policy={"egress_to": ["the internet"]})
    host = documents(lock, **MULTINODE)
    assert "NetworkPolicy" not in [d["kind"] for d in host["sglang.yaml"]], "host-network pods: a policy would not apply"
    assert "a NetworkPolicy does not apply" in k8s.render_text(lock, {**k8s.load_values(), **MULTINODE})["sglang.yaml"]


def test_every_container_runs_on_a_read_only_root_with_its_own_tmp(lock):
    for docs in (documents(lock), documents(lock, **MULTINODE)):
        for spec in (server_pod(docs), router_pod(docs)):
            volumes = {v["name"]: v for v in spec["volumes"]}
            for container in spec["containers"]:
                assert container["securityContext"]["readOnlyRootFilesystem"] is True, container["name"]
                tmp = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
                assert tmp and "emptyDir" in volumes[tmp[0]["name"]], f"{container['name']}: /tmp is writable scratch"
                cache = [m for m in container["volumeMounts"] if m["mountPath"] == "/home/sglang/.cache"]
                assert container["name"] == "router" or cache, "SGLang's caches (JIT, DeepGEMM, the Hub) stay writable"


def test_the_pods_run_an_image_by_its_registry_digest_when_one_is_known(lock):
    digest = "registry.example.com/sglang-stack@sha256:" + "a" * 64
    docs = {name: [d for d in yaml.safe_load_all(text) if d]
            for name, text in k8s.render_text(lock, k8s.load_values(), pinned={lock.tag: digest}).items()}
    assert server_pod(docs)["containers"][0]["image"] == digest, "the tag's registry digest, not the tag"
    assert kind(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"] == lock.router_tag, \
        "no digest known for the router's tag: the tag"
    chosen = k8s.render_text(lock, {**k8s.load_values(), "image": "mine@sha256:" + "b" * 64}, pinned={lock.tag: digest})
    assert f'image: "mine@sha256:{"b" * 64}"' in chosen["sglang.yaml"], \
        "the values' image wins over what the store knows, quoted: a value is never YAML of its own"
