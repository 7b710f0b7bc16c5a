"""/api/v1/audit: the organization's audit log for admins, newest first, filtered and paged, with
no secret value in any answer."""

from __future__ import annotations

import uuid
from datetime import timedelta
from urllib.parse import quote

from django.utils import timezone

from controlplane import services as platform
from controlplane.models import ApiKey, AuditEvent
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from tests.api.conftest import Clients, error_of, fields_of
from tests.conftest import Cast


def test_admins_page_through_the_log_newest_first(
    api: Clients, cast: Cast, endpoint: Deployment
) -> None:
    total = AuditEvent.objects.filter(organization=cast.acme).count()
    first = api.alice.get("audit?limit=2").json()
    assert first["count"] == total and len(first["items"]) == 2 and first["next"]
    rest = api.alice.get(first["next"]).json()
    ids = [e["id"] for e in first["items"] + rest["items"]]
    assert ids == sorted(ids, reverse=True) and len(set(ids)) == min(total, 4)
    [created] = [e for e in first["items"] if e["action"] == "deployment.create"]
    assert created["actor"] == "user:dave"
    assert created["target_type"] == "deployments.deployment"
    assert created["target_id"] == str(endpoint.pk)
    assert created["before"] is None and created["after"]["desired_state"] == "running"


def test_filters_by_action_actor_since_and_target(
    api: Clients, cast: Cast, endpoint: Deployment
) -> None:
    services.scale(cast.actor(cast.alice, cast.acme), endpoint.pk, replicas=2)
    deployment = api.alice.get("audit?action=deployment.").json()
    assert [e["action"] for e in deployment["items"]] == ["deployment.scale", "deployment.create"]
    by_dave = api.alice.get("audit?actor=user:dave").json()["items"]
    assert by_dave and {e["actor"] for e in by_dave} == {"user:dave"}
    target = api.alice.get(f"audit?target_id={endpoint.pk}").json()
    assert target["count"] == 2
    later = quote((timezone.now() + timedelta(minutes=1)).isoformat())
    assert api.alice.get(f"audit?since={later}").json() == {"items": [], "count": 0, "next": None}
    assert fields_of(api.alice.get("audit?since=last-week")) == ["since"]
    assert fields_of(api.alice.get("audit?limit=201")) == ["limit"]


def test_only_admins_of_the_organization_read_it(
    api: Clients, cast: Cast, endpoint: Deployment
) -> None:
    for caller in (api.dave, api.carol):
        refused = caller.get("audit")
        assert refused.status_code == 403 and "admin" in error_of(refused)["message"]
    assert api.anonymous.get("audit").status_code == 401
    globex = api.bob.get("audit?limit=200").json()
    assert globex["items"] and all("acme" not in str(e).lower() for e in globex["items"])
    acme_ids = {str(endpoint.pk), str(cast.acme.pk)}
    assert not [e for e in globex["items"] if e["target_id"] in acme_ids]


def test_no_secret_value_is_in_any_answer(api: Clients, cast: Cast) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    token = f"hf_audit{uuid.uuid4().hex}"
    platform.set_secret(owner, name="hf-token", value=token)
    platform.set_secret(owner, name="hf-token", value=token + "2")  # replaced: before and after
    key = platform.create_api_key(owner, name="audited", kind="management", role="viewer")
    key_hash = ApiKey.objects.get(pk=key.api_key.pk).key_hash
    # A writer that slipped: the reader masks secret field names at any depth all the same.
    AuditEvent.objects.create(
        organization=cast.acme,
        actor_label="system",
        action="test.slip",
        target_type="test",
        target_id="1",
        before={"nested": [{"token": "slipped-token"}]},
        after={"Value": "slipped-value", "name": "shown"},
    )
    body = api.alice.get("audit?limit=200")
    text = body.content.decode()
    for secret in (token, key.plaintext, key_hash, "slipped-token", "slipped-value"):
        assert secret not in text
    [slip] = [e for e in body.json()["items"] if e["action"] == "test.slip"]
    assert slip["before"] == {"nested": [{"token": "(write-only)"}]}
    assert slip["after"] == {"Value": "(write-only)", "name": "shown"}
