"""What happened to an endpoint: its events, metric samples over a time range, and key usage."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F, Max, QuerySet, Sum
from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Router, Schema
from pydantic import Field

from controlplane.access import Actor
from controlplane.services import ServiceError
from deployments import queries
from deployments.api.auth import actor_of
from deployments.api.schemas import PageQuery, UtcDatetime, page_body, page_schema
from deployments.models import DeploymentEvent, EventLevel, MetricSample, UsageRecord

router = Router(tags=["observability"])

MAX_RANGE = timedelta(days=31)
MAX_SAMPLES = 2000


class EventOut(Schema):
    id: int
    created_at: datetime
    level: str
    reason: str
    message: str
    revision_number: int | None
    data: dict[str, Any]


EventPage = page_schema(EventOut, "EventPage")


class EventQuery(PageQuery):
    level: str | None = Field(None, description="info, warning or error")


class RangeQuery(Schema):
    start: UtcDatetime | None = Field(None, description="ISO 8601; default: an hour before end")
    end: UtcDatetime | None = Field(None, description="ISO 8601; default: now")


class MetricOut(Schema):
    ts: datetime
    interval_s: float
    replicas_ready: int
    requests_per_s: float
    tokens_per_s: float
    ttft_p50: float | None
    ttft_p90: float | None
    itl_p50: float | None
    itl_p90: float | None
    running: float
    queued: float
    kv_usage: float | None
    cache_hit_rate: float | None
    spec_accept_length: float | None


class MetricsOut(Schema):
    start: datetime
    end: datetime
    truncated: bool = Field(description="more samples than returned: narrow the range")
    samples: list[MetricOut]


class UsageRowOut(Schema):
    deployment_id: uuid.UUID
    deployment_slug: str
    api_key_id: uuid.UUID
    api_key_name: str
    api_key_prefix: str
    requests: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int


class UsageOut(Schema):
    start: datetime
    end: datetime
    rows: list[UsageRowOut] = Field(description="totals per endpoint and key over the range")


def _range(query: RangeQuery) -> tuple[datetime, datetime]:
    try:
        end = query.end or timezone.now()
        start = query.start or end - timedelta(hours=1)
    except (OverflowError, ValueError) as exc:
        raise ServiceError("start and end must be dates near the present", field="start") from exc
    if start >= end:
        raise ServiceError("start must be before end", field="start")
    if end - start > MAX_RANGE:
        raise ServiceError("the range can span at most 31 days", field="start")
    return start, end


@router.get("/deployments/{deployment_id}/events", response=EventPage, summary="Events")
def list_events(
    request: HttpRequest, deployment_id: str, query: Query[EventQuery]
) -> dict[str, Any]:
    deployment = queries.get_deployment(actor_of(request), deployment_id)
    rows: QuerySet[DeploymentEvent] = deployment.events.all()
    if query.level:
        if query.level not in EventLevel.values:
            raise ServiceError("level must be info, warning or error", field="level")
        rows = rows.filter(level=query.level)
    items = list(rows[query.offset : query.offset + query.limit])
    return page_body(request, items, rows.count(), query)


@router.get("/deployments/{deployment_id}/metrics", response=MetricsOut, summary="Metrics")
def metrics(request: HttpRequest, deployment_id: str, query: Query[RangeQuery]) -> dict[str, Any]:
    """Probe samples in ``[start, end)``, oldest first; at most 2000 (the latest ones)."""
    deployment = queries.get_deployment(actor_of(request), deployment_id)
    start, end = _range(query)
    rows = MetricSample.objects.filter(deployment=deployment, ts__gte=start, ts__lt=end)
    latest = list(rows.order_by("-ts")[: MAX_SAMPLES + 1])
    truncated = len(latest) > MAX_SAMPLES
    return {
        "start": start,
        "end": end,
        "truncated": truncated,
        "samples": latest[:MAX_SAMPLES][::-1],
    }


def _usage(actor: Actor, query: RangeQuery, deployment_id: uuid.UUID | None) -> dict[str, Any]:
    start, end = _range(query)
    rows = UsageRecord.objects.filter(
        organization=actor.organization, minute__gte=start, minute__lt=end
    )
    if deployment_id is not None:
        rows = rows.filter(deployment_id=deployment_id)
    totals = (
        rows.values(
            "deployment_id", "deployment_slug", "api_key_id", api_key_name=F("api_key__name")
        )
        .annotate(
            api_key_prefix=Max("api_key__prefix"),
            requests=Sum("requests"),
            prompt_tokens=Sum("prompt_tokens"),
            cached_tokens=Sum("cached_tokens"),
            completion_tokens=Sum("completion_tokens"),
        )
        .order_by("deployment_slug", "api_key__name")
    )
    return {"start": start, "end": end, "rows": list(totals)}


@router.get("/deployments/{deployment_id}/usage", response=UsageOut, summary="Usage by key")
def deployment_usage(
    request: HttpRequest, deployment_id: str, query: Query[RangeQuery]
) -> dict[str, Any]:
    actor = actor_of(request)
    deployment = queries.get_deployment(actor, deployment_id)
    return _usage(actor, query, deployment.pk)


@router.get("/usage", response=UsageOut, summary="Usage of every endpoint by key")
def usage(request: HttpRequest, query: Query[RangeQuery]) -> dict[str, Any]:
    return _usage(actor_of(request), query, None)
