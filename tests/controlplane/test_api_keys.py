"""API keys: stored hashed, shown once, refused when revoked or expired, scoped by org."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from controlplane import keys, services
from controlplane.access import AccessDenied, NotFound
from controlplane.models import ApiKey, AuditEvent, Membership, Role
from deployments.endpoints import services as domain
from tests.conftest import Cast


def test_only_prefix_and_hash_are_stored(cast: Cast) -> None:
    created = services.create_api_key(
        cast.actor(cast.alice, cast.acme), name="ci", kind="management", role=Role.ADMIN
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM controlplane_apikey")
        rows = cursor.fetchall()
    assert created.plaintext not in repr(rows)
    key = ApiKey.objects.get()
    assert created.plaintext.startswith(key.prefix + "_")
    # The secret is all after the public prefix (token_urlsafe may itself hold an underscore, so
    # splitting on the last one could leave a single character that any row contains).
    secret_part = created.plaintext.removeprefix(key.prefix + "_")
    assert len(secret_part) >= 40 and secret_part not in repr(rows)
    assert key.key_hash == keys.hash_key(created.plaintext)


def test_a_valid_key_authenticates_and_records_last_use(cast: Cast) -> None:
    created = services.create_api_key(
        cast.actor(cast.dave, cast.acme), name="app", kind="inference"
    )
    found = services.authenticate_key(created.plaintext, kind="inference")
    assert found is not None and found.pk == created.api_key.pk
    created.api_key.refresh_from_db()
    assert created.api_key.last_used_at is not None


def test_a_key_of_the_other_kind_or_altered_is_refused(cast: Cast) -> None:
    created = services.create_api_key(
        cast.actor(cast.dave, cast.acme), name="app", kind="inference"
    )
    assert services.authenticate_key(created.plaintext, kind="management") is None
    tampered = created.plaintext[:-1] + ("A" if created.plaintext[-1] != "A" else "B")
    assert services.authenticate_key(tampered, kind="inference") is None
    assert services.authenticate_key("not-a-key", kind="inference") is None
    assert services.authenticate_key("", kind="inference") is None


def test_verification_uses_a_constant_time_comparison(
    cast: Cast, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Seam: we cannot measure timing in a test, so we check the comparison goes through
    # hmac.compare_digest (constant time) rather than ==.
    calls: list[tuple[str, str]] = []
    import hmac

    real = hmac.compare_digest

    def spy(a: str, b: str) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(keys.hmac, "compare_digest", spy)
    created = services.create_api_key(
        cast.actor(cast.dave, cast.acme), name="app", kind="inference"
    )
    assert services.authenticate_key(created.plaintext, kind="inference") is not None
    assert calls and calls[-1][1] == created.api_key.key_hash


def test_a_revoked_key_is_refused(cast: Cast) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    created = services.create_api_key(actor, name="app", kind="inference")
    services.revoke_api_key(actor, key_id=created.api_key.pk)
    assert services.authenticate_key(created.plaintext, kind="inference") is None


def test_an_expired_key_is_refused(cast: Cast) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    created = services.create_api_key(
        actor, name="short", kind="inference", expires_at=timezone.now() + timedelta(minutes=5)
    )
    ApiKey.objects.filter(pk=created.api_key.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert services.authenticate_key(created.plaintext, kind="inference") is None


def test_expiry_in_the_past_is_refused_naming_the_field(cast: Cast) -> None:
    with pytest.raises(services.ServiceError) as err:
        services.create_api_key(
            cast.actor(cast.dave, cast.acme),
            name="x",
            kind="inference",
            expires_at=timezone.now() - timedelta(days=1),
        )
    assert err.value.field == "expires_at"


def test_keys_of_another_organization_look_missing(cast: Cast) -> None:
    created = services.create_api_key(cast.actor(cast.alice, cast.acme), name="a", kind="inference")
    with pytest.raises(NotFound):
        services.revoke_api_key(cast.actor(cast.bob, cast.globex), key_id=created.api_key.pk)
    with pytest.raises(NotFound):
        services.get_api_key(cast.actor(cast.bob, cast.globex), created.api_key.pk)


def test_a_viewer_cannot_create_or_revoke_keys(cast: Cast) -> None:
    viewer = cast.actor(cast.carol, cast.acme)
    with pytest.raises(AccessDenied):
        services.create_api_key(viewer, name="x", kind="inference")
    created = services.create_api_key(cast.actor(cast.alice, cast.acme), name="a", kind="inference")
    with pytest.raises(AccessDenied):
        services.revoke_api_key(viewer, key_id=created.api_key.pk)


def test_a_developer_cannot_mint_management_keys(cast: Cast) -> None:
    with pytest.raises(AccessDenied):
        services.create_api_key(cast.actor(cast.dave, cast.acme), name="x", kind="management")


def test_management_keys_cannot_be_scoped_to_endpoints(cast: Cast) -> None:
    import uuid

    with pytest.raises(services.ServiceError) as err:
        services.create_api_key(
            cast.actor(cast.alice, cast.acme),
            name="x",
            kind="management",
            allowed_deployment_ids=[uuid.uuid4()],
        )
    assert err.value.field == "allowed_deployment_ids"


def test_a_key_is_scoped_only_to_endpoints_of_its_organization(cast: Cast) -> None:
    # The service checks a scope itself: no front-end has to remember to.
    spec = {
        "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
        "hardware": {"gpu": "H100-SXM"},
    }
    acme = cast.actor(cast.alice, cast.acme)
    ours = domain.create_deployment(acme, slug="ours", name="Ours", spec=spec)
    theirs = domain.create_deployment(
        cast.actor(cast.bob, cast.globex), slug="theirs", name="Theirs", spec=spec
    )
    scoped = services.create_api_key(
        acme, name="scoped", kind="inference", allowed_deployment_ids=[ours.pk]
    )
    assert scoped.api_key.allowed_deployment_ids == [ours.pk]
    with pytest.raises(services.ServiceError) as err:
        services.create_api_key(
            acme, name="x", kind="inference", allowed_deployment_ids=[ours.pk, theirs.pk]
        )
    assert err.value.field == "allowed_deployment_ids"
    assert not ApiKey.objects.filter(name="x").exists()


def test_each_key_mutation_writes_one_audit_event(cast: Cast) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    before = AuditEvent.objects.count()
    created = services.create_api_key(actor, name="ci", kind="inference")
    assert AuditEvent.objects.count() == before + 1
    services.revoke_api_key(actor, key_id=created.api_key.pk)
    assert AuditEvent.objects.count() == before + 2
    event = AuditEvent.objects.first()
    assert event is not None
    assert event.action == "api_key.revoke" and event.actor_label == "user:alice"
    assert event.before is not None and event.before["revoked"] is False
    assert event.after is not None and event.after["revoked"] is True
    assert created.plaintext not in str(event.after)


def test_a_removed_or_demoted_admin_loses_their_management_keys(cast: Cast) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    dave = Membership.objects.get(user=cast.dave, organization=cast.acme)
    services.change_member_role(owner, membership_id=dave.pk, role=Role.ADMIN)
    as_dave = cast.actor(cast.dave, cast.acme)
    admin_key = services.create_api_key(as_dave, name="ops", kind="management", role=Role.ADMIN)
    dev_key = services.create_api_key(as_dave, name="ci", kind="management", role=Role.DEVELOPER)
    app_key = services.create_api_key(as_dave, name="app", kind="inference")

    services.change_member_role(owner, membership_id=dave.pk, role=Role.DEVELOPER)
    assert services.authenticate_key(admin_key.plaintext, kind="management") is None
    assert services.authenticate_key(dev_key.plaintext, kind="management") is not None

    services.remove_member(owner, membership_id=dave.pk)
    assert services.authenticate_key(dev_key.plaintext, kind="management") is None
    # Inference keys are the organization's application credentials: they keep working.
    assert services.authenticate_key(app_key.plaintext, kind="inference") is not None
