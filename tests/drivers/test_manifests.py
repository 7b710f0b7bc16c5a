"""Every manifest the renderers produce for the reference specs is valid Kubernetes.

Built-in kinds are checked strictly (unknown fields fail) against the schemas of Kubernetes 1.29
to 1.34 with kubernetes-validate; an unknown apiVersion is a failure. LeaderWorkerSets are checked
against the upstream LWS CRD schema read from the shared reference folder.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from deployments.cluster_settings import ClaimCache, ClusterSettings
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.render import KubeOptions, render_revision
from tests.drivers.reference_specs import REF, golden_names, load_spec, revision_plan

K8S_VERSIONS = ["1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0"]
# shared/ lies beside the checkout (CI clones main next to a copy of it).
LWS_CRD = Path(__file__).resolve().parents[3] / "shared" / "reference" / "lws-crd.yaml"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


@cache
def lws_schema() -> dict[str, Any]:
    crd = yaml.safe_load(LWS_CRD.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return version["schema"]["openAPIV3Schema"]


def rendered(name: str, **options: Any) -> list[dict[str, Any]]:
    plan = revision_plan(load_spec(name), hf_token="hf_secret_value")
    return render_revision(REF, plan, KubeOptions(**options))


@pytest.mark.parametrize("name", golden_names())
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_builtin_kinds_validate_strictly(name: str, version: str) -> None:
    for obj in rendered(name):
        if obj["kind"] == "LeaderWorkerSet":
            continue
        # Raises ValidationError (unknown field, wrong type) or SchemaNotFoundError (apiVersion).
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("name", golden_names())
def test_model_cache_claim_variant_validates(name: str) -> None:
    claim = ClusterSettings(
        model_cache=ClaimCache(claim_name="models"), image_pull_secrets=("regcred",)
    )
    for obj in rendered(name, cluster=claim):
        if obj["kind"] != "LeaderWorkerSet":
            kubernetes_validate.validate(obj, K8S_VERSIONS[-1], strict=True)


def test_an_unknown_field_is_refused() -> None:
    obj = next(o for o in rendered("llama-3.1-8b-h100") if o["kind"] == "Deployment")
    obj["spec"]["replicaz"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, "1.29.0", strict=True)


def test_multi_node_replica_is_a_leader_worker_set_valid_against_the_crd() -> None:
    objs = rendered("deepseek-v3-tp16-2x-h200")
    lws = [o for o in objs if o["kind"] == "LeaderWorkerSet"]
    assert len(lws) == 1
    jsonschema.validate(lws[0], lws_schema())
    template = lws[0]["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    leader = template["leaderTemplate"]["spec"]["containers"][0]
    worker = template["workerTemplate"]["spec"]["containers"][0]
    assert "readinessProbe" in leader and "readinessProbe" not in worker
    assert "$(LWS_LEADER_ADDRESS):20000" in leader["args"]
    assert leader["args"][leader["args"].index("--node-rank") + 1] == "$(LWS_WORKER_INDEX)"


def test_lws_schema_catches_a_bad_object() -> None:
    lws = next(o for o in rendered("deepseek-v3-tp16-2x-h200") if o["kind"] == "LeaderWorkerSet")
    lws["spec"]["leaderWorkerTemplate"]["size"] = "two"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(lws, lws_schema())


@pytest.mark.parametrize("name", golden_names())
def test_labels_names_and_selectors_agree(name: str) -> None:
    objs = rendered(name)
    for obj in objs:
        meta = obj["metadata"]
        assert meta["namespace"] == REF.namespace
        assert meta["labels"][L.MANAGED_BY] == "plinth"
        assert meta["labels"][L.DEPLOYMENT] == REF.id
        assert meta["labels"][L.REVISION] == "1"
        assert L.CONFIG_HASH in meta["annotations"]
        assert len(meta["name"]) <= 63
        assert all(len(v) <= 63 for v in meta["labels"].values())
        if obj["kind"] == "Deployment":
            selector = obj["spec"]["selector"]["matchLabels"]
            pod_labels = obj["spec"]["template"]["metadata"]["labels"]
            assert selector.items() <= pod_labels.items()
            assert L.REVISION not in selector  # selectors are immutable; revisions change


def test_engine_deployment_has_surge_drain_gpu_shm_and_probes() -> None:
    objs = rendered("llama-3.3-70b-tp4-fp8-eagle3-h100")
    engine = next(
        o for o in objs if o["metadata"]["name"] == "chat-engine" and o["kind"] == "Deployment"
    )
    spec = engine["spec"]
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
    # Pinned to H100 nodes by GPU feature discovery's product label, the default GPU map.
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {
                    "key": "nvidia.com/gpu.product",
                    "operator": "In",
                    "values": ["NVIDIA-H100-80GB-HBM3"],
                }
            ]
        }
    ]
    assert "nodeSelector" not in pod
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert container["startupProbe"]["httpGet"]["path"] == "/ready"
    assert container["livenessProbe"]["timeoutSeconds"] > 20
    assert "preStop" in container["lifecycle"]
    # The hub token reaches the weights download before it (the default hostPath cache), not
    # the engine (tests/charts/test_weights_download.py).
    assert "HF_TOKEN" not in {e["name"] for e in container["env"]}
    token = next(e for e in pod["initContainers"][0]["env"] if e["name"] == "HF_TOKEN")
    assert token["valueFrom"]["secretKeyRef"]["name"] == "chat-hf-token"


def test_router_discovers_this_endpoints_pods_with_least_privilege() -> None:
    objs = rendered("llama-3.1-70b-pd-h100")
    router = next(
        o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "chat-router"
    )
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--service-discovery" in args
    assert f"{L.DEPLOYMENT}={REF.id}" in args
    assert "--prefill-selector" in args and "--decode-selector" in args
    role = next(o for o in objs if o["kind"] == "Role")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}
    ]
    kinds = {o["kind"] for o in objs}
    assert {"ServiceAccount", "RoleBinding", "PodDisruptionBudget", "Secret", "Service"} <= kinds


def test_rendering_is_deterministic() -> None:
    assert rendered("llama-3.1-8b-h100") == rendered("llama-3.1-8b-h100")


def test_a_hicache_engine_requests_its_host_tier_and_mounts_its_storage() -> None:
    """Issue 29: the host tier is pinned host memory, requested so the scheduler places the pod
    where it fits; the file storage tier is the node's directory, where SGLang is told to write."""
    engine = next(o for o in rendered("llama-3.1-8b-hicache-h100") if o["kind"] == "Deployment")
    pod = engine["spec"]["template"]["spec"]
    container = pod["containers"][0]
    host_tier = revision_plan(load_spec("llama-3.1-8b-hicache-h100")).plan.roles[0]
    memory = container["resources"]["requests"]["memory"]
    assert memory == f"{host_tier.host_tier_gib_per_node + 16}Gi"
    assert "memory" not in container["resources"]["limits"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "hicache-storage"]
    assert volume["hostPath"] == {"path": "/mnt/nvme/hicache", "type": "DirectoryOrCreate"}
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "hicache-storage"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"] == mount["mountPath"]


def test_a_warm_pool_engine_runs_its_agent_beside_the_engine() -> None:
    """Issue 29 item 6 on Kubernetes: each engine pod carries the warm pool's agent (its source
    in a ConfigMap, run by the engine image), the pod's annotation projected into it, its
    readiness gating the pod's; the engine's liveness asks the agent. Valid on every version."""
    spec = load_spec("llama-3.1-8b-h100")
    pool = {"min_replicas": 0, "max_replicas": 2, "scale_to_zero": True, "warm_replicas": 1}
    spec = spec.model_copy(update={"autoscaling": spec.autoscaling.model_copy(update=pool)})
    objects = render_revision(REF, revision_plan(spec), KubeOptions())
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSIONS[0], strict=True)
    [config_map] = [o for o in objects if o["kind"] == "ConfigMap"]
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    engine, agent = pod["containers"]
    assert agent["name"] == "warm-agent" and agent["image"] == engine["image"]
    assert "def main()" in config_map["data"]["warm_agent.py"]
    assert agent["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert engine["livenessProbe"]["httpGet"] == {"path": "/live", "port": 30010}
    assert "--enable-memory-saver" in engine["args"]
    projected = next(v for v in pod["volumes"] if "downwardAPI" in v)["downwardAPI"]["items"]
    assert projected[0]["fieldRef"]["fieldPath"] == f"metadata.annotations['{L.WARM}']"
    # The key reaches it from the Secret, never on its command line.
    assert not any("key" in a for a in agent["args"])
    # Without a pool, nothing of it.
    assert not any(o["kind"] == "ConfigMap" for o in rendered("llama-3.1-8b-h100"))


def _pod_templates(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, pod spec) of each pod template of a workload; none for other kinds."""
    spec, name = obj.get("spec") or {}, obj["metadata"]["name"]
    if obj["kind"] == "LeaderWorkerSet":
        lws = spec["leaderWorkerTemplate"]
        return [(f"{name}/{t}", lws[t]["spec"]) for t in ("leaderTemplate", "workerTemplate")]
    if "template" in spec:
        return [(name, spec["template"]["spec"])]
    return []


def _warm_pool_spec() -> Any:
    spec = load_spec("llama-3.1-8b-h100")
    pool = {"min_replicas": 0, "max_replicas": 2, "scale_to_zero": True, "warm_replicas": 1}
    return spec.model_copy(update={"autoscaling": spec.autoscaling.model_copy(update=pool)})


@pytest.mark.parametrize("name", [*golden_names(), "warm-pool"])
def test_engine_pods_mount_no_service_account_token_and_the_router_keeps_its(name: str) -> None:
    """Least privilege: engines (single-node, each node of a LeaderWorkerSet, prefill/decode
    pools, with a warm pool's agent) never call the Kubernetes API; the router discovers them."""
    spec = _warm_pool_spec() if name == "warm-pool" else load_spec(name)
    objects = render_revision(REF, revision_plan(spec), KubeOptions())
    pods = [pod for obj in objects for pod in _pod_templates(obj)]
    router = [pod for pod_name, pod in pods if pod_name == "chat-router"]
    engines = [(pod_name, pod) for pod_name, pod in pods if pod_name != "chat-router"]
    # The router's own account mounts its token (``router_rbac``).
    assert router and router[0]["serviceAccountName"] == "chat-router"
    assert "automountServiceAccountToken" not in router[0]
    assert engines
    for pod_name, pod in engines:
        assert pod.get("automountServiceAccountToken") is False, pod_name
        assert "serviceAccountName" not in pod, pod_name


def test_an_engine_service_account_the_operator_names_keeps_its_own_token_setting() -> None:
    """A ServiceAccount named for engine pods (a cloud workload identity, say) decides itself
    whether its token is mounted: the pod does not override it."""
    named = ClusterSettings(service_account_name="engine-identity")
    for obj in rendered("deepseek-v3-tp16-2x-h200", cluster=named):
        for pod_name, pod in _pod_templates(obj):
            if pod_name != "chat-router" and "serviceAccountName" in pod:
                assert pod["serviceAccountName"] == "engine-identity"
                assert "automountServiceAccountToken" not in pod, pod_name
