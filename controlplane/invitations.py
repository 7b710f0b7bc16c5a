"""Joining an organization: admins invite a username, the person signed in under it accepts.

Nobody becomes a member of an organization without their own consent, and inviting answers
the same whether or not the name belongs to anyone: the invitation is stored by name and only
matched to a user when that user looks at their own invitations. The answers that differ
("already a member", "already invited") are about the inviting organization only.

Admins invite and revoke (owners for the owner role); the invitee accepts or declines from
their own signed-in session, never with an organization's management key. Acceptance checks
that whoever invited still may grant the role, so a removed admin's invitations die with
their access. Every change records one AuditEvent in the inviting organization.
``controlplane.services.add_member`` remains for bootstrapping and tests, not for front ends.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from controlplane import audit
from controlplane.access import AccessDenied, Actor, NotFound, require_role
from controlplane.models import (
    Invitation,
    InvitationStatus,
    Membership,
    Role,
)
from controlplane.services import Conflict, ServiceError, actor_for_key, actor_for_user

INVITATION_LIFETIME = timedelta(days=7)


def _grant_role_needed(role: str) -> str:
    # Only owners make owners; admins bring in everyone below them.
    return Role.OWNER if role == Role.OWNER else Role.ADMIN


def _check_username(username: str) -> str:
    username = username.strip()
    try:
        if not username:
            raise ValidationError("empty")
        UnicodeUsernameValidator()(username)
    except ValidationError:
        # A format rule, the same for every name: it says nothing about who exists.
        raise ServiceError(
            "a username is 1-150 letters, digits and @ . + - _", field="username"
        ) from None
    return username[:150]


def _snapshot(invitation: Invitation) -> dict[str, str]:
    return {"username": invitation.username, "role": invitation.role, "status": invitation.status}


@transaction.atomic
def invite(actor: Actor, *, username: str, role: str) -> Invitation:
    """Invite ``username`` to the actor's organization with ``role``.

    The answer is the same pending invitation whether or not such a user exists.
    """
    if role not in Role.values:
        raise ServiceError(
            f"unknown role {role!r}; use one of {', '.join(Role.values)}", field="role"
        )
    require_role(actor, _grant_role_needed(role))
    username = _check_username(username)
    org = actor.organization
    if Membership.objects.filter(organization=org, user__username=username).exists():
        raise Conflict(f"{username} is already a member", field="username")
    _expire_stale(Invitation.objects.filter(organization=org, username=username))
    invitation = Invitation(
        organization=org,
        username=username,
        role=role,
        invited_by=actor.user,
        invited_by_key=actor.api_key,
        expires_at=timezone.now() + INVITATION_LIFETIME,
    )
    try:
        with transaction.atomic():
            invitation.save()
    except IntegrityError as exc:
        raise Conflict(
            f"{username} already has a pending invitation; revoke it to invite again",
            field="username",
        ) from exc
    audit.record(actor, "invitation.create", invitation, after=_snapshot(invitation))
    return invitation


def _expire_stale(invitations: QuerySet[Invitation]) -> None:
    """Mark pending invitations past their expiry as expired, so a new one can be made."""
    invitations.filter(status=InvitationStatus.PENDING, expires_at__lte=timezone.now()).update(
        status=InvitationStatus.EXPIRED
    )


def pending_for_organization(actor: Actor) -> QuerySet[Invitation]:
    """The organization's open invitations (admins)."""
    require_role(actor, Role.ADMIN)
    return Invitation.objects.filter(
        organization=actor.organization,
        status=InvitationStatus.PENDING,
        expires_at__gt=timezone.now(),
    ).select_related("organization", "invited_by", "invited_by_key")


@transaction.atomic
def revoke_invitation(actor: Actor, *, invitation_id: uuid.UUID | str) -> Invitation:
    require_role(actor, Role.ADMIN)
    invitation = _open_invitation(
        Invitation.objects.filter(organization=actor.organization), invitation_id
    )
    require_role(actor, _grant_role_needed(invitation.role))
    before = _snapshot(invitation)
    _respond(invitation, InvitationStatus.REVOKED)
    audit.record(actor, "invitation.revoke", invitation, before=before, after=_snapshot(invitation))
    return invitation


# --- the invitee's side: their own session, never an organization's key ----------------------


def pending_for_user(user: User) -> QuerySet[Invitation]:
    """Open invitations addressed to this user's name, in every organization."""
    return Invitation.objects.filter(
        username=user.get_username(),
        status=InvitationStatus.PENDING,
        expires_at__gt=timezone.now(),
    ).select_related("organization", "invited_by", "invited_by_key")


def accept_invitation(user: User, *, invitation_id: uuid.UUID | str) -> Membership:
    """Join the inviting organization with the invited role."""
    membership = _accept(user, invitation_id)
    if membership is None:
        raise Conflict(
            "this invitation is no longer valid: whoever sent it may no longer grant that role; "
            "ask an admin of the organization to invite you again",
            field="invitation_id",
        )
    return membership


@transaction.atomic
def _accept(user: User, invitation_id: uuid.UUID | str) -> Membership | None:
    """The new (or existing) membership, or None when the invitation turned out void (it is
    then marked revoked, and that is committed: it must not come back on the next look)."""
    invitation = _open_invitation(_addressed_to(user), invitation_id)
    actor = Actor(organization=invitation.organization, role=invitation.role, user=user)
    if not _inviter_may_still_grant(invitation):
        _respond(invitation, InvitationStatus.REVOKED)
        audit.record(actor, "invitation.void", invitation, after=_snapshot(invitation))
        return None
    membership, created = Membership.objects.get_or_create(
        organization=invitation.organization, user=user, defaults={"role": invitation.role}
    )
    _respond(invitation, InvitationStatus.ACCEPTED)
    audit.record(
        actor, "invitation.accept", invitation, after={**_snapshot(invitation), "joined": created}
    )
    return membership


@transaction.atomic
def decline_invitation(user: User, *, invitation_id: uuid.UUID | str) -> Invitation:
    invitation = _open_invitation(_addressed_to(user), invitation_id)
    _respond(invitation, InvitationStatus.DECLINED)
    actor = Actor(organization=invitation.organization, role=invitation.role, user=user)
    audit.record(actor, "invitation.decline", invitation, after=_snapshot(invitation))
    return invitation


def _addressed_to(user: User) -> QuerySet[Invitation]:
    return Invitation.objects.filter(username=user.get_username())


def _open_invitation(scope: QuerySet[Invitation], invitation_id: uuid.UUID | str) -> Invitation:
    """The pending, unexpired invitation ``invitation_id`` within ``scope``, locked.

    Anything else (another's invitation, a used or expired one) looks missing.
    """
    try:
        invitation = (
            scope.select_for_update(of=("self",))
            .select_related("organization")
            .get(pk=invitation_id)
        )
    except (Invitation.DoesNotExist, ValueError, ValidationError) as exc:
        raise NotFound("invitation not found") from exc
    if not invitation.is_open:
        raise NotFound("invitation not found (it was used, revoked or has expired)")
    return invitation


def _respond(invitation: Invitation, status: str) -> None:
    invitation.status = status
    invitation.responded_at = timezone.now()
    invitation.save(update_fields=["status", "responded_at"])


def _inviter_may_still_grant(invitation: Invitation) -> bool:
    """Whether the invitation's sender (a member or a management key) may still grant its role."""
    try:
        if invitation.invited_by_key is not None:
            if not invitation.invited_by_key.is_active:
                return False
            inviter = actor_for_key(invitation.invited_by_key)
        elif invitation.invited_by is not None:
            inviter = actor_for_user(invitation.invited_by, invitation.organization_id)
        else:
            return False
        require_role(inviter, _grant_role_needed(invitation.role))
    except (NotFound, AccessDenied):
        return False
    return True
