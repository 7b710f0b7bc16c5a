"""The organization's audit log (admins): who changed what, with the state before and after.

Secret values are never in it: writers record that a secret was written, not its value, and
``controlplane.audit.shown`` masks any value under a secret's field name on the way out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema
from pydantic import Field

from controlplane import audit
from controlplane.models import AuditEvent
from deployments.api.auth import actor_of
from deployments.api.schemas import PageQuery, UtcDatetime, page_body, page_schema

router = Router(tags=["audit"])


class AuditEventOut(Schema):
    id: int
    created_at: datetime
    actor: str = Field(description="user:<name>, key:<prefix> or system")
    action: str = Field(description="e.g. deployment.update_settings, secret.set, member.add")
    target_type: str = Field(description="the changed object's model, e.g. deployments.deployment")
    target_id: str
    target_repr: str
    before: Any = Field(description="the changed fields before (null on creation)")
    after: Any = Field(description="and after (null on deletion)")


AuditPage = page_schema(AuditEventOut, "AuditPage")


class AuditQuery(PageQuery):
    action: str | None = Field(
        None, max_length=64, description="an action or its prefix, e.g. deployment."
    )
    actor: str | None = Field(
        None, max_length=150, description="part of who acted, e.g. user:alice or key:plm_"
    )
    since: UtcDatetime | None = Field(None, description="ISO 8601: events at or after it")
    target_id: str | None = Field(None, max_length=64, description="one object's id")


def event_out(event: AuditEvent) -> dict[str, Any]:
    return {
        "id": event.pk,
        "created_at": event.created_at,
        "actor": event.actor_label,
        "action": event.action,
        "target_type": event.target_type,
        "target_id": event.target_id,
        "target_repr": event.target_repr,
        "before": audit.shown(event.before),
        "after": audit.shown(event.after),
    }


@router.get(
    "/audit",
    response=AuditPage,
    summary="Audit log",
    description="Admins only. Newest first; filters combine.",
)
def list_audit(request: HttpRequest, query: Query[AuditQuery]) -> dict[str, Any]:
    rows = audit.events_for(
        actor_of(request),
        action=query.action,
        actor_label=query.actor,
        since=query.since,
        target_id=query.target_id,
    )
    items = [event_out(e) for e in rows[query.offset : query.offset + query.limit]]
    return page_body(request, items, rows.count(), query)
