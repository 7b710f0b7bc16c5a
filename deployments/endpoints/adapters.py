"""The writers of an endpoint's LoRA adapters: add one, remove one.

An adapter is part of the endpoint's settings (``lora.adapters`` of its RuntimeSpec), so each
change is an edit of the target revision's settings made through
``deployments.endpoints.services.update_settings``: a new revision, validated, audited and
rolled out like any other (one home for revisions). Reconcile applies a change of adapters
alone to the running engines without a restart where SGLang allows it
(``runtime.lora_live.lora_live_change``; ``deployments.endpoints.live``), else by a rollout.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from pydantic import ValidationError

from controlplane.access import Actor, NotFound, require_role
from controlplane.models import Role
from controlplane.services import Conflict, ServiceError
from deployments.endpoints import changes, services
from deployments.endpoints.models import Revision
from runtime.lora import LoraAdapter

__all__ = ["add_adapter", "remove_adapter"]


@transaction.atomic
def add_adapter(
    actor: Actor, deployment_id: uuid.UUID | str, adapter: dict[str, Any], message: str = ""
) -> Revision:
    """A new revision whose settings serve ``adapter`` (name, source, revision, rank, pinned)
    besides the target's; Conflict when one of that name is served already."""
    spec, base = _target_spec(actor, deployment_id)
    adapter = _parsed(adapter)
    lora = dict(spec.get("lora") or {})
    adapters = list(lora.get("adapters") or [])
    name = adapter["name"]
    if any(a.get("name") == name for a in adapters):
        raise Conflict(
            f"the endpoint serves an adapter named {name!r} already; remove it first",
            field="name",
            code="adapter_exists",
        )
    lora["adapters"] = [*adapters, adapter]
    return services.update_settings(
        actor,
        deployment_id,
        spec={**spec, "lora": lora},
        base_revision=base,
        message=message or f"add adapter {name}",
    )


@transaction.atomic
def remove_adapter(
    actor: Actor, deployment_id: uuid.UUID | str, name: str, message: str = ""
) -> Revision:
    """A new revision whose settings no longer serve the adapter ``name``. Removing the last one
    keeps LoRA on where its pool is sized without adapters (max_lora_rank and target_modules
    set: applied live, ready for the next); otherwise LoRA goes with it (a rollout)."""
    spec, base = _target_spec(actor, deployment_id)
    lora = dict(spec.get("lora") or {})
    adapters = list(lora.get("adapters") or [])
    kept = [a for a in adapters if a.get("name") != name]
    if len(kept) == len(adapters):
        raise NotFound(f"the endpoint serves no adapter named {name!r}")
    lora["adapters"] = kept
    if not kept:
        sized = bool(lora.get("max_lora_rank") and lora.get("target_modules"))
        lora["enabled"] = bool(lora.get("enabled")) or sized
    return services.update_settings(
        actor,
        deployment_id,
        spec={**spec, "lora": lora},
        base_revision=base,
        message=message or f"remove adapter {name}",
    )


def _parsed(adapter: dict[str, Any]) -> dict[str, Any]:
    """``adapter`` as the spec stores it; a ServiceError naming its field when it is not one
    (what relates it to the base model is checked with the whole spec)."""
    try:
        return LoraAdapter.model_validate(adapter).model_dump(mode="json")
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "adapter"
        raise ServiceError(f"{field}: {error['msg']}", field=field) from exc


def _target_spec(actor: Actor, deployment_id: uuid.UUID | str) -> tuple[dict[str, Any], int]:
    """The target revision's settings and number, the endpoint row-locked for the edit (so a
    concurrent change waits rather than being refused as a stale base). The role is checked
    first, so a viewer learns nothing of the adapters from a refusal."""
    require_role(actor, Role.DEVELOPER)
    deployment = changes.locked(actor, deployment_id)
    target = deployment.target_revision
    assert target is not None, "every endpoint has a target revision"
    return dict(target.spec), target.number
