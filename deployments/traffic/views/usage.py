"""The usage page: tokens per hour and usage per key and endpoint over a window, beside the
organization's quota; a benchmark's temporary key is labelled as such."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import QuerySet, Sum
from django.db.models.functions import TruncHour
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from controlplane.guard import actor_of, console_view
from deployments.endpoints.charts import Chart, Series
from deployments.experiments.models import Benchmark
from deployments.quotas import services as quotas
from deployments.traffic.models import UsageRecord

WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}


def _usage_chart(records: QuerySet[UsageRecord], since: datetime, until: datetime) -> Chart:
    """Tokens per hour over the whole window: an hour without a record used nothing (zero),
    so the line drops there instead of joining two busy hours across an idle day."""
    hourly = (
        records.annotate(hour=TruncHour("minute", tzinfo=UTC))
        .values("hour")
        .order_by("hour")
        .annotate(prompt=Sum("prompt_tokens"), completion=Sum("completion_tokens"))
    )
    counted = {r["hour"]: (float(r["prompt"]), float(r["completion"])) for r in hourly}
    hours = _hours(since, until)
    return Chart(
        "Tokens per hour",
        "tokens",
        hours,
        [
            Series("prompt", [counted.get(h, (0.0, 0.0))[0] for h in hours]),
            Series("completion", [counted.get(h, (0.0, 0.0))[1] for h in hours]),
        ],
        start=hours[0],
        end=hours[-1],
    )


def _hours(since: datetime, until: datetime) -> list[datetime]:
    """Each whole hour (UTC) from the one holding ``since`` to the one holding ``until``."""
    hour = since.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    hours = []
    while hour <= until:
        hours.append(hour)
        hour += timedelta(hours=1)
    return hours


@console_view
def usage(request: HttpRequest) -> HttpResponse:
    actor = actor_of(request)
    window = request.GET.get("window", "24h")
    window = window if window in WINDOWS else "24h"
    until = timezone.now()
    since = until - WINDOWS[window]
    records = UsageRecord.objects.filter(organization=actor.organization, minute__gte=since)
    table = (
        records.values("api_key__name", "api_key__prefix", "deployment_slug")
        .annotate(
            requests=Sum("requests"),
            prompt=Sum("prompt_tokens"),
            cached=Sum("cached_tokens"),
            completion=Sum("completion_tokens"),
        )
        .order_by("-completion")
    )
    rows: list[dict[str, Any]] = [dict(r) for r in table[:200]]
    # A benchmark's temporary key: its traffic is labelled so it is not taken for a user's.
    benchmark_keys = set(
        Benchmark.objects.filter(
            api_key__prefix__in={r["api_key__prefix"] for r in rows}
        ).values_list("api_key__prefix", flat=True)
    )
    for row in rows:
        row["benchmark"] = row["api_key__prefix"] in benchmark_keys
    context = {
        "rows": rows,
        "chart": _usage_chart(records, since, until),
        "window": window,
        "windows": list(WINDOWS),
        "quota": quotas.usage(actor.organization),
    }
    return render(request, "deployments/usage.html", context)
