"""Secrets (Hugging Face tokens, kubeconfigs): write-only. Values never come back out."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import Field, StrictStr

from controlplane import services
from controlplane.access import require_role
from controlplane.models import Role, Secret
from deployments.api.auth import actor_of
from deployments.api.schemas import PageQuery, StrictIn, page_of, page_schema

router = Router(tags=["secrets"])


class SecretOut(Schema):
    id: uuid.UUID
    name: str
    description: str
    created_at: datetime
    updated_at: datetime


SecretPage = page_schema(SecretOut, "SecretPage")


class SecretIn(StrictIn):
    name: StrictStr = Field(min_length=1, max_length=64, description="lowercase, digits, hyphens")
    value: StrictStr = Field(min_length=1, max_length=256 * 1024, description="write-only")
    description: StrictStr = Field("", max_length=200)


@router.get("/secrets", response=SecretPage, summary="List secrets (names only)")
def list_secrets(request: HttpRequest, page: Query[PageQuery]) -> dict[str, Any]:
    # Developers reference secrets by name in settings (model.hf_token_secret).
    actor = actor_of(request)
    require_role(actor, Role.DEVELOPER)
    rows = Secret.objects.filter(organization=actor.organization).order_by("name", "id")
    return page_of(request, rows, page)


@router.post("/secrets", response={201: SecretOut}, summary="Create or replace a secret")
def set_secret(request: HttpRequest, payload: SecretIn) -> Status[Secret]:
    secret = services.set_secret(
        actor_of(request), name=payload.name, value=payload.value, description=payload.description
    )
    return Status(201, secret)


@router.delete("/secrets/{secret_id}", response={204: None}, summary="Delete a secret")
def delete_secret(request: HttpRequest, secret_id: uuid.UUID) -> Status[None]:
    services.delete_secret(actor_of(request), secret_id=secret_id)
    return Status(204, None)
