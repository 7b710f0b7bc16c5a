"""/api/v1/api-keys: list, create (plaintext once), revoke; and `manage.py plinth_create_key`."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from controlplane import services as platform
from controlplane.models import ApiKey, AuditEvent
from tests.api.conftest import SPEC, Api, Clients, error_of, fields_of
from tests.conftest import Cast


def test_a_developer_creates_an_inference_key_shown_once(api: Clients) -> None:
    response = api.dave.post("api-keys", {"name": "app", "kind": "inference"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["key"].startswith(body["prefix"]) and body["active"] is True
    listed = api.carol.get("api-keys").json()
    mine = next(k for k in listed["items"] if k["id"] == body["id"])
    assert "key" not in mine and body["key"] not in str(listed)
    assert platform.authenticate_key(body["key"], kind="inference") is not None


def test_management_keys_need_an_admin_and_act_with_their_role(api: Clients) -> None:
    assert api.dave.post("api-keys", {"name": "ci", "kind": "management"}).status_code == 403
    created = api.alice.post("api-keys", {"name": "ci", "kind": "management", "role": "viewer"})
    assert created.status_code == 201
    viewer = Api(created.json()["key"])
    assert viewer.get("deployments").status_code == 200
    assert viewer.post("api-keys", {"name": "x", "kind": "inference"}).status_code == 403


def test_bad_key_requests_name_the_field(api: Clients) -> None:
    assert fields_of(api.alice.post("api-keys", {"name": "x", "kind": "root"})) == ["kind"]
    assert fields_of(api.alice.post("api-keys", {"kind": "inference"})) == ["name"]
    past = {"name": "x", "kind": "inference", "expires_at": "2001-01-01T00:00:00Z"}
    assert fields_of(api.alice.post("api-keys", past)) == ["expires_at"]
    rpm = {"name": "x", "kind": "inference", "requests_per_minute": 0}
    assert fields_of(api.alice.post("api-keys", rpm)) == ["requests_per_minute"]
    # A scope names endpoints of the caller's organization, not another's or none at all.
    foreign = api.bob.post("deployments", {"slug": "theirs", "spec": SPEC}).json()["id"]
    scoped = {"name": "x", "kind": "inference", "allowed_deployment_ids": [foreign]}
    assert fields_of(api.alice.post("api-keys", scoped)) == ["allowed_deployment_ids"]


def test_revoking_a_key_stops_it_working(api: Clients) -> None:
    created = api.alice.post("api-keys", {"name": "ci", "kind": "management", "role": "admin"})
    key_id, key = created.json()["id"], created.json()["key"]
    assert api.bob.delete(f"api-keys/{key_id}").status_code == 404  # another org's key
    assert api.carol.delete(f"api-keys/{key_id}").status_code == 403
    revoked = api.alice.delete(f"api-keys/{key_id}")
    assert revoked.status_code == 200 and revoked.json()["active"] is False
    assert error_of(Api(key).get("deployments"))["code"] == "unauthenticated"
    assert api.alice.delete("api-keys/not-a-uuid").status_code == 422


def test_the_command_prints_a_working_key_once(cast: Cast) -> None:
    out = StringIO()
    call_command("plinth_create_key", "--org", "Acme", "--name", "cli", stdout=out)
    plaintext = out.getvalue().strip()
    key = ApiKey.objects.get(name="cli")
    assert key.kind == "management" and key.role == "admin" and plaintext.startswith(key.prefix)
    assert Api(plaintext).get("deployments").status_code == 200
    with pytest.raises(CommandError, match="no organization"):
        call_command("plinth_create_key", "--org", "Initech", stdout=StringIO())


def test_a_developer_changes_an_inference_keys_limits_audited(api: Clients) -> None:
    created = api.dave.post(
        "api-keys", {"name": "app", "kind": "inference", "tokens_per_minute": 900}
    )
    key_id = created.json()["id"]
    changed = api.dave.patch(f"api-keys/{key_id}", {"requests_per_minute": 60})
    assert changed.status_code == 200, changed.content
    body = changed.json()
    assert (body["requests_per_minute"], body["tokens_per_minute"]) == (60, 900)  # one left out
    lifted = api.dave.patch(f"api-keys/{key_id}", {"tokens_per_minute": None}).json()
    assert (lifted["requests_per_minute"], lifted["tokens_per_minute"]) == (60, None)
    stored = ApiKey.objects.get(pk=key_id)
    assert (stored.requests_per_minute, stored.tokens_per_minute) == (60, None)
    events = AuditEvent.objects.filter(action="api_key.limits", target_id=key_id)
    assert events.count() == 2
    assert events.order_by("id").first().after["requests_per_minute"] == 60  # type: ignore[union-attr]


def test_changing_limits_is_org_scoped_role_checked_and_names_the_field(api: Clients) -> None:
    key_id = api.dave.post("api-keys", {"name": "app", "kind": "inference"}).json()["id"]
    path = f"api-keys/{key_id}"
    assert api.bob.patch(path, {"requests_per_minute": 5}).status_code == 404  # another org's
    assert api.carol.patch(path, {"requests_per_minute": 5}).status_code == 403  # a viewer
    assert fields_of(api.dave.patch(path, {"requests_per_minute": 0})) == ["requests_per_minute"]
    assert fields_of(api.dave.patch(path, {"tokens_per_minute": "9"})) == ["tokens_per_minute"]
    assert fields_of(api.dave.patch(path, {"name": "renamed"})) == ["name"]
    assert fields_of(api.dave.patch(path, {})) == ["requests_per_minute"]
    management = api.alice.post("api-keys", {"name": "ci", "kind": "management"}).json()["id"]
    refused = api.alice.patch(f"api-keys/{management}", {"requests_per_minute": 5})
    assert fields_of(refused) == ["requests_per_minute"]
    api.dave.delete(path)
    assert error_of(api.dave.patch(path, {"requests_per_minute": 5}))["code"] == "key_revoked"
    assert api.dave.patch("api-keys/not-a-uuid", {"requests_per_minute": 5}).status_code == 422


def test_an_inference_keys_priority_and_weight_are_set_changed_and_audited(api: Clients) -> None:
    plain = api.dave.post("api-keys", {"name": "app", "kind": "inference"}).json()
    assert (plain["priority"], plain["weight"]) == ("standard", 1)  # the defaults
    created = api.dave.post(
        "api-keys", {"name": "nightly", "kind": "inference", "priority": "batch", "weight": 3}
    )
    assert created.status_code == 201, created.content
    key_id = created.json()["id"]
    assert (created.json()["priority"], created.json()["weight"]) == ("batch", 3)
    changed = api.dave.patch(f"api-keys/{key_id}", {"priority": "critical"}).json()
    assert (changed["priority"], changed["weight"]) == ("critical", 3)  # weight left out: kept
    stored = ApiKey.objects.get(pk=key_id)
    assert (stored.priority, stored.weight) == ("critical", 3)
    event = AuditEvent.objects.get(action="api_key.limits", target_id=key_id)
    assert (event.before["priority"], event.after["priority"]) == ("batch", "critical")


def test_bad_priorities_and_weights_name_the_field(api: Clients) -> None:
    new = {"name": "x", "kind": "inference"}
    assert fields_of(api.dave.post("api-keys", {**new, "priority": "urgent"})) == ["priority"]
    assert fields_of(api.dave.post("api-keys", {**new, "weight": 0})) == ["weight"]
    assert fields_of(api.dave.post("api-keys", {**new, "weight": 1001})) == ["weight"]
    assert fields_of(api.dave.post("api-keys", {**new, "weight": "2"})) == ["weight"]
    management = {"name": "ci", "kind": "management", "priority": "critical"}
    assert fields_of(api.alice.post("api-keys", management)) == ["priority"]
    key_id = api.dave.post("api-keys", new).json()["id"]
    path = f"api-keys/{key_id}"
    assert fields_of(api.dave.patch(path, {"priority": "low"})) == ["priority"]
    assert fields_of(api.dave.patch(path, {"priority": None})) == ["priority"]
    assert fields_of(api.dave.patch(path, {"weight": None})) == ["weight"]
    assert fields_of(api.dave.patch(path, {"weight": -1})) == ["weight"]
