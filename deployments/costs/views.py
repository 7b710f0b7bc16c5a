"""The costs page: the organization's GPU cost in a month by endpoint and revision, by key or by
LoRA adapter, a bar per row (SVG, no script), and the same report as CSV."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from controlplane.guard import actor_of, console_view
from controlplane.services import ServiceError
from deployments.costs.report import BY, Row, cost_report


def _bars(rows: list[Row]) -> list[dict[str, Any]]:
    """Each row with its bar's length: a percent of the costliest row's cost."""
    top = max((r.cost for r in rows), default=0.0) or 1.0
    return [{"row": r, "pct": round(100 * r.cost / top, 2)} for r in rows]


@console_view
def costs(request: HttpRequest) -> HttpResponse:
    actor = actor_of(request)
    by = request.GET.get("by", "endpoint")
    by = by if by in BY else "endpoint"
    month = request.GET.get("month") or timezone.now().strftime("%Y-%m")
    error = ""
    try:
        report = cost_report(actor.organization, by, month)
    except ServiceError as exc:
        error = exc.message
        month = timezone.now().strftime("%Y-%m")
        report = cost_report(actor.organization, by, month)
    context = {
        "report": report,
        "bars": _bars(report.rows),
        "by": by,
        "choices": BY,
        "month": month,
        "error": error,
    }
    return render(request, "deployments/costs.html", context, status=400 if error else 200)
