"""An endpoint's LoRA adapters: list them with their traffic, add one, remove one.

Each add or remove is an edit of the endpoint's settings (a new revision, ``lora.adapters``),
made through ``deployments.endpoints.adapters``; the whole-spec edit (``PATCH
/deployments/{id}``) can change them too. Reconcile applies it to the running engines without
a restart where SGLang allows it, else rolls it out.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema, Status
from pydantic import Field, StrictBool, StrictInt, StrictStr

from deployments.api.auth import actor_of
from deployments.api.schemas import StrictIn
from deployments.endpoints import adapters, queries

router = Router(tags=["adapters"])


class AdapterIn(StrictIn):
    name: StrictStr = Field(description="what clients call it: model '<name>' or '<served>:<name>'")
    source: StrictStr = Field(description="Hugging Face repo id, or a path in the model cache")
    revision: StrictStr | None = Field(None, description="the source's commit, branch or tag")
    rank: StrictInt = Field(description="the adapter's LoRA rank r (adapter_config.json)")
    pinned: StrictBool = Field(False, description="keep it in a GPU pool slot, never evicted")
    message: StrictStr = Field("", max_length=500, description="the revision's message")


class AdapterOut(Schema):
    name: str
    source: str
    revision: str | None
    rank: int
    pinned: bool
    serving: bool = Field(description="the serving revision has it (requests reach it now)")
    requests_hour: int
    tokens_hour: int = Field(description="prompt and completion tokens in the last hour")
    requests_day: int
    tokens_day: int


class AdapterTrafficOut(Schema):
    requests_hour: int
    tokens_hour: int
    requests_day: int
    tokens_day: int


class AdaptersOut(Schema):
    target_revision: int | None = Field(description="the revision whose adapters are listed")
    serving_revision: int | None
    served_name: str = Field(description="the base model's name in requests")
    adapters: list[AdapterOut]
    base: AdapterTrafficOut = Field(description="the base model's own traffic")


@router.get("/deployments/{deployment_id}/adapters", response=AdaptersOut, summary="List adapters")
def list_adapters(request: HttpRequest, deployment_id: str) -> dict[str, Any]:
    """The adapters of the endpoint's settings, with requests and tokens of the last hour and
    day (usage reaches this within about a minute)."""
    return queries.adapters_of(queries.get_deployment(actor_of(request), deployment_id))


@router.post(
    "/deployments/{deployment_id}/adapters", response={201: AdaptersOut}, summary="Add an adapter"
)
def add_adapter(
    request: HttpRequest, deployment_id: str, payload: AdapterIn
) -> Status[dict[str, Any]]:
    """A new revision serving the adapter too; applied to the running engines without a restart
    where SGLang allows it (LoRA on, target modules and max rank set, the rank within it), else
    rolled out. An adapter that fails to load leaves the revision failed with the engine's
    reason, and the serving revision serving."""
    actor = actor_of(request)
    adapter = payload.model_dump(exclude={"message"}, exclude_none=True)
    adapters.add_adapter(actor, deployment_id, adapter, payload.message)
    return Status(201, queries.adapters_of(queries.get_deployment(actor, deployment_id)))


@router.delete(
    "/deployments/{deployment_id}/adapters/{name}",
    response=AdaptersOut,
    summary="Remove an adapter",
)
def remove_adapter(request: HttpRequest, deployment_id: str, name: str) -> dict[str, Any]:
    """A new revision without the adapter (LoRA stays on, so it is applied live)."""
    actor = actor_of(request)
    adapters.remove_adapter(actor, deployment_id, name)
    return queries.adapters_of(queries.get_deployment(actor, deployment_id))
