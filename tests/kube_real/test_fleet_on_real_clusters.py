"""One endpoint spread over two real control planes (the session's pair, ``started``):
the failover when one's API server stops, the move back when it returns, and a drain.

Each pass is the worker's own reconcile pass (each cluster through its own driver, as the
worker's ServiceAccount). The clusters' availability checks are stepped with a simulated clock
(the grace period and the return hold pass without being waited for); everything else is the
real API servers' and controllers' doing. kwok's nodes are GPU nodes and its pods become Ready,
but nothing in them serves: what the gateway does with the routers is tests/gateway's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlplane import services as platform
from deployments.clusters import services as cluster_services
from deployments.clusters.models import Cluster
from deployments.drivers.errors import TemporaryDriverError
from deployments.drivers.kube import labels as L
from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.fleet import health
from deployments.fleet import services as fleet
from deployments.fleet.models import Placement, PlacementState
from tests.conftest import Cast
from tests.kube_real.conftest import (
    SETTLE_S,
    Admin,
    Started,
    delete_namespace,
    worker_kubeconfig_for,
)
from tests.kube_real.control_plane import ControlPlane
from tests.waiting import wait_until

SPEC = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
    "autoscaling": {"min_replicas": 1, "max_replicas": 4},
}


@dataclass
class Plane:
    """One of the module's clusters: its control plane, admin, and the namespace the worker
    manages on it."""

    name: str
    plane: ControlPlane
    admin: Admin
    namespace: str
    kubeconfig: str

    def engine(self) -> dict[str, Any] | None:
        path = f"/apis/apps/v1/namespaces/{self.namespace}/deployments/chat-engine"
        return self.admin.get(path)

    def engine_replicas(self) -> int:
        found = self.engine()
        return int(found["spec"]["replicas"]) if found else -1

    def engine_revision(self) -> str:
        found = self.engine() or {}
        return str(found.get("metadata", {}).get("labels", {}).get(L.REVISION, ""))


def _plane(started: Started) -> Plane:
    """A fresh namespace on the cluster, managed by the worker (each test its own)."""
    admin = started.admin
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    admin.call("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    wait_until(
        lambda: admin.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default"),
        "the namespace's default ServiceAccount",
        SETTLE_S,
        interval=0.3,
    )
    kubeconfig = worker_kubeconfig_for(started.plane, admin, namespace, started.token)
    return Plane(started.name, started.plane, admin, namespace, kubeconfig)


@pytest.fixture
def planes(started: tuple[Started, Started]) -> Iterator[tuple[Plane, Plane]]:
    """The session's pair of clusters (``started``), each with a namespace of this test's own,
    deleted afterwards so that the next test finds their GPUs free."""
    pair = _plane(started[0]), _plane(started[1])
    yield pair
    for plane in pair:
        delete_namespace(plane.admin, plane.namespace)


@pytest.fixture
def on_real_clusters(settings: Any) -> None:
    settings.PLINTH_KUBE_ALLOW_HOSTS = ["127.0.0.1"]
    settings.PLINTH_STARTUP_WINDOW_S = 3600
    settings.PLINTH_CLUSTER_LOST_AFTER_S = 15
    settings.PLINTH_CLUSTER_RETURN_AFTER_S = 120


def _register(cast: Cast, plane: Plane) -> Cluster:
    actor = cast.actor(cast.alice, cast.acme)
    secret = platform.set_secret(actor, name=f"{plane.name}-kubeconfig", value=plane.kubeconfig)
    return cluster_services.create_cluster(
        actor, name=plane.name, namespace=plane.namespace, kubeconfig_secret_id=secret.pk
    )


def spread_endpoint(cast: Cast, east: Cluster, west: Cluster, replicas: int) -> Deployment:
    developer = cast.actor(cast.dave, cast.acme)
    endpoint = services.create_deployment(
        developer, slug="chat", name="Chat", spec=SPEC, cluster_id=east.pk, replicas=replicas
    )
    fleet.set_placement(
        developer,
        endpoint.pk,
        policy="spread",
        clusters=[{"cluster": "east"}, {"cluster": "west"}],
    )
    return endpoint


def placements(endpoint: Deployment) -> dict[str, Placement]:
    return {p.cluster.name: p for p in Placement.objects.filter(deployment=endpoint)}


def step_until(
    endpoint: Deployment, holds: Callable[[dict[str, Placement]], bool], what: str
) -> list[dict[str, Placement]]:
    """Reconcile passes until ``holds(placements)``; the placements after each pass."""
    seen: list[dict[str, Placement]] = []

    def passed() -> bool:
        try:
            reconcile.reconcile(str(endpoint.pk))
        except TemporaryDriverError:
            return False  # a 429 of a loaded API server: the worker's task retries it too
        seen.append(placements(endpoint))
        return holds(seen[-1])

    wait_until(passed, what, SETTLE_S, interval=1.0, output=lambda: _shown(seen))
    return seen


def _shown(seen: list[dict[str, Placement]]) -> str:
    if not seen:
        return "no pass"
    return str({n: (p.state, p.desired_replicas, p.ready_replicas) for n, p in seen[-1].items()})


def ready(counts: dict[str, int]) -> Callable[[dict[str, Placement]], bool]:
    def holds(now: dict[str, Placement]) -> bool:
        return all(
            now[name].ready_replicas == n and now[name].desired_replicas == n
            for name, n in counts.items()
        )

    return holds


def test_a_lost_api_server_moves_its_replicas_to_the_other_cluster_and_back(
    cast: Cast, planes: tuple[Plane, Plane], on_real_clusters: None
) -> None:
    east_plane, west_plane = planes
    east, west = _register(cast, east_plane), _register(cast, west_plane)
    endpoint = spread_endpoint(cast, east, west, replicas=2)
    step_until(endpoint, ready({"east": 1, "west": 1}), "one ready replica on each cluster")
    row = Deployment.objects.get(pk=endpoint.pk)
    assert row.ready_replicas == 2
    assert {r["cluster"] for r in row.replica_facts if r["role"] == "engine"} == {"east", "west"}

    east_plane.plane.stop_api_server()
    try:
        # Within the grace period, a pass still reconciles west and sets east aside.
        assert reconcile.reconcile(str(endpoint.pk))
        unanswered = placements(endpoint)["east"]
        assert unanswered.unanswered_since is not None and unanswered.ready_replicas == 1
        assert endpoint.events.filter(reason="ClusterUnanswered").exists()
        t0 = timezone.now()
        assert not health.check_cluster(east, now=t0), "lost at the first failure"
        assert Cluster.objects.get(pk=east.pk).available, "within the grace period"
        assert health.check_cluster(Cluster.objects.get(pk=east.pk), now=t0 + timedelta(seconds=15))
        lost = Cluster.objects.get(pk=east.pk)
        assert not lost.available and "does not answer" in lost.unavailable_reason
        seen = step_until(endpoint, ready({"west": 2}), "both replicas ready on west")
        assert seen[-1]["east"].state == PlacementState.LOST
        # Nothing is asked of a cluster Plinth cannot see: east keeps its count.
        assert seen[-1]["east"].desired_replicas == 1
        line = endpoint.events.get(reason="ClusterLost")
        assert "cluster east unavailable" in line.message and "west +1" in line.message
        assert line.data["cluster"] == "east"
    finally:
        east_plane.plane.start_api_server()
    assert east_plane.engine_replicas() == 1, "nothing on the lost cluster was deleted"

    # Back only after answering for the return hold; then west shrinks once east is ready.
    t1 = timezone.now()
    back = Cluster.objects.get(pk=east.pk)
    assert not health.check_cluster(back, now=t1)
    assert not Cluster.objects.get(pk=east.pk).available
    assert health.check_cluster(Cluster.objects.get(pk=east.pk), now=t1 + timedelta(seconds=120))
    step_until(endpoint, ready({"east": 1, "west": 1}), "one replica on each cluster again")
    assert endpoint.events.filter(reason="ClusterReturned").exists()
    assert not endpoint.events.filter(reason="ClusterAnswers").exists(), "said once, by moves"
    assert placements(endpoint)["east"].unanswered_since is None
    assert west_plane.engine_replicas() == 1 and east_plane.engine_replicas() == 1


def test_a_drain_starts_replicas_elsewhere_before_stopping_the_drained_ones(
    cast: Cast, planes: tuple[Plane, Plane], on_real_clusters: None
) -> None:
    east_plane, west_plane = planes
    east, west = _register(cast, east_plane), _register(cast, west_plane)
    endpoint = spread_endpoint(cast, east, west, replicas=2)
    step_until(endpoint, ready({"east": 1, "west": 1}), "one ready replica on each cluster")

    fleet.drain_cluster(cast.actor(cast.alice, cast.acme), "west")
    seen = step_until(endpoint, ready({"east": 2, "west": 0}), "every replica on east")
    # Make before break: no pass lowered west before east ran both replicas ready.
    for after in seen:
        if after["west"].desired_replicas == 0:
            assert after["east"].ready_replicas == 2, _shown([after])
            break
    assert seen[-1]["west"].state == PlacementState.DRAINING
    assert "cluster west drained" in endpoint.events.get(reason="Draining").message
    assert west_plane.engine_replicas() == 0
    assert Deployment.objects.get(pk=endpoint.pk).ready_replicas == 2

    fleet.undrain_cluster(cast.actor(cast.alice, cast.acme), "west")
    step_until(endpoint, ready({"east": 1, "west": 1}), "spread over both again")


def test_a_rollout_of_a_spread_endpoint_proceeds_cluster_by_cluster(
    cast: Cast, planes: tuple[Plane, Plane], on_real_clusters: None
) -> None:
    east_plane, west_plane = planes
    east, west = _register(cast, east_plane), _register(cast, west_plane)
    endpoint = spread_endpoint(cast, east, west, replicas=2)
    step_until(endpoint, ready({"east": 1, "west": 1}), "one ready replica on each cluster")
    edited = {**SPEC, "batching": {"max_running_requests": 64}}
    services.update_settings(
        cast.actor(cast.dave, cast.acme), endpoint.pk, spec=edited, base_revision=1
    )
    reconcile.reconcile(str(endpoint.pk))
    # The home cluster first; the other keeps serving revision 1 until east's is ready.
    assert east_plane.engine_revision() == "2"
    assert west_plane.engine_revision() == "1"

    def west_on_2(_: dict[str, Placement]) -> bool:
        return west_plane.engine_revision() == "2"

    seen = step_until(endpoint, west_on_2, "west rolls once east runs revision 2 ready")
    assert seen[-1]["east"].ready_replicas == 1

    def promoted(_: dict[str, Placement]) -> bool:
        current = Deployment.objects.get(pk=endpoint.pk).current_revision
        return current is not None and current.number == 2

    step_until(endpoint, promoted, "revision 2 serves on both clusters")
    assert endpoint.events.filter(reason="RolloutComplete").exists()
