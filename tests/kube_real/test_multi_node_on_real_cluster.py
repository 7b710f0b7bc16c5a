"""Multi-node replicas through the real LeaderWorkerSet controller (v0.9.0, started by the
session's control plane with its own CRDs, ClusterRole and webhooks): the driver, with the
worker's own token, applies a LeaderWorkerSet; LWS makes a leader StatefulSet per endpoint and a
worker StatefulSet per group, its pod webhook labels the pods and gives them the group's address,
size and rank, the real scheduler places each pod of a group on its own kwok H200 node, and the
driver reports the endpoint ready. An edit is LWS's own rolling update; delete leaves nothing.

What the emulator in tests/drivers cannot show: it makes no StatefulSets or pods from a
LeaderWorkerSet, and no webhook adds what LWS adds.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any
from urllib.parse import quote

import pytest

from deployments.drivers import base
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import KubeClient, KubePermanentError
from deployments.drivers.kube.driver import KubeDriver
from runtime import launch
from tests.drivers.reference_specs import load_spec
from tests.kube_real.conftest import GPU_NODES, SETTLE_S, Admin, wait_nothing_left
from tests.waiting import wait_until

SPEC = "deepseek-v3-tp16-2x-h200"  # one replica: two 8-GPU pods on two H200 nodes
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/" + (
    "leaderworkersets.leaderworkerset.x-k8s.io"
)


def numbered(number: int, replicas: int | None = None, **changes: Any) -> base.RevisionPlan:
    """Revision ``number`` of the two-node reference spec, with ``changes`` (dotted field ->
    value) made to it, at ``replicas`` groups (the spec's own count by default)."""
    data = load_spec(SPEC).model_dump(mode="json")
    for dotted, value in changes.items():
        group, field = dotted.split(".")
        data[group][field] = value
    spec = type(load_spec(SPEC)).model_validate(data)
    plan = launch.plan(spec, deployment_labels={"deployment": "chat"})
    engine = next(r for r in plan.roles if r.role != "router")
    count = engine.replicas if replicas is None else replicas
    return base.RevisionPlan.for_spec(spec, plan, number=number, replicas=count)


def items(admin: Admin, path: str) -> list[dict[str, Any]]:
    return list(admin.call("GET", path).get("items") or [])


def engine_pods(admin: Admin, namespace: str) -> list[dict[str, Any]]:
    pods = items(admin, f"/api/v1/namespaces/{namespace}/pods")
    return [p for p in pods if LWS_NAME in p["metadata"]["labels"]]


def wait_ready(driver: KubeDriver, ref: base.DeploymentRef, revision: base.RevisionPlan) -> None:
    """Until the driver reports every group of ``revision`` ready, none of another, and the
    router ready."""

    def settled() -> bool:
        observed = driver.observe(ref)
        others = [r for r in observed.engines() if r.revision != revision.number]
        ready = observed.ready_count(revision.number) == revision.replicas
        return ready and not others and observed.router_ready

    wait_until(settled, f"revision {revision.number} alone is ready", SETTLE_S, interval=1.0)


def router_discovers(admin: Admin, namespace: str) -> set[str]:
    """The pods the router's ``--selector`` (as applied) matches: the workers smg adds."""
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/chat-router"
    args = admin.call("GET", path)["spec"]["template"]["spec"]["containers"][0]["args"]
    start = args.index("--selector") + 1
    end = next((i for i in range(start, len(args)) if args[i].startswith("--")), len(args))
    selector = quote(",".join(args[start:end]))
    matched = items(admin, f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")
    return {p["metadata"]["name"] for p in matched}


def env_of(pod: dict[str, Any]) -> dict[str, str]:
    container = pod["spec"]["containers"][0]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def test_a_replica_spanning_two_nodes_becomes_ready_through_the_lws_controller(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    revision = numbered(1)
    driver.apply(ref, revision)
    wait_ready(driver, ref, revision)

    ns = ref.namespace
    # LWS's own count of ready groups agrees (its status follows the pods a moment later).
    path = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets/chat-engine"
    wait_until(
        lambda: admin.call("GET", path).get("status", {}).get("readyReplicas") == revision.replicas,
        "LWS counts the group ready",
        SETTLE_S,
        interval=0.5,
    )
    # LWS's StatefulSets: the leaders' (owned by the LeaderWorkerSet), one of workers per group
    # (owned by its leader pod).
    sets = items(admin, f"/apis/apps/v1/namespaces/{ns}/statefulsets")
    owners = sorted(o["kind"] for s in sets for o in s["metadata"]["ownerReferences"])
    assert owners == ["LeaderWorkerSet", "Pod"]
    pods = engine_pods(admin, ns)
    assert len(pods) == 2  # one group of two
    # Each pod of the group holds a whole H200 node.
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert len(nodes) == 2 and all(n.startswith("kwok-h200-") for n in nodes)
    # LWS's pod webhook gave every pod its group's leader, size and its own rank, which the
    # engine's --dist-init-addr, --nnodes and --node-rank name.
    ranks = sorted(p["metadata"]["labels"][L.LWS_WORKER_INDEX] for p in pods)
    assert ranks == ["0", "1"]
    for pod in pods:
        env = env_of(pod)
        assert env["LWS_LEADER_ADDRESS"].startswith(f"chat-engine-0.chat-engine.{ns}")
        assert env["LWS_GROUP_SIZE"] == "2"
        assert L.LWS_GROUP_KEY in pod["metadata"]["labels"]
    # LWS's own headless Service, named after the LeaderWorkerSet: the DNS name
    # LWS_LEADER_ADDRESS holds, where the ranks meet. Plinth's Service of the role must not
    # take its name.
    headless = admin.call("GET", f"/api/v1/namespaces/{ns}/services/chat-engine")
    assert headless["spec"]["clusterIP"] == "None"
    assert [o["kind"] for o in headless["metadata"]["ownerReferences"]] == ["LeaderWorkerSet"]

    # Plinth's engine Service selects the leader only: ranks >= 1 serve no HTTP. (The
    # EndpointSlice controller writes the slice a moment after the pods change.)
    def targets() -> set[str]:
        slices = items(admin, f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices")
        name = "kubernetes.io/service-name"
        ours = [s for s in slices if s["metadata"]["labels"][name] == "chat-engine-leaders"]
        return {e["targetRef"]["name"] for s in ours for e in s.get("endpoints") or []}

    wait_until(
        lambda: targets() == {"chat-engine-0"},
        "the leaders' Service has the leader alone",
        SETTLE_S,
        interval=0.5,
        output=lambda: str(targets()),
    )


def test_the_router_discovers_the_group_leaders_only(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    """smg adds every pod its --selector matches as a worker; a group's ranks >= 1 carry the
    role's labels too (LWS copies the worker template's) but serve no HTTP."""
    revision = numbered(1)
    driver.apply(ref, revision)
    wait_ready(driver, ref, revision)
    assert router_discovers(admin, ref.namespace) == {"chat-engine-0"}


def test_an_edit_is_a_rolling_update_of_the_leader_worker_set(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    """The same LeaderWorkerSet is updated in place (never recreated), and LWS replaces the
    group: a new group surges beside the old one, which goes once the new one is ready."""
    path = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ref.namespace}/leaderworkersets"
    first = numbered(1)
    driver.apply(ref, first)
    wait_ready(driver, ref, first)
    uid = admin.call("GET", f"{path}/chat-engine")["metadata"]["uid"]
    old_pods = {p["metadata"]["uid"] for p in engine_pods(admin, ref.namespace)}

    second = numbered(2, **{"batching.max_running_requests": 64})
    driver.apply(ref, second)
    wait_ready(driver, ref, second)

    live = admin.call("GET", f"{path}/chat-engine")
    assert live["metadata"]["uid"] == uid
    assert live["metadata"]["labels"][L.REVISION] == "2"

    # The surge group (the new revision's too) goes once the first group is replaced.
    def one_group() -> list[dict[str, Any]] | None:
        pods = engine_pods(admin, ref.namespace)
        return pods if len(pods) == 2 else None

    pods = wait_until(one_group, "the surge group is gone", SETTLE_S, interval=1.0) or []
    assert not {p["metadata"]["uid"] for p in pods} & old_pods
    assert all(p["metadata"]["labels"][L.REVISION] == "2" for p in pods)
    args = pods[0]["spec"]["containers"][0]["args"]
    assert args[args.index("--max-running-requests") + 1] == "64"


def test_a_scale_adds_a_whole_group(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    """Two replicas of the same revision: a second group of two pods, each pod on a node of
    its own, and the router discovers both leaders."""
    driver.apply(ref, numbered(1))
    wait_ready(driver, ref, numbered(1))
    scaled = numbered(1, replicas=2)
    driver.apply(ref, scaled)
    wait_ready(driver, ref, scaled)
    pods = engine_pods(admin, ref.namespace)
    assert len(pods) == 4 and len({p["spec"]["nodeName"] for p in pods}) == 4
    groups = {p["metadata"]["labels"][L.LWS_GROUP_KEY] for p in pods}
    assert len(groups) == 2
    assert router_discovers(admin, ref.namespace) == {"chat-engine-0", "chat-engine-1"}


def test_a_second_pass_over_a_defaulted_leader_worker_set_writes_nothing(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    """LWS's defaulting webhook adds fields to what was applied; the next pass still finds the
    endpoint as rendered and writes nothing (the LeaderWorkerSet's generation stays)."""
    path = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ref.namespace}/leaderworkersets"
    driver.apply(ref, numbered(1))
    before = admin.call("GET", f"{path}/chat-engine")["metadata"]["generation"]
    driver.apply(ref, numbered(1))
    assert admin.call("GET", f"{path}/chat-engine")["metadata"]["generation"] == before


def test_stop_then_start_a_multi_node_endpoint(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    revision = numbered(1)
    driver.apply(ref, revision)
    wait_ready(driver, ref, revision)
    wait_until(lambda: driver.stop(ref), "the driver stops every pod", SETTLE_S, interval=1.0)
    assert not driver.observe(ref).replicas and not engine_pods(admin, ref.namespace)
    driver.apply(ref, revision)
    wait_ready(driver, ref, revision)


def test_delete_leaves_nothing_of_a_multi_node_endpoint(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    """What LWS makes (StatefulSets, their pods, its headless Service, controller revisions)
    goes by ownerReferences with the LeaderWorkerSet the driver deletes."""
    revision = numbered(1)
    driver.apply(ref, revision)
    wait_ready(driver, ref, revision)
    wait_until(
        lambda: driver.delete(ref), "the driver sees everything gone", SETTLE_S, interval=1.0
    )
    ns = ref.namespace
    paths = (
        f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets",
        f"/apis/apps/v1/namespaces/{ns}/statefulsets",
        f"/apis/apps/v1/namespaces/{ns}/controllerrevisions",
        f"/api/v1/namespaces/{ns}/pods",
        f"/apis/apps/v1/namespaces/{ns}/deployments",
        f"/api/v1/namespaces/{ns}/services",
    )

    wait_nothing_left(paths, partial(items, admin))
    assert driver.observe(ref).empty


@pytest.fixture
def one_h200_node(admin: Admin) -> Iterator[None]:
    """Every H200 node but one cordoned (``spec.unschedulable``), so a two-node group gets its
    leader placed and its worker not. Uncordoned afterwards."""
    others = [f"/api/v1/nodes/kwok-h200-{i}" for i in range(1, GPU_NODES["H200"])]

    def cordon(value: bool) -> None:
        for path in others:
            patch = {"spec": {"unschedulable": value}}
            admin.call("PATCH", path, patch, content_type="application/merge-patch+json")

    cordon(True)
    try:
        yield
    finally:
        cordon(False)


@pytest.mark.usefixtures("one_h200_node")
def test_a_group_whose_worker_cannot_be_placed_is_not_ready_and_says_why(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    """The leader runs (kwok readies it), its worker waits for a node: the replica is not
    ready (a real leader waits for every rank), with the scheduler's words about the worker."""
    driver.apply(ref, numbered(1))

    def leader_ready_worker_pending() -> bool:
        pods = {p["metadata"]["name"]: p for p in engine_pods(admin, ref.namespace)}
        leader, worker = pods.get("chat-engine-0"), pods.get("chat-engine-0-1")
        if leader is None or worker is None:
            return False
        ready = [c for c in leader["status"].get("conditions") or [] if c["type"] == "Ready"]
        scheduled = [
            c for c in worker["status"].get("conditions") or [] if c["type"] == "PodScheduled"
        ]
        return bool(ready and ready[0]["status"] == "True" and scheduled) and (
            scheduled[0].get("reason") == "Unschedulable"
        )

    wait_until(leader_ready_worker_pending, "the leader ready, its worker pending", SETTLE_S)
    (replica,) = driver.observe(ref).engines()
    assert not replica.ready
    assert replica.phase == base.PENDING and replica.reason == "Unschedulable"
    assert "chat-engine-0-1" in replica.message
    assert "Insufficient nvidia.com/gpu" in replica.message


@pytest.fixture
def lws_not_served(admin: Admin) -> Iterator[None]:
    """The cluster stops serving LeaderWorkerSets (its one version ``served: false``), as one
    without LWS installed answers: 404 for the kind. Served again afterwards; nothing stored
    is lost, unlike deleting the CRD, which would delete every LeaderWorkerSet."""

    def served(value: bool) -> None:
        patch = [{"op": "replace", "path": "/spec/versions/0/served", "value": value}]
        admin.call("PATCH", LWS_CRD, patch, content_type="application/json-patch+json")

    served(False)
    try:
        yield
    finally:
        served(True)
        # Served again before the next test applies one (the API server installs the handler
        # a moment after the CRD changes).
        kinds = "/apis/leaderworkerset.x-k8s.io/v1"
        wait_until(lambda: not _not_found(admin, kinds), f"{kinds} is served again", SETTLE_S)


@pytest.mark.usefixtures("lws_not_served")
def test_a_multi_node_replica_without_lws_served_says_what_is_missing(
    worker_client: KubeClient, ref: base.DeploymentRef, admin: Admin
) -> None:
    """The real API server answers 404 for a kind it does not serve: the driver says
    LeaderWorkerSet is needed, and deleting such an endpoint still works."""
    kinds = "/apis/leaderworkerset.x-k8s.io/v1"
    wait_until(lambda: _not_found(admin, kinds), f"{kinds} is not served", SETTLE_S)
    driver = KubeDriver(worker_client)
    with pytest.raises(KubePermanentError, match="needs LeaderWorkerSet"):
        driver.apply(ref, numbered(1))
    wait_until(
        lambda: driver.delete(ref), "the driver deletes what was applied", SETTLE_S, interval=1.0
    )


def _not_found(admin: Admin, path: str) -> bool:
    try:
        admin.call("GET", path)
    except AssertionError as error:
        return ": 404 " in str(error)
    return False


def test_a_replica_that_comes_to_span_two_nodes_switches_workload_kind_and_back(
    driver: KubeDriver, ref: base.DeploymentRef, admin: Admin
) -> None:
    """An edit that makes a replica span two nodes (TP 8 -> 16 on 8-GPU nodes) turns its
    Deployment into a LeaderWorkerSet, and the edit back turns it into a Deployment again: a kind
    cannot be changed in place, so the driver creates the new object and prunes the old, and each
    revision becomes ready on the real controllers with nothing of the other kind left."""
    deployments = f"/apis/apps/v1/namespaces/{ref.namespace}/deployments"
    lws = f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ref.namespace}/leaderworkersets"

    def engine_kinds() -> set[str]:
        kinds = {
            "Deployment"
            for d in items(admin, deployments)
            if d["metadata"]["name"] == "chat-engine"
        }
        return kinds | {"LeaderWorkerSet" for _ in items(admin, lws)}

    one_node = {
        "parallelism.tp": 8,
        "hardware.gpus_per_replica": 8,
        "hardware.nodes_per_replica": 1,
    }
    single = numbered(1, **one_node)

    def only(kind: str) -> bool:
        return engine_kinds() == {kind}

    assert not any(r.multi_node for r in single.plan.roles)
    for revision, kind in ((single, "Deployment"), (numbered(2), "LeaderWorkerSet"),
                           (numbered(3, **one_node), "Deployment")):  # fmt: skip
        driver.apply(ref, revision)
        wait_ready(driver, ref, revision)
        wait_until(partial(only, kind), f"only a {kind} runs the engines", SETTLE_S)
