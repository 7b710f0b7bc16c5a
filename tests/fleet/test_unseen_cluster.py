"""A cluster Plinth cannot see is never asked anything: deleting an endpoint placed on one
tears down what can be seen and waits, deleting state there only once it answers again."""

from __future__ import annotations

from pathlib import Path

from controlplane import services as platform
from deployments.clusters import services as cluster_services
from deployments.clusters.models import Cluster
from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.fleet import services as fleet
from deployments.fleet.models import Placement, PlacementState
from deployments.status import DELETING
from tests.conftest import Cast

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
