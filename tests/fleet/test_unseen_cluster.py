"""A cluster Plinth cannot see is never asked anything: deleting an endpoint placed on one
tears down what can be seen and waits, deleting state there only once it answers again; logs
are read where each replica runs, not on a home cluster that cannot be seen."""

from __future__ import annotations

from pathlib import Path

from controlplane import services as platform
from deployments.clusters import services as cluster_services
from deployments.clusters.models import Cluster
from deployments.endpoints import reconcile, services
from deployments.endpoints.logs import read_logs
from deployments.endpoints.models import Deployment
from deployments.fleet import services as fleet
from deployments.fleet.models import Placement, PlacementState
from deployments.status import DELETING
from tests.conftest import Cast
from tests.waiting import wait_until

SPEC = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
    "autoscaling": {"min_replicas": 1, "max_replicas": 4},
}


def test_a_delete_waits_for_a_lost_cluster(cast: Cast, fast_local: Path, db: None) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    # Its API server is an address nothing answers at: any call to it would fail the pass.
    secret = platform.set_secret(actor, name="kc", value="apiVersion: v1\nkind: Config\n")
    east = cluster_services.create_cluster(actor, name="gpu-east", kubeconfig_secret_id=secret.pk)
    Cluster.objects.filter(pk=east.pk).update(available=False, unavailable_reason="gone")
    endpoint = services.create_deployment(actor, slug="chat", name="Chat", spec=SPEC)
    fleet.set_placement(
        actor,
        endpoint.pk,
        policy="spread",
        clusters=[{"cluster": "local"}, {"cluster": "gpu-east"}],
    )
    services.delete_deployment(actor, endpoint.pk)
    assert reconcile.reconcile(str(endpoint.pk)), "not finished while east cannot be seen"
    row = Deployment.objects.get(pk=endpoint.pk)
    assert row.status == DELETING and not row.failure_reason
    assert Placement.objects.get(deployment=endpoint, cluster=east).state == PlacementState.LOST


def test_logs_are_read_on_the_cluster_the_replica_runs_on(
    cast: Cast, fast_local: Path, db: None
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    secret = platform.set_secret(actor, name="kc", value="apiVersion: v1\nkind: Config\n")
    east = cluster_services.create_cluster(actor, name="gpu-east", kubeconfig_secret_id=secret.pk)
    Cluster.objects.filter(pk=east.pk).update(available=False, unavailable_reason="gone")
    endpoint = services.create_deployment(actor, slug="chat", name="Chat", spec=SPEC)
    # Home on east, which cannot be seen: its replica runs on local.
    both = [{"cluster": "gpu-east"}, {"cluster": "local"}]
    fleet.set_placement(actor, endpoint.pk, policy="spread", clusters=both)

    def running() -> bool:
        reconcile.reconcile(str(endpoint.pk))
        return Deployment.objects.get(pk=endpoint.pk).ready_replicas == 1

    wait_until(running, "the replica on local is ready", 90)
    row = Deployment.objects.select_related("cluster").get(pk=endpoint.pk)
    [engine] = [r for r in row.replica_facts if r["role"] == "engine"]
    assert engine["cluster"] == "local"
    named = read_logs(row, replica=engine["name"], tail=50)
    assert named.replica == engine["name"] and named.lines
    assert read_logs(row, tail=50).lines, "none named: the first cluster that can be seen"
