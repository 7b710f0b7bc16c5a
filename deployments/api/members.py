"""Members of the organization and their roles (admins manage; owners make owners)."""

from __future__ import annotations

from datetime import datetime

from django.http import HttpRequest
from ninja import Path, Router, Schema, Status
from pydantic import Field, StrictStr

from controlplane import services
from controlplane.models import Membership
from deployments.api.schemas import StrictIn

router = Router(tags=["members"])
MemberId = Path(..., ge=1, le=2**62)


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


def member_out(membership: Membership) -> dict:
    return {
        "id": membership.pk,
        "username": membership.user.get_username(),
        "role": membership.role,
        "created_at": membership.created_at,
    }


@router.get("/members", response=list[MemberOut], summary="List members")
def list_members(request: HttpRequest) -> list[dict]:
    rows = Membership.objects.filter(organization=request.auth.organization).select_related("user")
    return [member_out(m) for m in rows.order_by("user__username")]


@router.post("/members", response={201: MemberOut}, summary="Add a member")
def add_member(request: HttpRequest, payload: MemberIn) -> Status[dict]:
    membership = services.add_member(request.auth, username=payload.username, role=payload.role)
    return Status(201, member_out(membership))


@router.patch("/members/{member_id}", response=MemberOut, summary="Change a member's role")
def change_role(request: HttpRequest, payload: RoleIn, member_id: int = MemberId) -> dict:
    membership = services.change_member_role(
        request.auth, membership_id=member_id, role=payload.role
    )
    return member_out(membership)


@router.delete("/members/{member_id}", response={204: None}, summary="Remove a member")
def remove_member(request: HttpRequest, member_id: int = MemberId) -> Status[None]:
    services.remove_member(request.auth, membership_id=member_id)
    return Status(204, None)
