"""Template filters of the audit log page: an event's before/after as field changes."""

from __future__ import annotations

from typing import Any

from django import template

from controlplane.audit import shown
from controlplane.models import AuditEvent

register = template.Library()


@register.filter
def audit_changes(event: AuditEvent) -> list[tuple[str, Any, Any]]:
    """(field, before, after) for each field that differs; creations list every field."""
    # Masked as the API masks them: a secret-looking field never reaches the page, even if a
    # writer once slipped one into a snapshot.
    before = shown(event.before) if isinstance(event.before, dict) else {}
    after = shown(event.after) if isinstance(event.after, dict) else {}
    keys = sorted(before.keys() | after.keys())
    return [(k, before.get(k), after.get(k)) for k in keys if before.get(k) != after.get(k)]
