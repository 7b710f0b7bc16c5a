"""An endpoint's life on a real API server and real controllers, through Plinth's own Kubernetes
driver: every rendered object accepted by server-side apply, pods created by the Deployment and
ReplicaSet controllers and placed by the real scheduler on kwok's GPU nodes, the scheduler's own
words when GPUs run short, and garbage collection through ownerReferences on delete.

What the emulator in tests/drivers cannot show: its objects are whatever our test code makes them.
Multi-node replicas (LeaderWorkerSets) have their own file, test_multi_node_on_real_cluster.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from deployments.cluster_settings import ClaimCache, SharedClaimCache
from deployments.drivers import base
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import FIELD_MANAGER, KubeClient, kind_of
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.render import KubeOptions, render_revision
from runtime import launch
from tests.drivers.reference_specs import golden_names, load_spec, revision_plan
from tests.kube_real.conftest import GPU_NODES, GPUS_PER_NODE, SETTLE_S, Admin, wait_nothing_left
from tests.waiting import wait_until


def plan(name: str = "llama-3.1-8b-h100", replicas: int | None = None) -> base.RevisionPlan:
    if replicas is None:
        return revision_plan(load_spec(name))
    spec = load_spec(name)
    launch_plan = launch.plan(spec, deployment_labels={"deployment": "chat"})
    return base.RevisionPlan.for_spec(spec, launch_plan, number=1, replicas=replicas)


def path_of(manifest: dict[str, Any]) -> str:
    kind = kind_of(manifest["apiVersion"], manifest["kind"])
    return kind.path(manifest["metadata"].get("namespace"), manifest["metadata"]["name"])


def items(admin: Admin, path: str) -> list[dict[str, Any]]:
    return list((admin.call("GET", path).get("items")) or [])


def endpoint_items(admin: Admin, path: str, ref: base.DeploymentRef) -> list[dict[str, Any]]:
    """The objects at ``path`` that are the endpoint's: Plinth's labels for it, or owned by
    another object (what controllers make); not the tests' own RBAC for the worker."""
    return [
        o
        for o in items(admin, path)
        if L.is_ours(o, ref.id) or o["metadata"].get("ownerReferences")
    ]


def unschedulable_replica(driver: KubeDriver, ref: base.DeploymentRef) -> base.ReplicaFacts:
    """The first engine replica the driver reports the scheduler cannot place (waited for)."""

    def find() -> base.ReplicaFacts | None:
        engines = driver.observe(ref).engines()
        return next((r for r in engines if r.reason == "Unschedulable"), None)

    found = wait_until(find, "a replica the scheduler cannot place", SETTLE_S, interval=1.0)
    assert found is not None
    return found


@pytest.mark.parametrize("name", golden_names())
def test_the_api_server_accepts_every_object_plinth_renders(
    name: str, driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    driver.apply(ref, plan(name))
    for manifest in render_revision(ref, plan(name)):
        live = admin.get(path_of(manifest))
        assert live is not None, f"{manifest['kind']} {manifest['metadata']['name']}"
        managers = {m.get("manager") for m in live["metadata"].get("managedFields") or []}
        assert FIELD_MANAGER in managers
        assert L.is_ours(live, ref.id)


def test_a_second_pass_over_the_real_objects_writes_nothing(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    """The set hash and config hashes survive the API server's defaulting: a settled endpoint
    is not rewritten (no resourceVersion changes) on the next pass."""
    driver.apply(ref, plan())
    manifests = render_revision(ref, plan())
    before = {
        path_of(m): admin.call("GET", path_of(m))["metadata"]["resourceVersion"]
        for m in manifests
        if m["kind"] != "Deployment"
    }  # status changes Deployments
    driver.apply(ref, plan())
    driver.close()
    after = {p: admin.call("GET", p)["metadata"]["resourceVersion"] for p in before}
    assert after == before


def test_an_endpoint_becomes_ready_on_the_real_scheduler_and_kwok_gpu_nodes(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    revision = plan()
    driver.apply(ref, revision)
    observed = wait_until(
        lambda: (
            (o := driver.observe(ref)).ready_count(1) == revision.replicas and o.router_ready and o
        ),
        "the engines and the router report ready",
        SETTLE_S,
        interval=1.0,
    )
    assert isinstance(observed, base.Observation)
    ns = ref.namespace
    pods = items(admin, f"/api/v1/namespaces/{ns}/pods")
    engines = [p for p in pods if p["metadata"]["labels"].get(L.ROLE) != "router"]
    engine_nodes = {p["spec"]["nodeName"] for p in engines}
    assert engine_nodes and all(n.startswith("kwok-h100-sxm-") for n in engine_nodes)
    # Least privilege as the API server's ServiceAccount admission applies it: no token in an
    # engine pod (the projected kube-api-access volume), the router's (it discovers pods) kept.
    routers = [p for p in pods if p["metadata"]["labels"].get(L.ROLE) == "router"]
    assert routers and all(_token_mounted(p) for p in routers)
    assert not any(_token_mounted(p) for p in engines)
    # The real Deployment controller made the ReplicaSets, each owned by its Deployment.
    sets = items(admin, f"/apis/apps/v1/namespaces/{ns}/replicasets")
    owners = {o["kind"] for rs in sets for o in rs["metadata"].get("ownerReferences") or []}
    assert sets and owners == {"Deployment"}


def _token_mounted(pod: dict[str, Any]) -> bool:
    volumes = pod["spec"].get("volumes") or []
    return any(v["name"].startswith("kube-api-access-") for v in volumes)


def test_not_enough_gpus_shows_the_schedulers_own_words(
    driver: KubeDriver, ref: base.DeploymentRef
) -> None:
    name = "llama-3.3-70b-nvfp4-b200"
    engine = next(m for m in render_revision(ref, plan(name)) if m["kind"] == "Deployment")
    limits = engine["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    per_pod = int(limits["nvidia.com/gpu"])
    # One replica more than the B200 nodes can hold, whatever else runs on the cluster.
    replicas = GPU_NODES["B200"] * GPUS_PER_NODE // per_pod + 1
    driver.apply(ref, plan(name, replicas=replicas))

    pending = unschedulable_replica(driver, ref)
    assert pending.phase == base.PENDING
    assert "Insufficient nvidia.com/gpu" in pending.message
    assert "nodes are available" in pending.message  # the scheduler's "0/N nodes are available"


def test_a_gpu_type_no_node_has_says_no_node_matches(
    worker_client: KubeClient, ref: base.DeploymentRef
) -> None:
    """The cluster maps H100 to a product no node carries: the scheduler says no node matches
    the pod's node affinity."""
    settings = KubeOptions().cluster.model_copy(deep=True)
    gpu_map = {**settings.gpu_map}
    gpu_map["H100-SXM"] = gpu_map["H100-SXM"].model_copy(update={"values": ("NVIDIA-H100-NONE",)})
    options = KubeOptions(cluster=settings.model_copy(update={"gpu_map": gpu_map}))
    driver = KubeDriver(worker_client, options, has_lws=False)
    driver.apply(ref, plan())

    pending = unschedulable_replica(driver, ref)
    assert "didn't match Pod's node affinity/selector" in pending.message


def test_delete_leaves_nothing_behind(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    revision = plan()
    driver.apply(ref, revision)
    wait_until(
        lambda: driver.observe(ref).ready_count(1) == revision.replicas,
        "the engines report ready",
        SETTLE_S,
        interval=1.0,
    )
    wait_until(
        lambda: driver.delete(ref), "the driver sees everything gone", SETTLE_S, interval=1.0
    )
    ns = ref.namespace
    # What Plinth never names itself goes by ownerReferences: ReplicaSets, EndpointSlices (the
    # driver deletes in the foreground, so their owners stay until they are gone).
    paths = (
        f"/apis/apps/v1/namespaces/{ns}/replicasets",
        f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices",
        f"/api/v1/namespaces/{ns}/pods",
        f"/apis/apps/v1/namespaces/{ns}/deployments",
        f"/api/v1/namespaces/{ns}/services",
        f"/api/v1/namespaces/{ns}/secrets",
        f"/api/v1/namespaces/{ns}/serviceaccounts",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    )

    wait_nothing_left(paths, lambda p: endpoint_items(admin, p, ref))
    assert driver.observe(ref).empty


def wait_ready(driver: KubeDriver, ref: base.DeploymentRef, revision: base.RevisionPlan) -> None:
    """Until the driver reports every engine of ``revision`` ready and none of another."""

    def settled() -> bool:
        observed = driver.observe(ref)
        others = [r for r in observed.engines() if r.revision != revision.number]
        return observed.ready_count(revision.number) == revision.replicas and not others

    wait_until(settled, f"revision {revision.number} alone is ready", SETTLE_S, interval=1.0)


def numbered(name: str, number: int, replicas: int | None = None) -> base.RevisionPlan:
    spec = load_spec(name)
    launch_plan = launch.plan(spec, deployment_labels={"deployment": "chat"})
    engine = next(r for r in launch_plan.roles if r.role != "router")
    count = engine.replicas if replicas is None else replicas
    return base.RevisionPlan.for_spec(spec, launch_plan, number=number, replicas=count)


def test_edit_rollback_and_scale_are_rolling_updates_of_one_deployment(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    """Each change is applied to the same Deployment (its selector never changes, which the API
    server would refuse), and the real Deployment controller replaces the pods."""
    path = f"/apis/apps/v1/namespaces/{ref.namespace}/deployments/chat-engine"
    first = numbered("llama-3.1-8b-h100", 1)
    driver.apply(ref, first)
    wait_ready(driver, ref, first)
    selector = admin.call("GET", path)["spec"]["selector"]
    for revision in (
        numbered("llama-3.1-8b-ngram-h100", 2),  # an edit
        numbered("llama-3.1-8b-h100", 3),  # a rollback: revision 1's settings again
        numbered("llama-3.1-8b-h100", 4, replicas=2),  # a scale
    ):
        driver.apply(ref, revision)
        wait_ready(driver, ref, revision)
        assert admin.call("GET", path)["spec"]["selector"] == selector
    sets = items(admin, f"/apis/apps/v1/namespaces/{ref.namespace}/replicasets")
    assert len({rs["metadata"]["name"] for rs in sets if "engine" in rs["metadata"]["name"]}) > 1


def test_stop_then_start(driver: KubeDriver, ref: base.DeploymentRef, admin: Admin) -> None:
    """A start after a stop applies the same rendering again: the anchor's set hash, unchanged,
    must not make the pass skip workloads the stop removed."""
    revision = numbered("llama-3.1-8b-h100", 1)
    driver.apply(ref, revision)
    wait_ready(driver, ref, revision)
    wait_until(lambda: driver.stop(ref), "the driver stops every pod", SETTLE_S, interval=1.0)
    assert not driver.observe(ref).replicas
    assert admin.get(f"/api/v1/namespaces/{ref.namespace}/secrets/chat-api-key")  # kept
    driver.apply(ref, revision)
    wait_ready(driver, ref, revision)


def test_weights_download_job_into_a_claim_then_ready(
    worker_client: KubeClient, ref: base.DeploymentRef, admin: Admin
) -> None:
    """With a shared claim as the model cache, a Job downloads the weights (kwok completes it)
    and the engines start; an edit to another model makes a new Job and prunes the old."""
    ns = ref.namespace
    admin.call(
        "POST",
        "/api/v1/persistentvolumes",
        {
            "metadata": {"name": f"models-{ns}"},
            "spec": {
                "capacity": {"storage": "1Ti"},
                "accessModes": ["ReadWriteMany"],
                "hostPath": {"path": "/srv/models"},
                "storageClassName": "",
                "claimRef": {"namespace": ns, "name": "models"},
            },
        },
    )
    admin.call(
        "POST",
        f"/api/v1/namespaces/{ns}/persistentvolumeclaims",
        {
            "metadata": {"name": "models"},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": f"models-{ns}",
                "resources": {"requests": {"storage": "1Ti"}},
            },
        },
    )
    claim = ClaimCache(claim_name="models")
    cluster = KubeOptions().cluster.model_copy(update={"model_cache": claim})
    driver = KubeDriver(worker_client, KubeOptions(cluster=cluster), has_lws=False)
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
    first = numbered("llama-3.1-8b-h100", 1)
    driver.apply(ref, first)
    wait_ready(driver, ref, first)

    def succeeded() -> list[dict[str, Any]]:
        return [j for j in items(admin, jobs) if j.get("status", {}).get("succeeded")]

    # kwok runs no init containers, so the engines do not wait for the download here.
    done = wait_until(succeeded, "the download Job succeeds", SETTLE_S, interval=1.0)
    assert len(done) == 1
    second = numbered("llama-3.3-70b-nvfp4-h100", 2)
    driver.apply(ref, second)
    wait_ready(driver, ref, second)
    wait_until(
        lambda: {j["metadata"]["name"] for j in succeeded()} - {done[0]["metadata"]["name"]},
        "the new revision's download Job succeeds",
        SETTLE_S,
        interval=1.0,
    )
    assert done[0]["metadata"]["name"] not in {j["metadata"]["name"] for j in items(admin, jobs)}
    admin.call("DELETE", f"/api/v1/persistentvolumes/models-{ns}")


def test_a_changed_model_cache_setting_keeps_the_live_claim(
    worker_client: KubeClient, ref: base.DeploymentRef, admin: Admin
) -> None:
    """A claim's spec cannot change once made (the API server answers 422 to another storage
    class, and to another size of a claim not bound or whose class cannot expand): after the
    cluster's cache settings change, the endpoint keeps its claim, and the weights in it, and
    its next revision is applied all the same."""

    def driver_for(cache: SharedClaimCache) -> KubeDriver:
        cluster = KubeOptions().cluster.model_copy(update={"model_cache": cache})
        return KubeDriver(worker_client, KubeOptions(cluster=cluster), has_lws=False)

    driver_for(SharedClaimCache(storage_class="fast", size_gib=500)).apply(
        ref, numbered("llama-3.1-8b-h100", 1)
    )
    changed = driver_for(SharedClaimCache(storage_class="slow", size_gib=600))
    second = numbered("llama-3.1-8b-ngram-h100", 2)
    changed.apply(ref, second)
    claim = admin.call(
        "GET", f"/api/v1/namespaces/{ref.namespace}/persistentvolumeclaims/chat-model-cache"
    )
    assert claim["spec"]["storageClassName"] == "fast"
    assert claim["spec"]["resources"]["requests"]["storage"] == "500Gi"
    assert claim["metadata"]["labels"][L.REVISION] == "2"
    engine = admin.call("GET", f"/apis/apps/v1/namespaces/{ref.namespace}/deployments/chat-engine")
    assert engine["metadata"]["labels"][L.REVISION] == "2"


def test_prefill_and_decode_pools_become_ready(driver: KubeDriver, ref: base.DeploymentRef) -> None:
    revision = plan("llama-3.1-70b-pd-h100")
    roles = {r.role for r in revision.plan.roles if r.role != "router"}
    driver.apply(ref, revision)

    def all_ready() -> bool:
        observed = driver.observe(ref)
        engines = observed.engines(revision.number)
        ready_roles = {r.role for r in engines if r.ready}
        return observed.router_ready and ready_roles == roles and all(r.ready for r in engines)

    wait_until(
        all_ready, f"every pool ({sorted(roles)}) and the router are ready", SETTLE_S, interval=1.0
    )
