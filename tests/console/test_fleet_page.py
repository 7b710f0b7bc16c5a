"""The fleet page: each cluster's health, GPUs by type (total, used, free) and the endpoints on
it with their replicas there; another organization's endpoints never appear; htmx reloads the
cards alone. The placements and availability are written as the fleet's reconcile and health
check record them (stand-ins: this page only reads them)."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from deployments.clusters.models import Cluster
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.fleet.models import Placement
from tests.conftest import Cast
from tests.console.conftest import SPEC

INVENTORY = {
    "nodes": [],
    "gpus": {
        "H100-SXM": {"nodes": 2, "gpus": 16, "free": 6},
        "L4": {"nodes": 1, "gpus": 4, "free": 4},
    },
    "error": "",
}


def cluster(cast: Cast, name: str, **fields: object) -> Cluster:
    return Cluster.objects.create(
        organization=cast.acme, name=name, kind="kubernetes", gpu_inventory=INVENTORY, **fields
    )


def place(
    endpoint: Deployment, where: Cluster, desired: int, ready: int, state: str = "active"
) -> None:
    Placement.objects.update_or_create(
        deployment=endpoint,
        cluster=where,
        defaults={"desired_replicas": desired, "ready_replicas": ready, "state": state},
    )


def card_of(page: str, name: str) -> str:
    """The HTML of cluster ``name``'s card."""
    return page.split(f'data-cluster="{name}"')[1].split("</section>")[0]


def test_the_fleet_page_shows_each_clusters_health_gpus_and_endpoints(
    alice: Client, cast: Cast, endpoint: Deployment
) -> None:
    east = cluster(cast, "east")
    west = cluster(
        cast,
        "west",
        available=False,
        unavailable_since=timezone.now() - timedelta(minutes=3),
        unavailable_reason="the API server did not answer",
    )
    drained = cluster(cast, "drained", draining_since=timezone.now())
    place(endpoint, east, desired=3, ready=2)
    place(endpoint, west, desired=0, ready=0, state="lost")
    place(endpoint, drained, desired=1, ready=1, state="draining")
    globex = services.create_deployment(
        cast.actor(cast.bob, cast.globex), slug="secret-plan", name="Secret plan", spec=SPEC
    )
    place(globex, east, desired=4, ready=4)

    page = alice.get("/fleet/").content.decode()

    east_card = card_of(page, "east")
    assert "health-healthy" in east_card
    h100 = east_card.split('data-gpu="H100-SXM"')[1].split("</tr>")[0]
    # nodes, total, used, free
    assert [c.split("<")[0] for c in h100.split('class="num">')[1:]] == ["2", "16", "10", "6"]
    row = east_card.split('data-slug="chat"')[1].split("</tr>")[0]
    assert "2 / 3" in row and "H100-SXM \u00d7 1" in row and "Active" in row
    assert "secret-plan" not in page  # another organization's endpoint on a shared card
    west_card = card_of(page, "west")
    assert "health-unavailable" in west_card and "the API server did not answer" in west_card
    assert "Lost" in west_card.split('data-slug="chat"')[1]
    drained_card = card_of(page, "drained")
    assert "health-draining" in drained_card and "Draining" in drained_card


def test_htmx_reloads_the_cards_alone(alice: Client, cast: Cast, endpoint: Deployment) -> None:
    place(endpoint, cluster(cast, "east"), desired=1, ready=1)
    partial = alice.get("/fleet/", headers={"HX-Request": "true"}).content.decode()
    assert partial.lstrip().startswith('<div id="fleet-cards"')
    assert 'data-cluster="east"' in partial and "<html" not in partial
