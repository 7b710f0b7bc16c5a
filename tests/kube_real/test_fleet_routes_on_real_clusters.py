"""What the gateway reads of an endpoint spread over two real control planes: its clusters'
routes (``gateway.loader``) as the worker's own reconcile passes record them, with each
cluster's ``router_address`` (the ingress the operator names), through a drain.

The clusters are the session's pair of API servers (``started``, which
``test_fleet_on_real_clusters`` shares). kwok's pods cannot serve, so no request is sent here:
the requests' side, with real routers and simulated engines, is tests/gateway/test_fleet_routing.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from controlplane import services as platform
from deployments.clusters import services as cluster_services
from deployments.clusters.models import Cluster
from deployments.fleet import services as fleet
from gateway.loader import load_endpoints
from gateway.routes import ACTIVE, DRAINING, ClusterRoute
from tests.conftest import Cast
from tests.kube_real.test_fleet_on_real_clusters import (  # noqa: F401  (fixtures)
    Plane,
    on_real_clusters,
    planes,
    ready,
    spread_endpoint,
    step_until,
)

pytestmark = pytest.mark.django_db(transaction=True)


def behind_ingress(cast: Cast, plane: Plane) -> Cluster:
    """``plane`` registered with a router address per endpoint, as an operator sets it."""
    actor = cast.actor(cast.alice, cast.acme)
    secret = platform.set_secret(actor, name=f"{plane.name}-kubeconfig", value=plane.kubeconfig)
    return cluster_services.create_cluster(
        actor,
        name=plane.name,
        namespace=plane.namespace,
        kubeconfig_secret_id=secret.pk,
        settings={"router_address": f"https://{{endpoint}}.{plane.name}.example"},
    )


def test_the_gateway_routes_to_both_clusters_then_off_a_drained_one(
    cast: Cast,
    planes: tuple[Plane, Plane],  # noqa: F811  (the fixture imported above)
    on_real_clusters: Any,  # noqa: F811
) -> None:
    east, west = (behind_ingress(cast, plane) for plane in planes)
    endpoint = spread_endpoint(cast, east, west, replicas=2)
    step_until(endpoint, ready({"east": 1, "west": 1}), "one ready replica on each cluster")
    chat = load_endpoints()["chat"]
    assert chat.routes == (
        ClusterRoute("east", "https://chat.east.example", 1, ACTIVE),
        ClusterRoute("west", "https://chat.west.example", 1, ACTIVE),
    )
    assert chat.serving

    fleet.drain_cluster(cast.actor(cast.alice, cast.acme), "west")
    step_until(endpoint, ready({"east": 2, "west": 0}), "every replica on east")
    chat = load_endpoints()["chat"]
    routes = {route.cluster: route for route in chat.routes}
    assert routes["east"] == ClusterRoute("east", "https://chat.east.example", 2, ACTIVE)
    assert routes["west"].state == DRAINING and not routes["west"].serving
    assert chat.serving
