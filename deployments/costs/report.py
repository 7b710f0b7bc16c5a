"""The cost report: GPU-hours per endpoint and revision from the replica timeline, priced by
the operator's list, and attributed to inference keys by their share of tokens.

Prices: ``PLINTH_GPU_PRICES`` (GPU id -> USD per GPU-hour; a GPU it leaves out costs the
catalogue's figure), times the cluster's ``gpu_price_factor`` (its price relative to the
list), both as they are when the report is read. Attribution: each endpoint's cost in each UTC
hour is split among the keys (or the LoRA adapters it serves, the base model's own traffic a row
of its own) by their share of that hour's tokens (prompt and completion) on that endpoint; an
hour of GPUs no token used is "idle/unattributed". So the rows add up to the
month's GPU-hours and cost, whichever way they are cut. Quantization runs are lines of their
own (``quantization <name>``): their GPUs times the time they ran, at the same prices.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q, Sum
from django.db.models.functions import TruncHour
from django.utils import timezone

from controlplane.models import Organization
from controlplane.services import ServiceError
from deployments.cluster_settings import SettingsInvalid, parse_settings
from deployments.clusters.models import Cluster, ClusterKind
from deployments.costs.models import ReplicaSpan
from deployments.endpoints.models import Deployment
from deployments.quantization.models import QuantizationRun
from deployments.traffic.models import UsageRecord
from runtime.catalog.gpus import get_gpu

BY = ("endpoint", "key", "adapter")
BASE = "(base model)"
IDLE = "idle/unattributed"
MONTH = re.compile(r"(\d{4})-(0[1-9]|1[0-2])")
HOUR = timedelta(hours=1)


@dataclass
class Row:
    """One line of the report: an endpoint's revision, a key (None: idle/unattributed), or an
    endpoint's adapter ("" with an endpoint: its base model's own traffic)."""

    label: str
    endpoint: str = ""
    revision: int | None = None
    adapter: str = ""
    api_key_id: uuid.UUID | None = None
    api_key_prefix: str = ""
    tokens: int = 0
    gpu_hours: float = 0.0
    cost: float = 0.0


@dataclass
class Report:
    month: str
    by: str
    start: datetime
    end: datetime
    rows: list[Row] = field(default_factory=list)

    @property
    def gpu_hours(self) -> float:
        return sum(r.gpu_hours for r in self.rows)

    @property
    def cost(self) -> float:
        return sum(r.cost for r in self.rows)


def month_range(month: str) -> tuple[datetime, datetime]:
    """``[start, end)`` of ``YYYY-MM`` in UTC; a ServiceError naming ``month`` otherwise."""
    found = MONTH.fullmatch(month or "")
    if found is None:
        raise ServiceError("month must be YYYY-MM, e.g. 2026-11", field="month")
    year, number = int(found[1]), int(found[2])
    start = datetime(year, number, 1, tzinfo=UTC)
    end = datetime(year + number // 12, number % 12 + 1, 1, tzinfo=UTC)
    return start, end


def gpu_prices() -> dict[str, float]:
    """The operator's list, GPU id -> USD per GPU-hour (``PLINTH_GPU_PRICES``)."""
    prices: dict[str, float] = {}
    for name, price in settings.PLINTH_GPU_PRICES.items():
        try:
            prices[get_gpu(name).id] = float(price)
        except KeyError:
            continue  # a GPU the catalogue does not know: no replica can run on it
    return prices


def price_of(gpu: str, listed: dict[str, float]) -> float:
    if gpu in listed:
        return listed[gpu]
    try:
        return get_gpu(gpu).price_per_gpu_hour
    except KeyError:
        return 0.0


def _factor(cluster: Cluster | None) -> float:
    if cluster is None or cluster.kind != ClusterKind.KUBERNETES:
        return 1.0
    try:
        return parse_settings(cluster.operator_settings).gpu_price_factor
    except SettingsInvalid:
        return 1.0


def _hours(start: datetime, end: datetime) -> list[tuple[datetime, float]]:
    """(UTC hour, seconds of [start, end) in it)."""
    hour = start.replace(minute=0, second=0, microsecond=0)
    out = []
    while hour < end:
        seconds = (min(end, hour + HOUR) - max(start, hour)).total_seconds()
        if seconds > 0:
            out.append((hour, seconds))
        hour += HOUR
    return out


def _spans(organization: Organization, start: datetime, end: datetime) -> list[ReplicaSpan]:
    return list(
        ReplicaSpan.objects.filter(organization=organization, started_at__lt=end)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gt=start))
        .select_related("cluster")
    )


def _span_end(span: ReplicaSpan, live: set[uuid.UUID], now: datetime) -> datetime:
    if span.ended_at is not None:
        return span.ended_at
    # Open: it runs still, unless its endpoint is gone (deleted before a pass closed it).
    return now if span.deployment_id in live else span.last_seen_at


Cell = tuple[uuid.UUID, int | None, datetime]  # (endpoint, revision, hour)
Used = dict[tuple[uuid.UUID, datetime], dict[uuid.UUID, int]]  # (endpoint, hour) -> key -> tokens


def _gpu_time(
    organization: Organization, start: datetime, end: datetime
) -> tuple[dict[Cell, list[float]], dict[uuid.UUID, str]]:
    """(endpoint, revision, hour) -> [GPU-hours, cost]; and each endpoint's slug."""
    now = timezone.now()
    spans = _spans(organization, start, end)
    live = set(
        Deployment.objects.filter(pk__in={s.deployment_id for s in spans}).values_list(
            "pk", flat=True
        )
    )
    listed = gpu_prices()
    cells: dict[Cell, list[float]] = defaultdict(lambda: [0.0, 0.0])
    slugs: dict[uuid.UUID, str] = {}
    for span in spans:
        slugs[span.deployment_id] = span.deployment_slug
        price = price_of(span.gpu, listed) * _factor(span.cluster)
        until = min(end, _span_end(span, live, now))
        for hour, seconds in _hours(max(start, span.started_at), until):
            gpu_hours = span.gpus * seconds / 3600
            cell = cells[(span.deployment_id, span.revision, hour)]
            cell[0] += gpu_hours
            cell[1] += gpu_hours * price
    return cells, slugs


# Who tokens are attributed to: a key's id, or an (endpoint, adapter) pair.
Payer = Any


def _tokens(
    organization: Organization, start: datetime, end: datetime, by: str
) -> tuple[Used, dict[Payer, Row]]:
    """(endpoint, hour) -> {payer: tokens}; and each payer's empty row (its label)."""
    payer = ("api_key_id", "api_key__name", "api_key__prefix") if by == "key" else ("adapter",)
    rows = (
        UsageRecord.objects.filter(organization=organization, minute__gte=start, minute__lt=end)
        .annotate(hour=TruncHour("minute", tzinfo=UTC))
        .values("deployment_id", "deployment_slug", "hour", *payer)
        .annotate(tokens=Sum("prompt_tokens") + Sum("completion_tokens"))
    )
    used: Used = defaultdict(dict)
    payers: dict[Payer, Row] = {}
    for row in rows:
        who, empty = _payer(row, by)
        used[(row["deployment_id"], row["hour"])][who] = int(row["tokens"] or 0)
        payers.setdefault(who, empty)
    return used, payers


def _payer(row: dict[str, Any], by: str) -> tuple[Payer, Row]:
    if by == "key":
        key = row["api_key_id"]
        prefix = row["api_key__prefix"]
        return key, Row(label=row["api_key__name"], api_key_id=key, api_key_prefix=prefix)
    slug, adapter = row["deployment_slug"], row["adapter"]
    label = f"{slug}:{adapter}" if adapter else f"{slug} {BASE}"
    return (row["deployment_id"], adapter), Row(label=label, endpoint=slug, adapter=adapter)


def cost_report(organization: Organization, by: str, month: str) -> Report:
    """``organization``'s cost in ``month`` (YYYY-MM) by endpoint and revision, by key, or by
    LoRA adapter."""
    if by not in BY:
        raise ServiceError("by must be endpoint, key or adapter", field="by")
    start, end = month_range(month)
    report = Report(month=month, by=by, start=start, end=end)
    cells, slugs = _gpu_time(organization, start, end)
    if by == "endpoint":
        report.rows = _by_endpoint(cells, slugs)
    else:
        report.rows = _by_share(cells, *_tokens(organization, start, end, by))
    report.rows += _quantization_rows(organization, start, end)
    return report


def _quantization_rows(organization: Organization, start: datetime, end: datetime) -> list[Row]:
    """A line per quantization run that held GPUs in ``[start, end)``: its GPUs times its time
    running (to now while it runs), priced as endpoints are. No key used them, so cut by key
    they are lines of their own too, and the report still adds up."""
    now = timezone.now()
    runs = (
        QuantizationRun.objects.filter(organization=organization, started_at__lt=end)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .select_related("cluster")
    )
    listed = gpu_prices()
    rows = []
    for run in runs:
        assert run.started_at is not None  # filtered above
        until = min(end, run.finished_at or now)
        seconds = max(0.0, (until - max(start, run.started_at)).total_seconds())
        gpu_hours = run.gpus * seconds / 3600
        price = price_of(run.gpu, listed) * _factor(run.cluster)
        label = f"quantization {run.name or str(run.pk)[:8]}"
        rows.append(Row(label=label, gpu_hours=gpu_hours, cost=gpu_hours * price))
    return sorted(rows, key=lambda r: (-r.cost, r.label))


def _by_endpoint(cells: dict[Cell, list[float]], slugs: dict[uuid.UUID, str]) -> list[Row]:
    rows: dict[tuple[uuid.UUID, int | None], Row] = {}
    for (endpoint, revision, _hour), (gpu_hours, cost) in cells.items():
        label = f"{slugs[endpoint]} r{revision}" if revision else slugs[endpoint]
        row = rows.setdefault(
            (endpoint, revision),
            Row(label=label, endpoint=slugs[endpoint], revision=revision),
        )
        row.gpu_hours += gpu_hours
        row.cost += cost
    return sorted(rows.values(), key=lambda r: (-r.cost, r.label))


def _by_share(cells: dict[Cell, list[float]], used: Used, payers: dict[Payer, Row]) -> list[Row]:
    """Each endpoint-hour's GPU time split among its payers (keys or adapters) by tokens."""
    idle = Row(label=IDLE)
    rows: dict[Payer, Row] = {}
    for (endpoint, _revision, hour), (gpu_hours, cost) in cells.items():
        tokens = used.get((endpoint, hour), {})
        total = sum(tokens.values())
        if not total:
            idle.gpu_hours += gpu_hours
            idle.cost += cost
            continue
        for payer, count in tokens.items():
            row = rows.setdefault(payer, payers[payer])
            row.gpu_hours += gpu_hours * count / total
            row.cost += cost * count / total
    for tokens in used.values():
        for payer, count in tokens.items():
            if payer in rows:
                rows[payer].tokens += count
    ordered = sorted(rows.values(), key=lambda r: (-r.cost, r.label))
    return [*ordered, idle] if idle.gpu_hours else ordered


def as_dict(row: Row) -> dict[str, Any]:
    return {
        "label": row.label,
        "endpoint": row.endpoint,
        "revision": row.revision,
        "adapter": row.adapter,
        "api_key_id": row.api_key_id,
        "api_key_prefix": row.api_key_prefix,
        "tokens": row.tokens,
        "gpu_hours": round(row.gpu_hours, 6),
        "cost": round(row.cost, 6),
    }
