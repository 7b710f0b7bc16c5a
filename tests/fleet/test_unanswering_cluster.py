"""A cluster that stops answering but is still within its grace period (not yet lost,
``deployments.fleet.health``) is set aside for the pass: the endpoint's other clusters are
applied and observed as usual, what was last seen on it stands, and it is asked again soon.

Its API server is an address nothing listens at (a real refused connection through the real
Kubernetes client); the other cluster is the local one, running simulated engines. Where the
silent cluster must answer again, its API server is the emulator (a stand-in, see
tests/drivers/kube_emulator.py), because a real one cannot be made to answer 503 on demand and
then recover within one test.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.test import Client

from controlplane import services as platform
from deployments.clusters import services as cluster_services
from deployments.clusters.models import Cluster
from deployments.drivers.base import ReplicaFacts
from deployments.drivers.errors import TemporaryDriverError
from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.fleet import services as fleet
from deployments.fleet.models import Placement, PlacementState
from runtime.sim.launcher import free_port
from tests.conftest import Cast
from tests.drivers.kube_emulator import RunningEmulator
from tests.fixtures.endpoints import NS, converge, kubeconfig

SPEC = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
    "autoscaling": {"min_replicas": 1, "max_replicas": 4},
}
# What the last pass that reached east saw there: one ready replica behind its router.
EAST_ROUTER = "http://10.0.0.7:30000"
EAST_REPLICA = ReplicaFacts("chat-engine-0", revision=1, role="engine", phase="running", ready=True)
EAST_SEEN = [EAST_REPLICA.as_dict()]


def _silent_cluster(cast: Cast, settings: Any, url: str = "") -> Cluster:
    settings.PLINTH_KUBE_ALLOW_HTTP = True
    settings.PLINTH_KUBE_ALLOW_HOSTS = ["127.0.0.1"]
    actor = cast.actor(cast.alice, cast.acme)
    silent = kubeconfig(url or f"http://127.0.0.1:{free_port()}")  # nothing listens there
    secret = platform.set_secret(actor, name="east-kubeconfig", value=silent)
    return cluster_services.create_cluster(
        actor, name="gpu-east", namespace=NS, kubeconfig_secret_id=secret.pk
    )


def test_the_other_cluster_is_reconciled_while_one_does_not_answer(
    cast: Cast, fast_local: Path, db: None, settings: Any
) -> None:
    east = _silent_cluster(cast, settings)
    actor = cast.actor(cast.alice, cast.acme)
    endpoint = services.create_deployment(actor, slug="chat", name="Chat", spec=SPEC, replicas=2)
    both = [{"cluster": "local"}, {"cluster": "gpu-east"}]
    fleet.set_placement(actor, endpoint.pk, policy="spread", clusters=both)
    Placement.objects.filter(deployment=endpoint, cluster=east).update(
        desired_replicas=1,
        ready_replicas=1,
        total_replicas=1,
        replica_facts=EAST_SEEN,
        router_url=EAST_ROUTER,
    )

    row = converge(
        endpoint,
        lambda d: Placement.objects.get(deployment=d, cluster__name="local").ready_replicas == 1,
        "local's replica ready while east does not answer",
    )
    assert Cluster.objects.get(pk=east.pk).available, "within its grace period: not lost"
    kept = Placement.objects.get(deployment=endpoint, cluster=east)
    assert kept.state == PlacementState.ACTIVE and kept.unanswered_since is not None
    assert (kept.desired_replicas, kept.ready_replicas) == (1, 1)
    assert kept.replica_facts == EAST_SEEN and kept.router_url == EAST_ROUTER
    # The endpoint counts what was last seen on east beside what runs on local.
    assert row.ready_replicas == 2
    assert {r["cluster"] for r in row.replica_facts if r["role"] == "engine"} == {
        "local",
        "gpu-east",
    }
    # The API and the endpoint's page say since when east has not answered.
    key = platform.create_api_key(actor, name="ops", kind="management", role="viewer").plaintext
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    clusters = api.get(f"/api/v1/deployments/{endpoint.pk}/placement").json()["clusters"]
    shown = {c["cluster"]: c["unanswered_since"] for c in clusters}
    assert shown["local"] is None and shown["gpu-east"] is not None
    console = Client()
    console.force_login(cast.alice)
    page = console.get("/endpoints/chat/").content.decode()
    assert f"not answering since {kept.unanswered_since:%H:%M:%S} UTC" in page
    [line] = endpoint.events.filter(reason="ClusterUnanswered")  # once, over several passes
    assert "cluster gpu-east does not answer" in line.message and line.data["cluster"] == "gpu-east"
    assert not row.failure_reason
    # Asked again soon, as an endpoint that is not done is.
    interval = timedelta(seconds=django_settings.PLINTH_RECONCILE_INTERVAL_S)
    assert row.next_reconcile_at is not None and row.observed_at is not None
    assert row.next_reconcile_at <= row.observed_at + interval


def test_a_pass_whose_only_clusters_do_not_answer_is_retried(
    cast: Cast, fast_local: Path, db: None, settings: Any
) -> None:
    east = _silent_cluster(cast, settings)
    actor = cast.actor(cast.alice, cast.acme)
    endpoint = services.create_deployment(
        actor, slug="chat", name="Chat", spec=SPEC, cluster_id=east.pk
    )
    with pytest.raises(TemporaryDriverError):  # the task retries it, with backoff
        reconcile.reconcile(str(endpoint.pk))
    assert not Deployment.objects.get(pk=endpoint.pk).failure_reason
    assert not endpoint.events.filter(reason="ClusterUnanswered").exists()


def test_a_cluster_that_answers_again_is_asked_again_and_said_so_once(
    cast: Cast, fast_local: Path, db: None, settings: Any, emulator: RunningEmulator
) -> None:
    east = _silent_cluster(cast, settings, emulator.url)
    emulator.inject("GET", "/", 503, times=10_000)  # every read fails, as a busy server's
    actor = cast.actor(cast.alice, cast.acme)
    endpoint = services.create_deployment(actor, slug="chat", name="Chat", spec=SPEC, replicas=2)
    both = [{"cluster": "local"}, {"cluster": "gpu-east"}]
    fleet.set_placement(actor, endpoint.pk, policy="spread", clusters=both)
    for _ in range(2):
        reconcile.reconcile(str(endpoint.pk))
    assert Placement.objects.get(deployment=endpoint, cluster=east).unanswered_since is not None
    assert endpoint.events.filter(reason="ClusterUnanswered").count() == 1
    assert emulator.writes() == [], "nothing was asked of it past its first failure"

    emulator.call(emulator.emulator.faults.clear)
    reconcile.reconcile(str(endpoint.pk))
    back = Placement.objects.get(deployment=endpoint, cluster=east)
    assert back.unanswered_since is None and back.desired_replicas == 1
    [line] = endpoint.events.filter(reason="ClusterAnswers")
    assert "cluster gpu-east answers again" in line.message
    assert emulator.writes(), "its share is applied there now"
