"""GPU placement: engine pods land only on nodes of the spec's GPU type.

Against the Kubernetes API emulator holding labelled Nodes (H100 and H200, tainted as GPU nodes
are, plus a CPU node): the driver applies an endpoint, the test reads the workload back as the
cluster stored it and asks ``placement.eligible_nodes`` (the scheduler's node filters: selector,
required affinity, taints, cordons, GPU count) which of the listed nodes may take its pods.
The cluster's GPU inventory and the unschedulable reason are checked on the same nodes, and
every operator setting renders to manifests valid on Kubernetes 1.29-1.34.

Why the emulator (a stand-in, see kube_emulator.py): this file checks placement with
``placement.eligible_nodes``, a model of the scheduler's filters, over Nodes the test writes
(cordoned, too small, CPU-only, labelled as another cloud labels them), which kwok's nodes in
tests/kube_real are not: they are fixed for the session, and cordoning or relabelling them would
disturb its other tests. The real scheduler's verdicts (an H100 endpoint placed on H100 nodes, a
GPU type no node has, too few GPUs) are in tests/kube_real/test_endpoint_on_real_cluster.py; the
rest could move there with nodes of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from deployments.cluster_settings import (
    ClusterSettings,
    GpuSelector,
    HostPathCache,
    SharedClaimCache,
    Toleration,
)
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import KubeClient
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.observe import replica_facts
from deployments.drivers.kube.placement import eligible_nodes
from deployments.drivers.kube.render import KubeOptions, render_revision
from runtime.spec import RuntimeSpec
from tests.drivers.kube_emulator import RunningEmulator, running_emulator
from tests.drivers.reference_specs import REF, golden_names, load_spec, revision_plan
from tests.drivers.test_manifests import K8S_VERSIONS, lws_schema

H100 = "NVIDIA-H100-80GB-HBM3"
H200 = "NVIDIA-H200"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(name: str, product: str | None, gpus: int = 8, **spec: Any) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": "z1"}
    status: dict[str, Any] = {"allocatable": {"cpu": "96", "memory": "1Ti"}}
    if product:
        labels |= {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": product}
        status["allocatable"]["nvidia.com/gpu"] = str(gpus)
        spec.setdefault("taints", [GPU_TAINT])
    return {"metadata": {"name": name, "labels": labels}, "spec": spec, "status": status}


NODES = [
    node("h100-a", H100),
    node("h100-b", H100),
    node("h200-a", H200),
    node("h200-b", H200),
    node("h100-cordoned", H100, unschedulable=True),
    node("h100-small", H100, gpus=2),
    node("cpu-1", None),
]


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[RunningEmulator, KubeClient]]:
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    with running_emulator() as emulator:
        for obj in NODES:
            emulator.put("v1", "Node", None, obj)  # type: ignore[arg-type]  # cluster-scoped
        client = KubeClient.for_host(emulator.url)
        yield emulator, client
        client.close()


def listed_nodes(client: KubeClient) -> list[dict[str, Any]]:
    nodes, _ = client.gpu_nodes_and_pods()
    return nodes


def applied_pod_spec(emulator: RunningEmulator, kind: str, name: str) -> dict[str, Any]:
    api = "apps/v1" if kind == "Deployment" else "leaderworkerset.x-k8s.io/v1"
    stored = emulator.get(api, kind, REF.namespace, name)
    assert stored is not None, f"{kind} {name} was not applied"
    if kind == "Deployment":
        return stored["spec"]["template"]["spec"]
    return stored["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]


def test_an_h100_endpoint_only_ever_schedules_on_h100_nodes(cluster: Any) -> None:
    emulator, client = cluster
    KubeDriver(client).apply(REF, revision_plan(load_spec("llama-3.1-8b-h100")))
    pod = applied_pod_spec(emulator, "Deployment", "chat-engine")
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": [H100]}
            ]
        }
    ]
    # Cordoned, too small (for 1 GPU the 2-GPU node fits), H200 and CPU nodes: not the H200s.
    assert eligible_nodes(pod, listed_nodes(client)) == ["h100-a", "h100-b", "h100-small"]
    # The router needs no GPU node and is not pinned to one.
    router = applied_pod_spec(emulator, "Deployment", "chat-router")
    assert "affinity" not in router
    assert "h200-a" not in eligible_nodes(router, listed_nodes(client))  # GPU taint, no toleration
    assert "cpu-1" in eligible_nodes(router, listed_nodes(client))


def test_a_replica_larger_than_a_node_fits_only_full_nodes(cluster: Any) -> None:
    emulator, client = cluster
    KubeDriver(client).apply(REF, revision_plan(load_spec("llama-3.3-70b-tp4-fp8-eagle3-h100")))
    pod = applied_pod_spec(emulator, "Deployment", "chat-engine")
    assert eligible_nodes(pod, listed_nodes(client)) == ["h100-a", "h100-b"]


def test_multi_node_replicas_stay_on_one_gpu_type_and_prefer_one_domain(cluster: Any) -> None:
    emulator, client = cluster
    options = KubeOptions(cluster=ClusterSettings(topology_label="topology.kubernetes.io/zone"))
    spec = load_spec("deepseek-v3-tp16-2x-h200")
    KubeDriver(client, options).apply(REF, revision_plan(spec))
    stored = emulator.get("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", REF.namespace,
                          "chat-engine")  # fmt: skip
    assert stored is not None
    group = stored["spec"]["leaderWorkerTemplate"]
    for template in (group["leaderTemplate"], group["workerTemplate"]):
        pod = template["spec"]
        assert eligible_nodes(pod, listed_nodes(client)) == ["h200-a", "h200-b"]
        [preferred] = pod["affinity"]["podAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ]
        term = preferred["podAffinityTerm"]
        assert term["topologyKey"] == "topology.kubernetes.io/zone"
        assert term["matchLabelKeys"] == [L.LWS_GROUP_KEY]
        assert template["metadata"]["labels"][L.GPU] == "H200"


def test_an_operator_gpu_map_and_tolerations_decide_placement(cluster: Any) -> None:
    _, client = cluster
    nodes = [*listed_nodes(client), node("gke-h100", None)]
    nodes[-1]["metadata"]["labels"]["cloud.google.com/gke-accelerator"] = "nvidia-h100-80gb"
    nodes[-1]["status"]["allocatable"]["nvidia.com/gpu"] = "8"
    gke = GpuSelector(label="cloud.google.com/gke-accelerator", values=("nvidia-h100-80gb",))
    settings = ClusterSettings(gpu_map={"h100": gke})
    plan = revision_plan(load_spec("llama-3.1-8b-h100"))
    engine = next(
        o for o in render_revision(REF, plan, KubeOptions(cluster=settings))
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "chat-engine"
    )  # fmt: skip
    assert eligible_nodes(engine["spec"]["template"]["spec"], nodes) == ["gke-h100"]
    # Without a toleration for the GPU taint no tainted GPU node takes the pod.
    bare = ClusterSettings(gpu_tolerations=())
    engine = next(
        o for o in render_revision(REF, plan, KubeOptions(cluster=bare))
        if o["kind"] == "Deployment" and o["metadata"]["name"] == "chat-engine"
    )  # fmt: skip
    assert eligible_nodes(engine["spec"]["template"]["spec"], listed_nodes(client)) == []


def test_the_gpu_inventory_counts_nodes_and_free_gpus_per_type(cluster: Any) -> None:
    emulator, client = cluster
    busy = {"containers": [{"name": "x", "resources": {"requests": {"nvidia.com/gpu": "3"}}}]}
    emulator.put("v1", "Pod", "other", {"metadata": {"name": "busy", "namespace": "other"},
                                        "spec": {**busy, "nodeName": "h100-a"},
                                        "status": {"phase": "Running"}})  # fmt: skip
    emulator.put("v1", "Pod", "other", {"metadata": {"name": "done", "namespace": "other"},
                                        "spec": {**busy, "nodeName": "h100-b"},
                                        "status": {"phase": "Succeeded"}})  # fmt: skip
    inventory = KubeDriver(client).gpu_inventory()
    rows = {row["name"]: row for row in inventory["nodes"]}
    assert "cpu-1" not in rows  # no GPUs: not part of the inventory
    assert rows["h100-a"] == {"name": "h100-a", "gpu": "H100-SXM", "product": H100,
                              "allocatable": 8, "allocated": 3, "schedulable": True}  # fmt: skip
    assert rows["h100-b"]["allocated"] == 0  # a finished pod holds nothing
    assert rows["h100-cordoned"]["schedulable"] is False
    assert inventory["gpus"] == {
        "H100-SXM": {"nodes": 3, "gpus": 18, "free": 15},
        "H200": {"nodes": 2, "gpus": 16, "free": 16},
    }


def test_an_unschedulable_replica_names_the_gpu_type_it_waits_for() -> None:
    plan = revision_plan(load_spec("llama-3.3-70b-tp4-fp8-eagle3-h100"))
    engine = next(o for o in render_revision(REF, plan) if o["kind"] == "Deployment")
    template = engine["spec"]["template"]
    pod = {
        "metadata": {"name": "chat-engine-1", "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/7 nodes are available: 5 node(s) didn't match Pod's node "
                    "affinity/selector.",
                }
            ],
        },
    }
    facts = replica_facts(pod)
    assert facts.reason == "Unschedulable"
    assert facts.message.startswith("no node with 4 free H100-SXM GPU(s) can take this replica: ")
    assert "node affinity" in facts.message


EVERYTHING = ClusterSettings(
    gpu_map={"H200": {"values": [H200, "NVIDIA-H200-SHARED"]}},  # type: ignore[dict-item]
    gpu_tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),),
    topology_label="nvidia.com/gpu.clique",
    node_selector={"pool": "inference"},
    tolerations=(
        Toleration(key="dedicated", value="llm", effect="NoExecute", toleration_seconds=60),
    ),
    priority_class_name="llm-serving",
    runtime_class_name="nvidia",
    service_account_name="engine-reader",
    image_pull_secrets=("regcred", "mirror"),
    engine_images={"0.5.23": "registry.example.com/sglang:0.5.23-cu129"},
    router_image="registry.example.com/smg:1.13.0",
    model_cache=SharedClaimCache(storage_class="cephfs", size_gib=800),
    labels={"team": "ml", "example.com/cost-centre": "42"},
    annotations={"example.com/owner": "ML platform <ml@example.com>"},
    tenant_overrides=(),
)


@pytest.mark.parametrize("name", golden_names())
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_every_operator_setting_renders_valid_manifests(name: str, version: str) -> None:
    plan = revision_plan(load_spec(name), hf_token="hf_secret_value")
    for obj in render_revision(REF, plan, KubeOptions(cluster=EVERYTHING)):
        if obj["kind"] == "LeaderWorkerSet":
            jsonschema.validate(obj, lws_schema())
        else:
            kubernetes_validate.validate(obj, version, strict=True)


def test_operator_settings_reach_every_pod() -> None:
    plan = revision_plan(load_spec("llama-3.1-70b-pd-h100"))
    objs = render_revision(REF, plan, KubeOptions(cluster=EVERYTHING))
    claim = next(o for o in objs if o["kind"] == "PersistentVolumeClaim")
    assert claim["metadata"]["name"] == "chat-model-cache"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "cephfs"
    for obj in objs:
        assert obj["metadata"]["labels"]["team"] == "ml"
        assert obj["metadata"]["annotations"]["example.com/owner"].startswith("ML platform")
    workloads = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment"}
    router = workloads.pop("chat-router")["spec"]["template"]["spec"]
    assert router["containers"][0]["image"] == "registry.example.com/smg:1.13.0"
    assert router["nodeSelector"] == {"pool": "inference"}
    assert router["priorityClassName"] == "llm-serving"
    assert router["serviceAccountName"] == "chat-router"  # its own: pod discovery
    assert "runtimeClassName" not in router
    assert [t["key"] for t in router["tolerations"]] == ["dedicated"]
    assert workloads, "prefill and decode"
    for workload in workloads.values():
        template = workload["spec"]["template"]
        assert template["metadata"]["labels"]["team"] == "ml"
        assert workload["spec"]["selector"]["matchLabels"].keys() == {L.DEPLOYMENT, L.ROLE}
        pod = template["spec"]
        assert pod["containers"][0]["image"] == "registry.example.com/sglang:0.5.23-cu129"
        assert pod["runtimeClassName"] == "nvidia"
        assert pod["serviceAccountName"] == "engine-reader"
        assert pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
        assert pod["tolerations"] == [
            {"operator": "Exists", "key": "nvidia.com/gpu", "effect": "NoSchedule"},
            {"operator": "Equal", "key": "dedicated", "value": "llm", "effect": "NoExecute",
             "tolerationSeconds": 60},
        ]  # fmt: skip
        cache = next(v for v in pod["volumes"] if v["name"] == "model-cache")
        assert cache == {"name": "model-cache",
                         "persistentVolumeClaim": {"claimName": "chat-model-cache"}}  # fmt: skip


def test_a_tenant_image_is_used_only_where_the_operator_allows_it() -> None:
    data = load_spec("llama-3.1-8b-h100").model_dump(mode="json")
    data["runtime"]["image"] = "tenant.example.com/sglang:custom"
    plan = revision_plan(RuntimeSpec.model_validate(data))

    def engine_image(settings: ClusterSettings) -> str:
        objs = render_revision(REF, plan, KubeOptions(cluster=settings))
        engine = next(o for o in objs if o["metadata"]["name"] == "chat-engine"
                      and o["kind"] == "Deployment")  # fmt: skip
        return str(engine["spec"]["template"]["spec"]["containers"][0]["image"])

    assert engine_image(ClusterSettings()) == "tenant.example.com/sglang:custom"
    assert engine_image(EVERYTHING) == "registry.example.com/sglang:0.5.23-cu129"
    assert engine_image(ClusterSettings(tenant_overrides=())) == "lmsysorg/sglang:v0.5.23"
    host = ClusterSettings(model_cache=HostPathCache(path="/mnt/nvme/models"))
    objs = render_revision(REF, plan, KubeOptions(cluster=host))
    engine = next(o for o in objs if o["kind"] == "Deployment")
    volumes = engine["spec"]["template"]["spec"]["volumes"]
    host_path = {"path": "/mnt/nvme/models", "type": "DirectoryOrCreate"}
    assert {"name": "model-cache", "hostPath": host_path} in volumes
