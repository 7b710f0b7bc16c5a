"""The usage REST routes: an organization's usage per endpoint and key over a time range, of one
endpoint or of all; a benchmark's temporary key is labelled as such."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db.models import F, Max, Sum
from django.http import HttpRequest
from ninja import Query, Router, Schema
from pydantic import Field

from controlplane.access import Actor
from deployments.api.auth import actor_of
from deployments.api.schemas import RangeQuery, time_range
from deployments.endpoints import queries
from deployments.experiments.models import Benchmark
from deployments.traffic.models import UsageRecord

router = Router(tags=["observability"])
# The operation ids these routes had in endpoints.api.observe (ninja derives an id from the
# module): kept, so a client generated from the document before they moved here still matches.
_OPERATION_IDS = {
    "deployment_usage": "deployments_endpoints_api_observe_deployment_usage",
    "usage": "deployments_endpoints_api_observe_usage",
}


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
    purpose: str = Field(
        description="inference, or benchmark: the traffic of a benchmark's temporary key"
    )


class UsageOut(Schema):
    start: datetime
    end: datetime
    rows: list[UsageRowOut] = Field(description="totals per endpoint and key over the range")


def _usage(actor: Actor, query: RangeQuery, deployment_id: uuid.UUID | None) -> dict[str, Any]:
    start, end = time_range(query)
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
    rows_out: list[dict[str, Any]] = [dict(row) for row in totals]
    benchmark_keys = set(
        Benchmark.objects.filter(api_key_id__in={r["api_key_id"] for r in rows_out}).values_list(
            "api_key_id", flat=True
        )
    )
    for row in rows_out:
        row["purpose"] = "benchmark" if row["api_key_id"] in benchmark_keys else "inference"
    return {"start": start, "end": end, "rows": rows_out}


@router.get(
    "/deployments/{deployment_id}/usage",
    response=UsageOut,
    summary="Usage by key",
    operation_id=_OPERATION_IDS["deployment_usage"],
)
def deployment_usage(
    request: HttpRequest, deployment_id: str, query: Query[RangeQuery]
) -> dict[str, Any]:
    actor = actor_of(request)
    deployment = queries.get_deployment(actor, deployment_id)
    return _usage(actor, query, deployment.pk)


@router.get(
    "/usage",
    response=UsageOut,
    summary="Usage of every endpoint by key",
    operation_id=_OPERATION_IDS["usage"],
)
def usage(request: HttpRequest, query: Query[RangeQuery]) -> dict[str, Any]:
    return _usage(actor_of(request), query, None)
