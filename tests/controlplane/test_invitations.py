"""The invitation services: who may invite to which role, expiry, and what acceptance checks."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from controlplane import invitations, services
from controlplane.access import AccessDenied, NotFound
from controlplane.models import Invitation, Membership, Role
from tests.conftest import Cast


def test_only_owners_invite_owners(cast: Cast) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    dave = Membership.objects.get(user=cast.dave, organization=cast.acme)
    services.change_member_role(owner, membership_id=dave.pk, role=Role.ADMIN)
    with pytest.raises(AccessDenied):
        invitations.invite(cast.actor(cast.dave, cast.acme), username="bob", role=Role.OWNER)
    invitation = invitations.invite(owner, username="bob", role=Role.OWNER)
    # ... and only owners revoke an owner's invitation.
    with pytest.raises(AccessDenied):
        invitations.revoke_invitation(cast.actor(cast.dave, cast.acme), invitation_id=invitation.pk)
    membership = invitations.accept_invitation(cast.bob, invitation_id=invitation.pk)
    assert membership.role == Role.OWNER and membership.organization == cast.acme


def test_an_expired_invitation_cannot_be_accepted_and_blocks_nothing(cast: Cast) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    old = invitations.invite(owner, username="bob", role=Role.VIEWER)
    Invitation.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert not invitations.pending_for_user(cast.bob).exists()
    with pytest.raises(NotFound):
        invitations.accept_invitation(cast.bob, invitation_id=old.pk)
    fresh = invitations.invite(owner, username="bob", role=Role.DEVELOPER)
    old.refresh_from_db()
    assert old.status == "expired" and fresh.is_open


def test_an_invitation_from_a_revoked_key_is_void(cast: Cast) -> None:
    owner = cast.actor(cast.alice, cast.acme)
    key = services.create_api_key(owner, name="ops", kind="management", role=Role.ADMIN)
    invitation = invitations.invite(
        services.actor_for_key(key.api_key), username="bob", role=Role.ADMIN
    )
    services.revoke_api_key(owner, key_id=key.api_key.pk)
    with pytest.raises(services.Conflict):
        invitations.accept_invitation(cast.bob, invitation_id=invitation.pk)
    assert not Membership.objects.filter(user=cast.bob, organization=cast.acme).exists()
    assert Invitation.objects.get(pk=invitation.pk).status == "revoked"


def test_a_malformed_invitation_id_looks_missing(cast: Cast) -> None:
    with pytest.raises(NotFound):
        invitations.accept_invitation(cast.bob, invitation_id="not-a-uuid")
