"""Reads of what flowed through an endpoint: each LoRA adapter's traffic over the last hour and
day (``UsageRecord``, as the usage flush left it: up to a minute or so behind the gateway)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q, Sum
from django.utils import timezone

from deployments.traffic.models import UsageRecord

HOUR, DAY = timedelta(hours=1), timedelta(days=1)


@dataclass(frozen=True)
class AdapterTraffic:
    """Requests and tokens (prompt and completion) of one adapter ("" the base model)."""

    adapter: str
    requests_hour: int = 0
    tokens_hour: int = 0
    requests_day: int = 0
    tokens_day: int = 0


def adapter_traffic(
    deployment_id: uuid.UUID, now: datetime | None = None
) -> dict[str, AdapterTraffic]:
    """Each adapter's traffic on the endpoint by adapter name, in one query; an adapter with no
    request in the day is absent."""
    now = now or timezone.now()
    recent = Q(minute__gte=now - HOUR)
    rows = (
        UsageRecord.objects.filter(deployment_id=deployment_id, minute__gte=now - DAY)
        .values("adapter")
        .annotate(
            requests_day=Sum("requests"),
            prompt_day=Sum("prompt_tokens"),
            completion_day=Sum("completion_tokens"),
            requests_hour=Sum("requests", filter=recent),
            prompt_hour=Sum("prompt_tokens", filter=recent),
            completion_hour=Sum("completion_tokens", filter=recent),
        )
    )
    return {
        row["adapter"]: AdapterTraffic(
            adapter=row["adapter"],
            requests_hour=row["requests_hour"] or 0,
            tokens_hour=(row["prompt_hour"] or 0) + (row["completion_hour"] or 0),
            requests_day=row["requests_day"] or 0,
            tokens_day=(row["prompt_day"] or 0) + (row["completion_day"] or 0),
        )
        for row in rows
    }
