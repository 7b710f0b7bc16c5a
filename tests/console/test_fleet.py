"""The fleet in the console: an endpoint's status card shows its replicas per cluster, and an
admin drains a cluster (and ends the drain) from the clusters page."""

from __future__ import annotations

from django.test import Client

from controlplane import services as platform
from deployments.clusters import services as cluster_services
from deployments.clusters.models import Cluster
from deployments.endpoints import services
from deployments.fleet import services as fleet
from deployments.fleet.models import Placement, PlacementState
from tests.conftest import Cast
from tests.console.conftest import SPEC


def _east(cast: Cast) -> Cluster:
    actor = cast.actor(cast.alice, cast.acme)
    secret = platform.set_secret(actor, name="kc", value="apiVersion: v1\nkind: Config\n")
    return cluster_services.create_cluster(actor, name="gpu-east", kubeconfig_secret_id=secret.pk)


def test_the_status_card_shows_replicas_per_cluster(alice: Client, cast: Cast) -> None:
    _east(cast)
    actor = cast.actor(cast.dave, cast.acme)
    spec = {**SPEC, "autoscaling": {"min_replicas": 1, "max_replicas": 4}}
    endpoint = services.create_deployment(actor, slug="chat", name="Chat", spec=spec, replicas=3)
    fleet.set_placement(
        actor,
        endpoint.pk,
        policy="spread",
        clusters=[{"cluster": "local"}, {"cluster": "gpu-east"}],
    )
    # What reconcile would have stored after a pass that saw east lost.
    Placement.objects.filter(cluster__name="local").update(desired_replicas=2, ready_replicas=2)
    Placement.objects.filter(cluster__name="gpu-east").update(
        desired_replicas=1, ready_replicas=1, state=PlacementState.LOST
    )
    # The clusters page counts it on both of its clusters.
    clusters = alice.get("/clusters/").content.decode()
    row = clusters.split("<td>gpu-east")[1].split("</tr>")[0]
    assert '<td class="num">1</td>' in row
    body = alice.get("/endpoints/chat/").content.decode()
    shown = body.split('id="placements"')[1].split("</dd>")[0]
    assert 'data-cluster="local"' in shown and "(home)" in shown
    assert "2 / 2 ready" in shown
    east = shown.split('data-cluster="gpu-east"')[1]
    # Nothing is counted ready on a cluster Plinth cannot see.
    assert "0 / 1 ready" in east and "lost" in east


def test_an_admin_drains_a_cluster_from_the_clusters_page(
    alice: Client, carol: Client, cast: Cast
) -> None:
    east = _east(cast)
    page = alice.get("/clusters/").content.decode()
    assert f'action="/clusters/{east.pk}/drain/"' in page
    assert carol.post(f"/clusters/{east.pk}/drain/").status_code == 403
    assert alice.post(f"/clusters/{east.pk}/drain/").status_code == 302
    assert Cluster.objects.get(pk=east.pk).draining_since is not None
    page = alice.get("/clusters/").content.decode()
    assert "draining" in page and f'action="/clusters/{east.pk}/undrain/"' in page
    assert alice.post(f"/clusters/{east.pk}/undrain/").status_code == 302
    assert Cluster.objects.get(pk=east.pk).draining_since is None


def test_a_developer_places_an_endpoint_from_its_page(alice: Client, cast: Cast) -> None:
    east = _east(cast)
    actor = cast.actor(cast.dave, cast.acme)
    endpoint = services.create_deployment(actor, slug="chat", name="Chat", spec=SPEC)
    page = alice.get("/endpoints/chat/").content.decode()
    form = page.split('id="placement"')[1].split("</form>")[0]
    assert f'value="{east.pk}"' in form and 'name="policy"' in form
    local = endpoint.cluster_id
    posted = alice.post(
        "/endpoints/chat/placement/",
        {
            "policy": "weighted",
            "cluster": [str(local), str(east.pk)],
            "home": str(east.pk),
            f"min-{east.pk}": "1",
            f"weight-{east.pk}": "3",
            f"min-{local}": "0",
            f"weight-{local}": "1",
        },
    )
    assert posted.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.cluster_id == east.pk and endpoint.placement_policy == "weighted"
    placed = Placement.objects.get(deployment=endpoint, cluster=east)
    assert (placed.min_replicas, placed.weight) == (1, 3)
    # A refusal names the field and changes nothing.
    refused = alice.post(
        "/endpoints/chat/placement/",
        {"policy": "fastest", "cluster": [str(east.pk)], "home": str(east.pk)},
        follow=True,
    )
    assert "Placement not saved: policy" in refused.content.decode()
    endpoint.refresh_from_db()
    assert endpoint.placement_policy == "weighted"
