"""Endpoint labels: set at create, replaced by an edit without a new revision, filtered on,
and checked (what ``plinth apply`` relies on for its ownership label and ``--prune``)."""

from __future__ import annotations

import pytest

from tests.api.conftest import SPEC, Clients

pytestmark = pytest.mark.django_db


def test_labels_are_set_filtered_and_replaced_without_a_new_revision(api: Clients) -> None:
    owned = {"plinth.dev/managed-by": "infra", "team": "search"}
    made = api.dave.post("deployments", {"slug": "owned", "spec": SPEC, "labels": owned})
    assert made.status_code == 201 and made.json()["labels"] == owned
    api.dave.post("deployments", {"slug": "free", "spec": SPEC})

    listed = api.dave.get("deployments?label=plinth.dev/managed-by=infra").json()
    assert [d["slug"] for d in listed["items"]] == ["owned"] and listed["count"] == 1
    both = "deployments?label=team=search&label=plinth.dev/managed-by=other"
    assert api.dave.get(both).json()["count"] == 0

    edited = api.dave.patch(
        "deployments/owned", {"spec": SPEC, "base_revision": 1, "labels": {"team": "ads"}}
    )
    assert edited.status_code == 200, edited.json()
    assert edited.json()["labels"] == {"team": "ads"}
    assert edited.json()["target_revision"] == 1  # labels are not settings
    kept = api.dave.patch("deployments/owned", {"spec": SPEC, "base_revision": 1})
    assert kept.json()["labels"] == {"team": "ads"}  # omitted: unchanged


@pytest.mark.parametrize(
    ("labels", "field"),
    [({"Team": "x"}, "labels.Team"), ({"team": "x\x00"}, "labels.team")],
)
def test_bad_labels_are_refused_naming_the_label(
    api: Clients, labels: dict[str, str], field: str
) -> None:
    response = api.dave.post("deployments", {"slug": "bad", "spec": SPEC, "labels": labels})
    assert response.status_code == 422
    assert [f["field"] for f in response.json()["error"]["fields"]] == [field]


def test_a_label_filter_without_a_value_is_refused(api: Clients) -> None:
    response = api.dave.get("deployments?label=team")
    assert response.status_code == 422
    assert response.json()["error"]["fields"][0]["field"] == "label"


def test_validate_lists_what_saving_would_change_against_an_endpoint(api: Clients) -> None:
    api.dave.post("deployments", {"slug": "cmp", "spec": SPEC})
    wider = {**SPEC, "autoscaling": {"min_replicas": 1, "max_replicas": 8}}
    body = api.dave.post("validate", {"spec": wider, "deployment": "cmp"}).json()
    assert body["target_revision"] == 1
    assert [(c["path"], c["before"], c["after"]) for c in body["changes"]] == [
        ("autoscaling.max_replicas", 4, 8)
    ]
    same = api.dave.post("validate", {"spec": SPEC, "deployment": "cmp"}).json()
    assert same["changes"] == []
    assert api.dave.post("validate", {"spec": SPEC}).json()["changes"] is None
