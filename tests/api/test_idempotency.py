"""Idempotency-Key on POST: a retry gets the first response, not a second effect."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from controlplane import services as platform
from controlplane.models import ApiKey, AuditEvent, Membership, Role
from deployments.api.models import IdempotencyRecord
from deployments.endpoints.models import Deployment
from tests.api.conftest import SPEC, Api, Clients, error_of
from tests.conftest import Cast

BODY = {"slug": "chat", "spec": SPEC}


def dave_key_caller() -> str:
    """The caller identity of the ``api.dave`` management key (records are per caller)."""
    return f"key:{ApiKey.objects.get(name='developer key').pk}"


def test_a_replayed_create_returns_the_first_result_once(api: Clients) -> None:
    first = api.dave.post("deployments", BODY, **{"Idempotency-Key": "create-chat-1"})
    again = api.dave.post("deployments", BODY, **{"Idempotency-Key": "create-chat-1"})
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    assert again["Idempotent-Replayed"] == "true"
    assert Deployment.objects.count() == 1
    # Without the header, the same body is a new request (and the slug is now taken).
    assert api.dave.post("deployments", BODY).status_code == 409


def test_reusing_a_key_for_another_request_is_refused(api: Clients) -> None:
    api.dave.post("deployments", BODY, **{"Idempotency-Key": "k1"})
    other = api.dave.post("deployments", {**BODY, "slug": "other"}, **{"Idempotency-Key": "k1"})
    assert other.status_code == 422 and error_of(other)["code"] == "idempotency_key_reused"
    assert not Deployment.objects.filter(slug="other").exists()


def test_keys_are_scoped_to_the_organization(api: Clients) -> None:
    headers = {"Idempotency-Key": "same"}
    mine = api.alice.post("api-keys", {"name": "a", "kind": "inference"}, **headers)
    theirs = api.bob.post("api-keys", {"name": "a", "kind": "inference"}, **headers)
    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"]
    assert ApiKey.objects.filter(name="a").count() == 2


def test_refusals_are_replayed_too(api: Clients) -> None:
    body = {"slug": "Bad", "spec": SPEC}
    first = api.dave.post("deployments", body, **{"Idempotency-Key": "bad"})
    again = api.dave.post("deployments", body, **{"Idempotency-Key": "bad"})
    assert first.status_code == again.status_code == 422
    assert first.content == again.content


def test_a_request_still_running_makes_the_retry_wait(api: Clients, cast: Cast) -> None:
    IdempotencyRecord.objects.create(
        organization=cast.acme,
        caller=dave_key_caller(),
        role="developer",
        key="busy",
        method="POST",
        path="/api/v1/deployments",
        body_hash="0" * 64,
        expires_at=timezone.now() + timedelta(hours=1),
    )
    busy = api.dave.post("deployments", BODY, **{"Idempotency-Key": "busy"})
    assert busy.status_code == 409 and error_of(busy)["code"] == "idempotency_in_progress"
    assert not Deployment.objects.exists()


def test_expired_records_are_forgotten(api: Clients, cast: Cast) -> None:
    IdempotencyRecord.objects.create(
        organization=cast.acme,
        caller=dave_key_caller(),
        role="developer",
        key="old",
        method="POST",
        path="/api/v1/deployments",
        body_hash="0" * 64,
        status_code=201,
        expires_at=timezone.now() - timedelta(seconds=1),
    )
    fresh = api.dave.post("deployments", BODY, **{"Idempotency-Key": "old"})
    assert fresh.status_code == 201 and Deployment.objects.count() == 1


def test_an_overlong_key_is_refused(api: Clients) -> None:
    response = api.dave.post("deployments", BODY, **{"Idempotency-Key": "k" * 300})
    assert response.status_code == 422 and error_of(response)["fields"][0]["field"] == (
        "Idempotency-Key"
    )
    assert not Deployment.objects.exists()


def test_a_new_keys_value_is_never_stored_for_replay(api: Clients) -> None:
    headers = {"Idempotency-Key": "mint"}
    body = {"name": "ci", "kind": "inference"}
    first = api.dave.post("api-keys", body, **headers)
    assert first.status_code == 201
    plaintext, key_id = first.json()["key"], first.json()["id"]
    replay = api.dave.post("api-keys", body, **headers)
    assert replay.status_code == 409
    error = error_of(replay)
    assert error["code"] == "idempotent_secret_not_replayable" and key_id in error["message"]
    assert plaintext not in replay.content.decode()
    stored = b"".join(bytes(r.response_body) for r in IdempotencyRecord.objects.all())
    assert plaintext.encode() not in stored and ApiKey.objects.filter(name="ci").count() == 1


def test_a_secrets_value_is_not_recoverable_from_the_stored_request_hash(api: Clients) -> None:
    body = b'{"name": "hf", "value": "hunter2"}'
    api.alice.post("secrets", body, **{"Idempotency-Key": "s1"})
    record = IdempotencyRecord.objects.get(key="s1")
    assert record.body_hash != hashlib.sha256(body).hexdigest()  # keyed, not a plain digest
    assert b"hunter2" not in bytes(record.response_body)


def test_a_viewer_repeating_an_admins_request_is_authorized_not_replayed(api: Clients) -> None:
    body, headers = {"name": "hf", "value": "hf_x"}, {"Idempotency-Key": "seen-in-a-log"}
    first = api.alice.post("secrets", body, **headers)
    assert first.status_code == 201
    again = api.carol.post("secrets", body, **headers)
    assert again.status_code == 403 and error_of(again)["code"] == "forbidden"
    assert "Idempotent-Replayed" not in again
    assert first.json()["id"] not in again.content.decode()


# Every ordered pair of management-key roles: the second caller's answer is its own.
KEY_ROLES = ("admin", "developer", "viewer")
ROLE_PAIRS = [(a, b) for a in KEY_ROLES for b in KEY_ROLES]


@pytest.mark.parametrize(("first_role", "second_role"), ROLE_PAIRS)
def test_a_key_is_never_replayed_to_another_caller(
    cast: Cast, first_role: str, second_role: str
) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    first, second = (
        platform.create_api_key(owner, name=role, kind="management", role=role)
        for role in (first_role, second_role)
    )
    body, headers = {"name": "hf", "value": "hf_x"}, {"Idempotency-Key": "shared"}
    Api(first.plaintext).post("secrets", body, **headers)
    answer = Api(second.plaintext).post("secrets", body, **headers)
    assert "Idempotent-Replayed" not in answer
    if second_role == "admin":
        # Its own request ran (a second write of the secret), not a replay of the first one's.
        assert answer.status_code == 201
        assert AuditEvent.objects.filter(actor_key=second.api_key).exists()
    else:
        assert answer.status_code == 403 and error_of(answer)["code"] == "forbidden"


def test_a_user_demoted_since_the_first_request_gets_no_replay(cast: Cast) -> None:
    session = Client()
    session.force_login(cast.dave)
    body = json.dumps(BODY)
    headers = {"content_type": "application/json", "HTTP_IDEMPOTENCY_KEY": "create-1"}
    assert session.post("/api/v1/deployments", body, **headers).status_code == 201
    dave = Membership.objects.get(user=cast.dave, organization=cast.acme)
    platform.change_member_role(
        cast.actor(cast.alice, cast.acme), membership_id=dave.pk, role=Role.VIEWER
    )
    again = session.post("/api/v1/deployments", body, **headers)
    assert again.status_code == 403 and "Idempotent-Replayed" not in again
    assert "developer" in error_of(again)["message"]
