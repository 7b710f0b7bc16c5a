"""Members of the organization and their roles (admins manage; owners make owners), and the
invitations through which people join.

``POST /members`` invites: it answers 202 with a pending invitation, the same answer whether or
not the username exists, and nobody joins until the person signed in under that name accepts
(``/me/invitations``, their own console session; an organization's key cannot accept for them).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import P, PathEx, Query, Router, Schema, Status
from pydantic import Field, StrictStr

from controlplane import invitations, services
from controlplane.models import Invitation, Membership
from deployments.api.auth import SignedInUser, actor_of, user_of
from deployments.api.schemas import PageQuery, StrictIn, page_of, page_schema

router = Router(tags=["members"])
MemberId = PathEx[int, P(ge=1, le=2**62)]


class MemberOut(Schema):
    id: int
    username: str
    role: str
    created_at: datetime


class MemberIn(StrictIn):
    username: StrictStr = Field(min_length=1, max_length=150)
    role: StrictStr = Field(description="owner, admin, developer or viewer")


class RoleIn(StrictIn):
    role: StrictStr


class InvitationOut(Schema):
    id: uuid.UUID
    organization_id: uuid.UUID
    organization: str = Field(description="the inviting organization's name")
    username: str = Field(description="who may accept: the person signed in under this name")
    role: str
    status: str = Field(description="pending, accepted, declined, revoked or expired")
    created_at: datetime
    expires_at: datetime


def member_out(membership: Membership) -> dict[str, Any]:
    return {
        "id": membership.pk,
        "username": membership.user.get_username(),
        "role": membership.role,
        "created_at": membership.created_at,
    }


def invitation_out(invitation: Invitation) -> dict[str, Any]:
    return {
        "id": invitation.pk,
        "organization_id": invitation.organization_id,
        "organization": invitation.organization.name,
        "username": invitation.username,
        "role": invitation.role,
        "status": invitation.status,
        "created_at": invitation.created_at,
        "expires_at": invitation.expires_at,
    }


@router.get("/members", response=page_schema(MemberOut, "MemberPage"), summary="List members")
def list_members(request: HttpRequest, page: Query[PageQuery]) -> dict[str, Any]:
    organization = actor_of(request).organization
    rows = Membership.objects.filter(organization=organization).select_related("user")
    return page_of(request, rows.order_by("user__username", "id"), page, member_out)


@router.post(
    "/members",
    response={202: InvitationOut},
    summary="Invite a member",
    description="Creates a pending invitation; the person joins when they accept it. The answer "
    "is the same whether or not the username exists.",
)
def invite_member(request: HttpRequest, payload: MemberIn) -> Status[dict[str, Any]]:
    invitation = invitations.invite(actor_of(request), username=payload.username, role=payload.role)
    return Status(202, invitation_out(invitation))


@router.patch("/members/{member_id}", response=MemberOut, summary="Change a member's role")
def change_role(request: HttpRequest, payload: RoleIn, member_id: MemberId) -> dict[str, Any]:
    membership = services.change_member_role(
        actor_of(request), membership_id=member_id, role=payload.role
    )
    return member_out(membership)


@router.delete("/members/{member_id}", response={204: None}, summary="Remove a member")
def remove_member(request: HttpRequest, member_id: MemberId) -> Status[None]:
    services.remove_member(actor_of(request), membership_id=member_id)
    return Status(204, None)


# --- the organization's invitations (admins) ----------------------------------------------------


InvitationPage = page_schema(InvitationOut, "InvitationPage")


@router.get("/invitations", response=InvitationPage, summary="List pending invitations")
def list_invitations(request: HttpRequest, page: Query[PageQuery]) -> dict[str, Any]:
    rows = invitations.pending_for_organization(actor_of(request))
    return page_of(request, rows.order_by("-created_at", "id"), page, invitation_out)


@router.delete("/invitations/{invitation_id}", response={204: None}, summary="Revoke an invitation")
def revoke_invitation(request: HttpRequest, invitation_id: uuid.UUID) -> Status[None]:
    invitations.revoke_invitation(actor_of(request), invitation_id=invitation_id)
    return Status(204, None)


# --- the signed-in person's own invitations (their session only) --------------------------------


@router.get(
    "/me/invitations",
    response=InvitationPage,
    auth=SignedInUser(),
    summary="List invitations addressed to me",
)
def my_invitations(request: HttpRequest, page: Query[PageQuery]) -> dict[str, Any]:
    rows = invitations.pending_for_user(user_of(request))
    return page_of(request, rows.order_by("-created_at", "id"), page, invitation_out)


@router.post(
    "/me/invitations/{invitation_id}/accept",
    response=MemberOut,
    auth=SignedInUser(),
    summary="Accept an invitation (join the organization)",
)
def accept_invitation(request: HttpRequest, invitation_id: uuid.UUID) -> dict[str, Any]:
    membership = invitations.accept_invitation(user_of(request), invitation_id=invitation_id)
    return member_out(membership)


@router.post(
    "/me/invitations/{invitation_id}/decline",
    response={204: None},
    auth=SignedInUser(),
    summary="Decline an invitation",
)
def decline_invitation(request: HttpRequest, invitation_id: uuid.UUID) -> Status[None]:
    invitations.decline_invitation(user_of(request), invitation_id=invitation_id)
    return Status(204, None)
