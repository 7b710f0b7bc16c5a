"""API keys: list, create (the plaintext is in the creation response only), change an inference
key's per-minute limits and its priority class and weight under overload, revoke."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Schema, Status
from pydantic import Field, StrictInt, StrictStr

from controlplane import services
from controlplane.models import MAX_KEY_WEIGHT, ApiKey
from controlplane.services import ServiceError
from deployments.api import idempotency
from deployments.api.auth import actor_of
from deployments.api.schemas import PageQuery, StrictIn, UtcDatetime, page_of, page_schema

router = Router(tags=["api-keys"])


Priority = Literal["critical", "standard", "batch"]
PRIORITY_HELP = (
    "inference keys, when the endpoint is overloaded: critical is admitted before standard, "
    "standard before batch, and batch is refused (429) first"
)
WEIGHT_HELP = "inference keys: share of admissions against busy keys of the same priority"
ADAPTERS_HELP = (
    "inference keys: the LoRA adapters it may call (by name, on its endpoints); empty: the base "
    "model and every adapter, else only these and not the base model"
)


class ApiKeyOut(Schema):
    id: uuid.UUID
    name: str
    kind: str = Field(description="management (this API) or inference (endpoints)")
    role: str
    prefix: str = Field(description="the public start of the key, to recognise it")
    allowed_deployment_ids: list[uuid.UUID]
    allowed_adapters: list[str] = Field(description=ADAPTERS_HELP)
    requests_per_minute: int | None
    tokens_per_minute: int | None
    priority: str = Field(description="class under overload: critical, standard or batch")
    weight: int = Field(description="share of admissions against keys of the same class")
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    active: bool


class ApiKeyCreatedOut(ApiKeyOut):
    key: str = Field(description="the whole key: shown this once, never again")


class ApiKeyIn(StrictIn):
    name: StrictStr = Field(min_length=1, max_length=100)
    kind: StrictStr = Field(description="management or inference")
    role: StrictStr = Field("developer", description="management keys: admin/developer/viewer")
    allowed_deployment_ids: list[uuid.UUID] = Field([], max_length=1000)
    allowed_adapters: list[StrictStr] = Field([], max_length=1000, description=ADAPTERS_HELP)
    expires_at: UtcDatetime | None = None
    requests_per_minute: StrictInt | None = Field(None, ge=1, le=1_000_000_000)
    tokens_per_minute: StrictInt | None = Field(None, ge=1, le=1_000_000_000)
    priority: Priority = Field("standard", description=PRIORITY_HELP)
    weight: StrictInt = Field(1, ge=1, le=MAX_KEY_WEIGHT, description=WEIGHT_HELP)


class ApiKeyLimitsIn(StrictIn):
    requests_per_minute: StrictInt | None = Field(
        None, ge=1, le=1_000_000_000, description="null lifts the limit; left out: unchanged"
    )
    tokens_per_minute: StrictInt | None = Field(
        None, ge=1, le=1_000_000_000, description="null lifts the limit; left out: unchanged"
    )
    priority: Priority | None = Field(None, description=PRIORITY_HELP + "; left out: unchanged")
    weight: StrictInt | None = Field(
        None, ge=1, le=MAX_KEY_WEIGHT, description=WEIGHT_HELP + "; left out: unchanged"
    )


def key_out(key: ApiKey) -> dict[str, Any]:
    fields = ApiKeyOut.model_fields.keys() - {"active"}
    return {**{name: getattr(key, name) for name in fields}, "active": key.is_active}


ApiKeyPage = page_schema(ApiKeyOut, "ApiKeyPage")


@router.get("/api-keys", response=ApiKeyPage, summary="List keys")
def list_keys(request: HttpRequest, page: Query[PageQuery]) -> dict[str, Any]:
    rows = ApiKey.objects.filter(organization=actor_of(request).organization, is_temporary=False)
    return page_of(request, rows.order_by("-created_at", "id"), page, key_out)


@router.post("/api-keys", response={201: ApiKeyCreatedOut}, summary="Create a key")
def create_key(
    request: HttpRequest, response: HttpResponse, payload: ApiKeyIn
) -> Status[dict[str, Any]]:
    """Developers create inference keys; admins create management keys (up to their role).
    The key's value is in this response only; an Idempotency-Key replay answers 409."""
    created = services.create_api_key(actor_of(request), **payload.model_dump())
    idempotency.mark_secret(response, f"API key {created.api_key.pk}")
    return Status(201, {**key_out(created.api_key), "key": created.plaintext})


@router.patch("/api-keys/{key_id}", response=ApiKeyOut, summary="Change a key's limits")
def update_key(request: HttpRequest, key_id: uuid.UUID, payload: ApiKeyLimitsIn) -> dict[str, Any]:
    """Set or lift an active inference key's requests and tokens per minute, and set its
    priority and weight (what the console's "Change" does); a field left out stays as it is,
    ``null`` lifts a per-minute limit."""
    given = payload.model_dump(exclude_unset=True)
    if not given:
        raise ServiceError(
            "nothing to change: give requests_per_minute, tokens_per_minute, priority or weight",
            field="requests_per_minute",
        )
    for name in ("priority", "weight"):
        if name in given and given[name] is None:
            raise ServiceError(f"{name} cannot be null; leave it out to keep it", field=name)
    return key_out(services.set_api_key_limits(actor_of(request), key_id=key_id, **given))


@router.delete("/api-keys/{key_id}", response=ApiKeyOut, summary="Revoke a key")
def revoke_key(request: HttpRequest, key_id: uuid.UUID) -> dict[str, Any]:
    return key_out(services.revoke_api_key(actor_of(request), key_id=key_id))
