"""Quotas: the organization's usage against its quotas (members), and setting any
organization's quotas (instance admins: a staff account's own signed-in session).

Setting takes a person's session, not a management key: a key acts for one organization, and
an organization must not be able to raise its own quota.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema
from pydantic import Field, StrictInt

from controlplane.access import NotFound, require_role
from controlplane.models import Organization, Role
from deployments.api.auth import SignedInUser, actor_of, user_of
from deployments.api.schemas import StrictIn
from deployments.quotas import services as quotas

router = Router(tags=["quotas"])

Limit = StrictInt | None


class QuotaLineOut(Schema):
    quota: str = Field(
        description="gpus, gpus.<GPU type>, endpoints, replicas_per_endpoint or "
        "quantization_gpu_hours"
    )
    limit: int | None = Field(description="null: no limit")
    in_use: int | float = Field(
        description="GPUs and endpoints the organization's endpoints ask for (desired replicas "
        "of running endpoints); for replicas_per_endpoint, its largest endpoint's"
    )


class QuotaUsageOut(Schema):
    organization_id: uuid.UUID
    quotas: list[QuotaLineOut]
    updated_at: datetime | None
    updated_by: str


class QuotaIn(StrictIn):
    gpus: Limit = Field(None, ge=0, le=1_000_000, description="GPUs in total; null: no limit")
    gpus_by_type: dict[str, StrictInt] = Field(
        default_factory=dict, description="GPU type id (GET /gpus) -> GPUs of that type"
    )
    endpoints: Limit = Field(None, ge=0, le=1_000_000)
    replicas_per_endpoint: Limit = Field(None, ge=0, le=1_000_000)
    quantization_gpu_hours: Limit = Field(
        None, ge=0, le=1_000_000, description="GPU-hours of quantization runs per calendar month"
    )


def _usage_out(organization: Organization) -> dict[str, Any]:
    return {"organization_id": organization.pk, **quotas.usage(organization)}


@router.get(
    "/quota", response=QuotaUsageOut, summary="Your organization's usage against its quotas"
)
def get_own_quota(request: HttpRequest) -> dict[str, Any]:
    actor = actor_of(request)
    require_role(actor, Role.VIEWER)
    return _usage_out(actor.organization)


def _organization(request: HttpRequest, organization_id: uuid.UUID) -> Organization:
    quotas.require_instance_admin(user_of(request))  # before looking: 403, not 404, to others
    organization = Organization.objects.filter(pk=organization_id).first()
    if organization is None:
        raise NotFound("organization not found")
    return organization


@router.get(
    "/organizations/{organization_id}/quota",
    response=QuotaUsageOut,
    summary="An organization's usage against its quotas (instance admins)",
    auth=SignedInUser(),
)
def get_quota(request: HttpRequest, organization_id: uuid.UUID) -> dict[str, Any]:
    return _usage_out(_organization(request, organization_id))


@router.put(
    "/organizations/{organization_id}/quota",
    response=QuotaUsageOut,
    summary="Set an organization's quotas (instance admins)",
    description="Replaces every quota: a field left out or null is no limit. Endpoints already "
    "over a lowered quota keep running; new asks past it are refused with 409 quota_exceeded.",
    auth=SignedInUser(),
)
def set_quota(request: HttpRequest, organization_id: uuid.UUID, payload: QuotaIn) -> dict[str, Any]:
    organization = _organization(request, organization_id)
    quotas.set_quota(user_of(request), organization, payload.model_dump())
    return _usage_out(organization)
