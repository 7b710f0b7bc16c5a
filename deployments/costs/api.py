"""The cost REST route: an organization's GPU cost in one month by endpoint and revision, by
inference key or by LoRA adapter, as JSON or CSV (``format=csv`` or ``Accept: text/csv``)."""

from __future__ import annotations

import csv
import io
import uuid
from datetime import datetime
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Query, Router, Schema
from pydantic import Field

from controlplane.services import ServiceError
from deployments.api.auth import actor_of
from deployments.costs.report import Report, as_dict, cost_report

router = Router(tags=["observability"])
CSV_COLUMNS = (
    "label",
    "endpoint",
    "revision",
    "adapter",
    "api_key_id",
    "api_key_prefix",
    "tokens",
    "gpu_hours",
    "cost",
)


class CostQuery(Schema):
    by: str = Field("endpoint", description="endpoint (and revision), key or adapter")
    month: str | None = Field(None, description="YYYY-MM (UTC); default: this month")
    format: str | None = Field(None, description="json (default) or csv")


class CostRowOut(Schema):
    label: str = Field(
        description='"<endpoint> r<revision>", a key\'s name, "<endpoint>:<adapter>", or '
        "idle/unattributed"
    )
    endpoint: str
    revision: int | None
    adapter: str = Field(description='by adapter: the LoRA adapter, "" the base model\'s traffic')
    api_key_id: uuid.UUID | None = Field(description="null: GPU time no key's tokens used")
    api_key_prefix: str
    tokens: int = Field(description="the key's prompt and completion tokens in the month")
    gpu_hours: float
    cost: float = Field(description="USD at the operator's price list")


class CostsOut(Schema):
    month: str
    by: str
    start: datetime
    end: datetime
    currency: str = "USD"
    gpu_hours: float = Field(description="the month's GPU-hours: the rows add up to it")
    cost: float
    rows: list[CostRowOut]


def _wants_csv(request: HttpRequest, query: CostQuery) -> bool:
    if query.format not in (None, "json", "csv"):
        raise ServiceError("format must be json or csv", field="format")
    if query.format is not None:
        return query.format == "csv"
    return "text/csv" in request.headers.get("Accept", "")


def _csv(report: Report) -> HttpResponse:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS)
    writer.writeheader()
    for row in report.rows:
        writer.writerow(as_dict(row))
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    name = f"plinth-costs-{report.month}-by-{report.by}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@router.get(
    "/costs",
    response=CostsOut,
    summary="GPU cost of a month",
    description="GPU-hours per endpoint and revision from the replica timeline, priced by the "
    "operator's per-GPU price list and the cluster's price factor; by key (or adapter), each "
    "endpoint's hour is split by the keys' (adapters', the base model's own traffic a row of its "
    "own) share of its tokens, the rest is idle/unattributed. "
    "format=csv (or Accept: text/csv) answers CSV.",
)
def costs(request: HttpRequest, query: Query[CostQuery]) -> Any:
    actor = actor_of(request)
    month = query.month or timezone.now().strftime("%Y-%m")
    report = cost_report(actor.organization, query.by, month)
    if _wants_csv(request, query):
        return _csv(report)
    return {
        "month": report.month,
        "by": report.by,
        "start": report.start,
        "end": report.end,
        "gpu_hours": round(report.gpu_hours, 6),
        "cost": round(report.cost, 6),
        "rows": [as_dict(row) for row in report.rows],
    }
