"""What happened to an endpoint: its events, metric samples over a time range, its performance
model against what it measured (``deployments.autoscaling.queries.model_accuracy``), and its
replicas' logs. Its usage by key is ``deployments.traffic.api``'s."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from ninja import Query, Router, Schema
from pydantic import Field

from controlplane.access import require_role
from controlplane.error_pages import error_response
from controlplane.models import Role
from controlplane.services import ServiceError
from deployments.api.auth import actor_of
from deployments.api.schemas import (
    ErrorOut,
    PageQuery,
    RangeQuery,
    page_body,
    page_schema,
    time_range,
)
from deployments.autoscaling.queries import model_accuracy
from deployments.endpoints import logs, queries
from deployments.endpoints.models import DeploymentEvent, EventLevel
from deployments.traffic.models import MetricSample

router = Router(tags=["observability"])

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
    revisions: dict[str, dict[str, float | None]] = Field(
        default_factory=dict,
        description="by revision number, while two serve (a canary beside its baseline, a "
        "rollout): requests, requests_per_s, tokens_per_s, ttft_p50, ttft_p90, itl_p50, itl_p90",
    )


class MetricsOut(Schema):
    start: datetime
    end: datetime
    truncated: bool = Field(description="more samples than returned: narrow the range")
    samples: list[MetricOut]


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
    start, end = time_range(query)
    rows = MetricSample.objects.filter(deployment=deployment, ts__gte=start, ts__lt=end)
    latest = list(rows.order_by("-ts")[: MAX_SAMPLES + 1])
    truncated = len(latest) > MAX_SAMPLES
    return {
        "start": start,
        "end": end,
        "truncated": truncated,
        "samples": latest[:MAX_SAMPLES][::-1],
    }


class AccuracyOut(Schema):
    metric: Literal["ttft", "itl", "throughput"] = Field(
        description="ttft and itl: p90 in seconds from the probe's samples; throughput: output "
        "tokens/s at the highest load point of the revision's latest finished benchmark"
    )
    predicted: float = Field(description="the model's figure at the measured load")
    measured: float = Field(description="the mean of what was measured (p90s for latencies)")
    correction: float = Field(
        description="measured / predicted in force: the SLO autoscaler's for a latency its "
        "policy targets, else fitted from the samples; the optimizer scales this endpoint's "
        "predicted latencies by it (1: uncorrected)"
    )
    fitted: float = Field(description="what the window's samples fit on their own")
    band: list[float] = Field(
        description="the error band: 10th and 90th percentile of the per-sample (or per load "
        "point) measured / predicted"
    )
    samples: int = Field(description="samples (load points for throughput) compared")
    source: Literal["autoscaler", "samples", "benchmark"]
    summary: str = Field(description='e.g. "predicted 31 ms, measured 34 ms, model corrected +9%"')


class ModelAccuracyOut(Schema):
    revision: int | None = Field(description="the serving revision; null while none serves")
    at: datetime
    window_s: int = Field(description="the look-back: the autoscaling window + scale-down delay")
    modelled: bool = Field(description="false: the model cannot price the revision's settings")
    rate_rps_per_replica: float | None = Field(
        description="the mean measured load of the latency samples compared"
    )
    correction: dict[str, float] = Field(
        description="the latency corrections in force by metric (ttft, itl), where not 1"
    )
    figures: list[AccuracyOut]


class AccuracyQuery(Schema):
    revision: int | None = Field(
        None, ge=1, description="a revision that served in the window; default: the serving one"
    )


@router.get(
    "/deployments/{deployment_id}/model-accuracy",
    response=ModelAccuracyOut,
    summary="Performance model against measured",
)
def deployment_model_accuracy(
    request: HttpRequest, deployment_id: str, query: Query[AccuracyQuery]
) -> dict[str, Any]:
    """The serving revision's (or ``revision``'s, e.g. a canary's) predicted against measured
    TTFT/ITL p90 (and throughput from its latest benchmark) over the recent window, with the
    correction in force and its error band."""
    deployment = queries.get_deployment(actor_of(request), deployment_id)
    revision = None
    if query.revision is not None:
        revision = deployment.revisions.filter(number=query.revision).first()
        if revision is None:
            raise ServiceError(f"no revision {query.revision}", field="revision")
    now = timezone.now()
    accuracy = model_accuracy(deployment, now, revision)
    if accuracy is None:
        return {"revision": None, "at": now, "window_s": 0, "modelled": False,
                "rate_rps_per_replica": None, "correction": {}, "figures": []}  # fmt: skip
    return accuracy.as_dict()


# --- logs ---------------------------------------------------------------------------------------

# Seconds a client should wait before asking again when the cluster did not answer.
LOGS_RETRY_AFTER_S = 10


class LogsQuery(Schema):
    replica: str | None = Field(
        None, max_length=253, description="a name from replicas; default: the first (of role)"
    )
    role: Literal["engine", "prefill", "decode", "router"] | None = Field(
        None, description="pick the first replica of this role (or check the named one's)"
    )
    tail: int = Field(200, ge=1, le=logs.MAX_LINES, description="at most this many lines")
    since: str | None = Field(
        None,
        max_length=64,
        description="lines written since: an RFC 3339 time with its zone, or seconds before now",
    )
    previous: bool = Field(
        False,
        description="the previous run of a restarted container (Kubernetes, e.g. in "
        "CrashLoopBackOff); the local cluster keeps every run in one log",
    )
    after: str | None = Field(
        None,
        max_length=64,
        description="a cursor from an earlier answer: the lines written after it, oldest first "
        "(follow by passing each answer's cursor back)",
    )
    q: str | None = Field(
        None,
        max_length=logs.MAX_SEARCH,
        description="keep the lines that contain this text (any case), of those read",
    )
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] | None = Field(
        None,
        description="keep the lines at this level or more severe, of those read (a line that "
        "names no level takes the one before it's, else counts as INFO)",
    )


class LogLineOut(Schema):
    ts: datetime | None = Field(description="when it was written, where the log says")
    text: str
    level: str = Field(
        "",
        description="DEBUG, INFO, WARNING or ERROR, as the line (or one before it) says; "
        "empty: none says",
    )


class LogSourceOut(Schema):
    name: str
    role: str
    restarts: int
    has_previous: bool = Field(description="a previous run's log can be read (previous=true)")


class LogsOut(Schema):
    replica: str = Field(description="the replica read; empty when the endpoint has none yet")
    role: str
    previous: bool
    replicas: list[LogSourceOut] = Field(description="every replica that has a log")
    lines: list[LogLineOut] = Field(description="oldest first; API keys are masked")
    cursor: str = Field(description="pass as after= for the lines written next; may be empty")
    continued: bool = Field(
        description="the lines follow the cursor sent; false: it could not be used (a new file "
        "or container) and the lines are a fresh tail"
    )
    more: bool = Field(description="more lines are already written after these: ask again")
    read: int = Field(description="lines read before the search and level filter kept `lines`")


@router.get(
    "/deployments/{deployment_id}/logs",
    response={200: LogsOut, 503: ErrorOut},
    summary="Logs of a replica",
    description="Developers and up: a log can hold what users sent. 503 `logs_unavailable` "
    "when the cluster cannot be asked (with Retry-After when it may answer later).",
)
def deployment_logs(
    request: HttpRequest, deployment_id: str, query: Query[LogsQuery]
) -> logs.Logs | HttpResponse:
    actor = actor_of(request)
    require_role(actor, Role.DEVELOPER)
    deployment = queries.get_deployment(actor, deployment_id)
    since = logs.parse_since(query.since) if query.since else None
    try:
        return logs.read_logs(
            deployment,
            replica=query.replica,
            role=query.role,
            tail=query.tail,
            since=since,
            previous=query.previous,
            after=query.after,
            q=query.q,
            level=query.level,
        )
    except logs.LogsUnavailable as exc:
        response = error_response(503, exc.message, code="logs_unavailable")
        if exc.temporary:
            response["Retry-After"] = str(LOGS_RETRY_AFTER_S)
        return response
