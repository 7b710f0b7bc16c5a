"""Canary releases of an endpoint: start one beside the serving revision, read, promote, abort."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema, Status
from pydantic import Field, StrictBool, StrictFloat, StrictInt, StrictStr

from controlplane.access import NotFound
from deployments.api.auth import actor_of
from deployments.api.schemas import StrictIn
from deployments.endpoints import queries
from deployments.experiments.canary import services as canary_services
from deployments.experiments.canary import watch as canary_watch
from deployments.experiments.canary.rules import MAX_WEIGHT, MIN_WEIGHT, Thresholds
from deployments.experiments.models import Canary, CanaryStatus
from deployments.experiments.queries import latest_canary, reloaded_canary
from runtime.spec import RuntimeSpec

router = Router(tags=["canary"])
_DEFAULTS = Thresholds()


class ThresholdsIn(StrictIn):
    max_error_rate_delta: StrictFloat | StrictInt = Field(
        _DEFAULTS.max_error_rate_delta,
        description="abort when the canary's error rate exceeds the baseline's by more than "
        "this fraction (0.05: five points)",
    )
    max_ttft_p90_ratio: StrictFloat | StrictInt = Field(
        _DEFAULTS.max_ttft_p90_ratio, description="abort above this TTFT p90 canary/baseline"
    )
    max_itl_p90_ratio: StrictFloat | StrictInt = Field(
        _DEFAULTS.max_itl_p90_ratio, description="abort above this ITL p90 canary/baseline"
    )
    window_s: StrictInt = Field(_DEFAULTS.window_s, description="seconds compared, the latest")
    min_requests: StrictInt = Field(
        _DEFAULTS.min_requests, description="requests each side needs in the window to be judged"
    )


class CanaryStartIn(StrictIn):
    spec: RuntimeSpec = Field(description="the canary's settings (a new revision)")
    weight: StrictInt = Field(
        description=f"percent of requests sent to the canary, {MIN_WEIGHT}-{MAX_WEIGHT}"
    )
    sticky: StrictBool = Field(
        False,
        description="send each conversation to one revision (X-Plinth-Session header, else the "
        "OpenAI user field, else the first message)",
    )
    replicas: StrictInt = Field(1, description="the canary pool's engine replicas")
    thresholds: ThresholdsIn | None = Field(None, description="automatic abort (defaults shown)")
    message: StrictStr = Field("", description="why; shown in the revision list")


class PromoteIn(StrictIn):
    message: StrictStr = ""


class AbortIn(StrictIn):
    reason: StrictStr = ""


class ThresholdsOut(Schema):
    max_error_rate_delta: float
    max_ttft_p90_ratio: float
    max_itl_p90_ratio: float
    window_s: int
    min_requests: int


class SideOut(Schema):
    requests: float
    errors: float
    error_rate: float
    ttft_p90: float | None
    itl_p90: float | None
    prompt_tokens: float
    completion_tokens: float


class TrafficOut(Schema):
    canary: SideOut
    baseline: SideOut


class CanaryOut(Schema):
    id: str
    revision: int
    baseline_revision: int
    weight: int
    sticky: bool
    replicas: int
    ready_replicas: int
    status: str = Field(description="running, promoted or aborted")
    reason: str
    thresholds: ThresholdsOut
    gate_verdict: dict[str, Any] | None = Field(description="the quality gate's, when it judged")
    started_by: str
    started_at: datetime
    ended_at: datetime | None
    traffic: TrafficOut | None = Field(
        description="each side over the window, while it runs (gateway counts, probe latency)"
    )


def canary_out(canary: Canary) -> dict[str, Any]:
    running = canary.status == CanaryStatus.RUNNING
    return {
        "id": str(canary.pk),
        "revision": canary.revision.number,
        "baseline_revision": canary.baseline_revision.number,
        "weight": canary.weight,
        "sticky": canary.sticky,
        "replicas": canary.replicas,
        "ready_replicas": canary.ready_replicas if running else 0,
        "status": canary.status,
        "reason": canary.reason,
        "thresholds": canary_watch.thresholds_of(canary).__dict__,
        "gate_verdict": canary.gate_verdict,
        "started_by": canary.started_by,
        "started_at": canary.started_at,
        "ended_at": canary.ended_at,
        "traffic": (canary_watch.traffic(canary) or None) if running else None,
    }


def _reloaded(canary: Canary) -> dict[str, Any]:
    return canary_out(reloaded_canary(canary))


@router.post(
    "/deployments/{deployment_id}/canary",
    response={201: CanaryOut},
    summary="Start a canary",
)
def start_canary(
    request: HttpRequest, deployment_id: str, payload: CanaryStartIn
) -> Status[dict[str, Any]]:
    """A new revision with ``spec`` beside the serving one, on ``weight`` percent of requests.
    It is aborted automatically when it regresses past ``thresholds`` over their window."""
    given = payload.thresholds
    thresholds = (
        Thresholds(
            max_error_rate_delta=float(given.max_error_rate_delta),
            max_ttft_p90_ratio=float(given.max_ttft_p90_ratio),
            max_itl_p90_ratio=float(given.max_itl_p90_ratio),
            window_s=given.window_s,
            min_requests=given.min_requests,
        )
        if given is not None
        else None
    )
    canary = canary_services.start_canary(
        actor_of(request), deployment_id, spec=payload.spec, weight=payload.weight,
        sticky=payload.sticky, replicas=payload.replicas, thresholds=thresholds,
        message=payload.message,
    )  # fmt: skip
    return Status(201, _reloaded(canary))


@router.get("/deployments/{deployment_id}/canary", response=CanaryOut, summary="Get the canary")
def get_canary(request: HttpRequest, deployment_id: str) -> dict[str, Any]:
    """The running canary, else the endpoint's last one; 404 when it never had one."""
    deployment = queries.get_deployment(actor_of(request), deployment_id)
    canary = latest_canary(deployment)
    if canary is None:
        raise NotFound(f"endpoint {deployment.slug} has had no canary")
    return canary_out(canary)


@router.post("/deployments/{deployment_id}/canary/promote", response=CanaryOut, summary="Promote")
def promote_canary(request: HttpRequest, deployment_id: str, payload: PromoteIn) -> dict[str, Any]:
    """The canary's revision becomes the target, rolled out to every replica."""
    canary = canary_services.promote_canary(
        actor_of(request), deployment_id, message=payload.message
    )
    return _reloaded(canary)


@router.post("/deployments/{deployment_id}/canary/abort", response=CanaryOut, summary="Abort")
def abort_canary(request: HttpRequest, deployment_id: str, payload: AbortIn) -> dict[str, Any]:
    """The serving revision takes every request again; the canary's pool is removed."""
    canary = canary_services.abort_canary(actor_of(request), deployment_id, reason=payload.reason)
    return _reloaded(canary)
