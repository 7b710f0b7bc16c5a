"""/api/v1/deployments/{id}/revisions, /diff and /rollback; two concurrent edits."""

from __future__ import annotations

import hashlib
import importlib
import threading
from typing import Any

import pytest
from django.apps import apps
from django.db import connection

from controlplane import services as platform
from controlplane.models import Role
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from runtime.spec import RuntimeSpec
from tests.api.conftest import SPEC, Api, Clients, error_of, fields_of, spec_with
from tests.conftest import Cast


def _edit(cast: Cast, endpoint: Deployment, base: int, **groups: dict[str, Any]) -> int:
    revision = services.update_settings(
        cast.actor(cast.dave, cast.acme), endpoint.pk, spec=spec_with(**groups), base_revision=base
    )
    return revision.number


def test_revisions_are_listed_newest_first_without_specs(
    api: Clients, cast: Cast, endpoint: Deployment
) -> None:
    _edit(cast, endpoint, 1, batching={"max_running_requests": 64})
    body = api.carol.get("deployments/chat/revisions").json()
    assert body["count"] == 2 and [r["number"] for r in body["items"]] == [2, 1]
    newest = body["items"][0]
    assert newest["is_target"] is True and newest["is_current"] is False
    assert "spec" not in newest and newest["author"] == "user:dave"
    page = api.carol.get("deployments/chat/revisions?limit=1&offset=1").json()
    assert [r["number"] for r in page["items"]] == [1] and page["next"] is None


def test_one_revision_with_its_spec(api: Clients, endpoint: Deployment) -> None:
    body = api.carol.get("deployments/chat/revisions/1").json()
    assert body["number"] == 1 and body["spec"]["model"]["source"] == SPEC["model"]["source"]
    assert api.carol.get("deployments/chat/revisions/9").status_code == 404
    assert fields_of(api.carol.get("deployments/chat/revisions/0")) == ["number"]


def test_diff_lists_each_changed_field(api: Clients, cast: Cast, endpoint: Deployment) -> None:
    _edit(cast, endpoint, 1, batching={"max_running_requests": 64}, parallelism={"tp": 2})
    body = api.carol.get("deployments/chat/revisions/diff?from=1&to=2").json()
    assert body["from_revision"] == 1 and body["to_revision"] == 2
    changes = {c["path"]: (c["before"], c["after"]) for c in body["changes"]}
    assert changes == {"batching.max_running_requests": (None, 64), "parallelism.tp": (1, 2)}
    same = api.carol.get("deployments/chat/revisions/diff?from=2&to=2").json()
    assert same["changes"] == []
    assert api.carol.get("deployments/chat/revisions/diff?from=1&to=7").status_code == 404
    assert set(fields_of(api.carol.get("deployments/chat/revisions/diff"))) == {"from", "to"}


def test_rollback_creates_a_revision_equal_to_the_old_one(
    api: Clients, cast: Cast, endpoint: Deployment
) -> None:
    _edit(cast, endpoint, 1, parallelism={"tp": 2})
    response = api.dave.post("deployments/chat/rollback", {"to_revision": 1})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["target_revision"] == 3 and body["spec"]["parallelism"]["tp"] == 1
    third = api.dave.get("deployments/chat/revisions/3").json()
    first = api.dave.get("deployments/chat/revisions/1").json()
    assert third["spec"] == first["spec"] and third["spec_hash"] == first["spec_hash"]
    assert third["rollback_of"] == 1 and third["message"] == "roll back to revision 1"
    diff = api.dave.get("deployments/chat/revisions/diff?from=1&to=3").json()
    assert diff["changes"] == []
    assert endpoint.events.filter(reason="RolledBack").count() == 1


def test_rolling_back_to_the_target_settings_changes_nothing(
    api: Clients, endpoint: Deployment
) -> None:
    body = api.dave.post("deployments/chat/rollback", {"to_revision": 1}).json()
    assert body["target_revision"] == 1 and body["generation"] == 1


def test_rollback_refusals(api: Clients, endpoint: Deployment) -> None:
    missing = api.dave.post("deployments/chat/rollback", {"to_revision": 5})
    assert missing.status_code == 422 and fields_of(missing) == ["to_revision"]
    assert fields_of(api.dave.post("deployments/chat/rollback", {})) == ["to_revision"]
    assert api.carol.post("deployments/chat/rollback", {"to_revision": 1}).status_code == 403
    assert api.bob.post("deployments/chat/rollback", {"to_revision": 1}).status_code == 404
    assert api.bob.get("deployments/chat/revisions").status_code == 404
    assert api.bob.get("deployments/chat/revisions/1").status_code == 404
    assert api.bob.get("deployments/chat/revisions/diff?from=1&to=1").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_edits_one_wins_the_other_gets_409(cast: Cast) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    endpoint = services.create_deployment(owner, slug="race", name="Race", spec=SPEC)
    keys = [
        platform.create_api_key(owner, name=f"k{i}", kind="management", role=Role.DEVELOPER)
        for i in range(2)
    ]
    barrier = threading.Barrier(2)
    results: dict[int, Any] = {}

    def edit(i: int) -> None:
        try:
            spec = spec_with(batching={"max_running_requests": 32 * (i + 1)})
            barrier.wait()
            results[i] = Api(keys[i].plaintext).patch(
                "deployments/race", {"spec": spec, "base_revision": 1, "message": f"edit {i}"}
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=edit, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    statuses = sorted(r.status_code for r in results.values())
    assert statuses == [200, 409]
    winner = next(i for i, r in results.items() if r.status_code == 200)
    loser = results[1 - winner]
    assert error_of(loser)["code"] == "revision_conflict"
    # Nothing lost: the winner's change is the target, and the loser can re-apply on top of it.
    assert endpoint.revisions.count() == 2
    endpoint.refresh_from_db()
    assert endpoint.target_revision.message == f"edit {winner}"
    retry = Api(keys[1 - winner].plaintext).patch(
        "deployments/race",
        {"spec": spec_with(batching={"max_running_requests": 8}), "base_revision": 2},
    )
    assert retry.status_code == 200 and retry.json()["target_revision"] == 3


@pytest.mark.parametrize("edits", [1, 12])
def test_listing_revisions_takes_a_bounded_number_of_queries(
    api: Clients, cast: Cast, endpoint: Deployment, edits: int, django_assert_max_num_queries: Any
) -> None:
    for n in range(edits):
        _edit(cast, endpoint, n + 1, batching={"max_running_requests": 8 + n})
    api.carol.get("deployments/chat")  # warm the key's last-used stamp
    with django_assert_max_num_queries(4):
        body = api.carol.get("deployments/chat/revisions?limit=200").json()
    assert body["count"] == edits + 1


def test_revisions_hashed_before_the_upgrade_are_rehashed_and_an_unchanged_apply_makes_none(
    cast: Cast, endpoint: Deployment
) -> None:
    """A revision stored with the old hash (every field, defaults included) is rehashed by the
    migration; re-applying its settings afterwards makes no new revision."""
    revision = endpoint.target_revision
    assert revision is not None
    old = hashlib.sha256(RuntimeSpec.model_validate(revision.spec).canonical_json().encode())
    type(revision).objects.filter(pk=revision.pk).update(spec_hash=old.hexdigest())
    rehash = importlib.import_module("deployments.migrations.0025_spec_hash_without_defaults")
    rehash.rehash(apps, None)
    revision.refresh_from_db()
    assert revision.spec_hash == RuntimeSpec.model_validate(revision.spec).content_hash()
    again = services.update_settings(
        cast.actor(cast.dave, cast.acme), endpoint.pk, spec=revision.spec, base_revision=1
    )
    assert again.number == 1
    assert endpoint.revisions.count() == 1
