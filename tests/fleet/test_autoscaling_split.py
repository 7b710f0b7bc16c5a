"""The autoscaler's decision on an endpoint placed on two clusters is the endpoint's, split by
its placement policy: the timeline line says how many replicas go where."""

from __future__ import annotations

from controlplane import services as platform
from deployments.autoscaling import services as scaling
from deployments.clusters import services as cluster_services
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.fleet import services as fleet
from tests.conftest import Cast

SPEC = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
    "autoscaling": {"min_replicas": 0, "max_replicas": 6, "scale_to_zero": True},
}


def _spread(cast: Cast, **east: int) -> str:
    actor = cast.actor(cast.alice, cast.acme)
    secret = platform.set_secret(actor, name="kc", value="apiVersion: v1\nkind: Config\n")
    cluster_services.create_cluster(actor, name="gpu-east", kubeconfig_secret_id=secret.pk)
    endpoint = services.create_deployment(actor, slug="chat", name="Chat", spec=SPEC, replicas=1)
    fleet.set_placement(
        actor,
        endpoint.pk,
        policy="spread",
        clusters=[{"cluster": "local"}, {"cluster": "gpu-east", **east}],
    )
    return str(endpoint.pk)


def test_an_autoscaled_count_is_split_by_the_placement_policy(cast: Cast, db: None) -> None:
    endpoint_id = _spread(cast)
    assert scaling.autoscale_to(endpoint_id, 5, "12 requests in flight", {}, expected=1)
    line = Deployment.objects.get(pk=endpoint_id).events.get(reason="Autoscaled")
    # Evenly; the odd one to the cluster first by price, then by name.
    assert line.data["clusters"] == {"local": 2, "gpu-east": 3}
    assert line.message.endswith("(local 2, gpu-east 3)")


def test_a_wake_from_zero_starts_where_the_minimums_say(cast: Cast, db: None) -> None:
    endpoint_id = _spread(cast, min_replicas=1)
    services.scale(cast.actor(cast.alice, cast.acme), endpoint_id, replicas=0)
    assert scaling.wake(endpoint_id)
    line = Deployment.objects.get(pk=endpoint_id).events.get(reason="ScaleFromZero")
    assert line.data["clusters"] == {"local": 0, "gpu-east": 1}
