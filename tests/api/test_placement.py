"""/api/v1/deployments/{id}/placement and /api/v1/clusters/{id}/drain: an endpoint placed on
several clusters (a scale-like change: no new revision), refused field by field, and a drain."""

from __future__ import annotations

from typing import Any

from controlplane.models import AuditEvent
from deployments.endpoints.models import Deployment
from deployments.fleet.models import Placement
from tests.api.conftest import Clients, error_of, fields_of

CLUSTER = {"namespace": "inference", "kubeconfig_secret_id": "kubeconfig"}


def _clusters(api: Clients, *names: str) -> list[dict[str, Any]]:
    api.alice.post("secrets", {"name": "kubeconfig", "value": "apiVersion: v1\nkind: Config\n"})
    made = [api.alice.post("clusters", {**CLUSTER, "name": name}) for name in names]
    assert all(r.status_code == 201 for r in made), [r.content for r in made]
    return [r.json() for r in made]


def test_an_endpoint_is_placed_on_two_clusters_without_a_new_revision(
    api: Clients, endpoint: Deployment
) -> None:
    _clusters(api, "gpu-east", "gpu-west")
    body = {
        "policy": "spread",
        "clusters": [{"cluster": "gpu-east", "min_replicas": 1}, {"cluster": "gpu-west"}],
    }
    placed = api.dave.request("PUT", f"deployments/{endpoint.slug}/placement", body)
    assert placed.status_code == 200, placed.content
    assert placed.json()["policy"] == "spread"
    clusters = [(c["cluster"], c["home"], c["min_replicas"]) for c in placed.json()["clusters"]]
    # The first named is the home; the old home (local) retires once its replicas moved.
    assert clusters[:2] == [("gpu-east", True, 1), ("gpu-west", False, 0)]
    assert ("local", False, 0) in clusters
    detail = api.carol.get(f"deployments/{endpoint.slug}").json()
    assert detail["target_revision"] == 1, "a placement is no revision"
    assert detail["placement_policy"] == "spread"
    assert detail["cluster"]["name"] == "gpu-east"
    assert {p["cluster"] for p in detail["placements"]} == {"gpu-east", "gpu-west", "local"}
    # The placement route reads back what was set, to any member (a viewer included).
    read = api.carol.get(f"deployments/{endpoint.slug}/placement")
    assert read.status_code == 200, read.content
    assert read.json()["policy"] == "spread"
    assert [c["cluster"] for c in read.json()["clusters"]][:2] == ["gpu-east", "gpu-west"]
    assert Placement.objects.get(deployment=endpoint, cluster__name="local").retiring
    audit = AuditEvent.objects.filter(action="deployment.place").get()
    assert audit.after["placement"]["clusters"][0]["cluster"] == "gpu-east"
    line = endpoint.events.get(reason="Placed")
    assert "spread over gpu-east (min 1), gpu-west" in line.message
    # Listed under each of its clusters, not only its home.
    listed = api.carol.get("deployments?cluster=gpu-west").json()["items"]
    assert [d["slug"] for d in listed] == [endpoint.slug]


def test_placement_refusals_name_the_field(api: Clients, endpoint: Deployment) -> None:
    _clusters(api, "gpu-east")
    path = f"deployments/{endpoint.slug}/placement"
    cases = {
        "policy": {"policy": "fastest", "clusters": [{"cluster": "gpu-east"}]},
        "clusters": {"policy": "spread", "clusters": []},
        "clusters[0].cluster": {"policy": "spread", "clusters": [{"cluster": "nowhere"}]},
        "clusters[1].cluster": {
            "policy": "spread",
            "clusters": [{"cluster": "gpu-east"}, {"cluster": "gpu-east"}],
        },
        "clusters[0].weight": {
            "policy": "weighted",
            "clusters": [{"cluster": "gpu-east", "weight": -1}],
        },
    }
    for field, body in cases.items():
        refused = api.dave.request("PUT", path, body)
        assert 400 <= refused.status_code < 500, (field, refused.content)
        assert field in fields_of(refused) or error_of(refused)["fields"][0]["field"].startswith(
            field
        ), (field, refused.json())
    # Minimums over the endpoint's autoscaling maximum (4).
    over = {"policy": "spread", "clusters": [{"cluster": "gpu-east", "min_replicas": 5}]}
    assert fields_of(api.dave.request("PUT", path, over)) == ["clusters"]
    # Another organization's cluster is no cluster; a viewer may not place.
    (_,) = _clusters_of_globex(api)
    foreign = {"policy": "spread", "clusters": [{"cluster": "globex-gpu"}]}
    assert fields_of(api.dave.request("PUT", path, foreign)) == ["clusters[0].cluster"]
    ok = {"policy": "spread", "clusters": [{"cluster": "local"}]}
    assert api.carol.request("PUT", path, ok).status_code == 403


def _clusters_of_globex(api: Clients) -> list[dict[str, Any]]:
    api.bob.post("secrets", {"name": "kubeconfig", "value": "apiVersion: v1\nkind: Config\n"})
    made = api.bob.post("clusters", {**CLUSTER, "name": "globex-gpu"})
    assert made.status_code == 201, made.content
    return [made.json()]


def test_an_admin_drains_a_cluster_and_undrains_it(api: Clients, endpoint: Deployment) -> None:
    [east] = _clusters(api, "gpu-east")
    placed = api.dave.request(
        "PUT",
        f"deployments/{endpoint.slug}/placement",
        {"policy": "cheapest", "clusters": [{"cluster": "local"}, {"cluster": "gpu-east"}]},
    )
    assert placed.status_code == 200, placed.content
    assert api.dave.post(f"clusters/{east['id']}/drain").status_code == 403
    drained = api.alice.post("clusters/gpu-east/drain")
    assert drained.status_code == 200, drained.content
    assert drained.json() | {"draining_since": None} == {
        "cluster": "gpu-east",
        "draining": True,
        "draining_since": None,
        "endpoints": 1,
    }
    assert api.carol.get(f"clusters/{east['id']}").json()["draining"] is True
    assert AuditEvent.objects.filter(action="cluster.drain").count() == 1
    again = api.alice.post(f"clusters/{east['id']}/drain")
    assert (
        again.status_code == 200 and AuditEvent.objects.filter(action="cluster.drain").count() == 1
    )
    back = api.alice.post(f"clusters/{east['id']}/undrain")
    assert back.json()["draining"] is False
    assert api.bob.post(f"clusters/{east['id']}/drain").status_code == 404
    local = api.alice.post("clusters/local/drain")
    assert local.status_code == 409 and error_of(local)["code"] == "built_in"
