"""Writing the audit log. Called by services inside their transaction, never by views."""

from __future__ import annotations

from typing import Any

from django.db import models

from controlplane.access import Actor
from controlplane.models import AuditEvent


def record(
    actor: Actor,
    action: str,
    target: models.Model,
    *,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
) -> AuditEvent:
    """Record one mutation. ``before``/``after`` must never hold secret values."""
    user = actor.user if actor.user is not None and actor.user.is_authenticated else None
    return AuditEvent.objects.create(
        organization=actor.organization,
        actor_user=user,
        actor_key=actor.api_key,
        actor_label=actor.label,
        action=action,
        target_type=target._meta.label_lower,
        target_id=str(target.pk),
        target_repr=str(target)[:200],
        before=before,
        after=after,
    )
