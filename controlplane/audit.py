"""The audit log: written by services inside their transaction (never by views), read by
admins of the organization (:func:`events_for`).

Writers never put a secret value in ``before``/``after`` (a secret is recorded as written, not
what it is). The reader masks any value under a secret's field name all the same
(:func:`shown`), so a writer's slip does not reach an answer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import QuerySet

from controlplane.access import Actor, require_role
from controlplane.models import AuditEvent, Role

# Field names whose values are secret wherever they appear in a snapshot (lower case).
SECRET_FIELDS = frozenset(
    {
        "value",
        "token",
        "password",
        "plaintext",
        "key_hash",
        "ciphertext",
        "api_key",
        "secret",
        "kubeconfig",
        "hf_token",
    }
)
WRITE_ONLY = "(write-only)"


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


def events_for(
    actor: Actor,
    *,
    action: str | None = None,
    actor_label: str | None = None,
    since: datetime | None = None,
    target_id: str | None = None,
) -> QuerySet[AuditEvent]:
    """The organization's audit events, newest first, for admins (they show every member's
    changes). ``action`` matches a prefix (``deployment.`` for all of an endpoint's),
    ``actor_label`` a part of who acted (``user:alice``, ``key:plm_ab12``)."""
    require_role(actor, Role.ADMIN)
    rows = AuditEvent.objects.filter(organization=actor.organization)
    if action:
        rows = rows.filter(action__startswith=action)
    if actor_label:
        rows = rows.filter(actor_label__icontains=actor_label)
    if since is not None:
        rows = rows.filter(created_at__gte=since)
    if target_id:
        rows = rows.filter(target_id=target_id)
    return rows.order_by("-created_at", "-id")


def shown(snapshot: Any) -> Any:
    """``snapshot`` as an answer may show it: values under a secret's field name, at any depth,
    are replaced by ``(write-only)``."""
    if isinstance(snapshot, dict):
        return {
            key: WRITE_ONLY if str(key).lower() in SECRET_FIELDS else shown(value)
            for key, value in snapshot.items()
        }
    if isinstance(snapshot, list):
        return [shown(item) for item in snapshot]
    return snapshot
