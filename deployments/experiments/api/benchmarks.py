"""Benchmarks of an endpoint: queue one (NVIDIA AIPerf against its gateway URL), list, read,
compare two. Each result sits next to the optimizer's prediction for the same profile."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import Field, StrictFloat, StrictInt, StrictStr

from deployments.api.auth import actor_of
from deployments.api.schemas import StrictIn
from deployments.experiments.benchmark import services as benchmarks
from deployments.experiments.benchmark.profile import MAX_POINTS, MAX_TOTAL_S
from deployments.experiments.models import Benchmark

router = Router(tags=["benchmarks"])


class ProfileIn(StrictIn):
    input_tokens: StrictInt | None = Field(None, description="prompt tokens (512)")
    output_tokens: StrictInt | None = Field(None, description="answer tokens (128)")
    concurrency: list[StrictInt] | None = Field(
        None, description=f"the concurrency sweep, up to {MAX_POINTS} values ([1, 4])"
    )
    request_rate: StrictFloat | StrictInt | None = Field(
        None, description="one load point at this many requests/s, instead of a sweep"
    )
    duration_s: StrictInt | None = Field(
        None, description=f"seconds per load point (30); all points at most {MAX_TOTAL_S} s"
    )
    shared_prefix: StrictFloat | StrictInt | None = Field(
        None, description="share of each prompt shared by every request, 0-0.95 (0)"
    )
    turns: StrictInt | None = Field(None, description="turns per conversation (1)")


class BenchmarkIn(StrictIn):
    profile: ProfileIn | None = Field(None, description="defaults for every field left out")
    name: StrictStr = ""
    revision: StrictInt | None = Field(
        None,
        description="the serving revision (default) or a running canary's; every request is "
        "pinned to it at the gateway (X-Plinth-Revision)",
    )


class LatencyOut(Schema):
    p50: float
    p90: float
    p99: float


class PointOut(Schema):
    kind: str = Field(description="concurrency or request_rate")
    value: float
    requests: int = Field(description="answers measured (empty answers and errors apart)")
    errors: int = Field(description="requests that failed; empty answers are not among them")
    duration_s: float
    output_tokens_per_s: float
    requests_per_s: float
    input_tokens_mean: float
    output_tokens_requested: int | None = Field(
        None,
        description="the answer length every request asked for (max_completion_tokens, "
        "pinned with ignore_eos and min_tokens); null for a point stored before it was kept",
    )
    output_tokens_mean: float
    output_tokens_min: float | None = Field(None, description="the shortest answer measured")
    off_length_answers: int | None = Field(
        None, description="answers whose length was not the one asked for"
    )
    empty_answers: int = Field(
        0,
        description="answers with no text (the engine ended them before any token); AIPerf "
        "counts them as errors, Plinth apart from errors",
    )
    latency_ms: dict[str, LatencyOut] = Field(description="ttft, itl and e2e")
    error_summary: list[str]
    notes: list[str] = Field(
        default_factory=list, description="what to know about the answers, in words"
    )


class PredictionOut(Schema):
    kind: str
    value: float
    ttft_p90_ms: float | None
    itl_p90_ms: float | None
    e2e_p90_ms: float | None
    requests_per_s: float
    output_tokens_per_s: float


class ProfileOut(Schema):
    input_tokens: int
    output_tokens: int
    concurrency: list[int]
    request_rate: float | None
    duration_s: int
    shared_prefix: float
    turns: int


class BenchmarkOut(Schema):
    id: str
    name: str
    revision: int
    status: str = Field(description="queued, running, succeeded or failed")
    profile: ProfileOut
    results: list[PointOut]
    prediction: list[PredictionOut] = Field(
        description="the optimizer's model for the same profile on this revision's spec"
    )
    served_revisions: list[int]
    runner: str
    tool: str
    error: str
    created_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class DeltaOut(Schema):
    a: float
    b: float
    delta: float
    pct: float | None


class ComparedPointOut(Schema):
    kind: str
    value: float
    metrics: dict[str, DeltaOut]


class CompareOut(Schema):
    a: BenchmarkOut
    b: BenchmarkOut
    points: list[ComparedPointOut] = Field(description="per load point both ran: b - a")


class CompareQuery(Schema):
    a: str
    b: str


def benchmark_out(benchmark: Benchmark) -> dict[str, Any]:
    return {
        "id": str(benchmark.pk),
        "name": benchmark.name,
        "revision": benchmark.revision.number,
        "status": benchmark.status,
        "profile": benchmark.profile,
        "results": benchmark.results,
        "prediction": benchmark.prediction,
        "served_revisions": benchmark.served_revisions,
        "runner": benchmark.runner,
        "tool": f"aiperf {benchmark.tool_version}" if benchmark.tool_version else "",
        "error": benchmark.error,
        "created_by": benchmark.created_by,
        "created_at": benchmark.created_at,
        "started_at": benchmark.started_at,
        "finished_at": benchmark.finished_at,
    }


@router.post(
    "/deployments/{deployment_id}/benchmarks",
    response={201: BenchmarkOut},
    summary="Run a benchmark",
)
def create_benchmark(
    request: HttpRequest, deployment_id: str, payload: BenchmarkIn
) -> Status[dict[str, Any]]:
    """Queue a benchmark: AIPerf sends the profile's traffic to the endpoint's gateway URL with
    a temporary key limited to it, one load point after another. One at a time per endpoint."""
    benchmark = benchmarks.create_benchmark(
        actor_of(request),
        deployment_id,
        profile=payload.profile.model_dump(exclude_none=True) if payload.profile else {},
        name=payload.name,
        revision=payload.revision,
    )
    return Status(201, benchmark_out(benchmark))


@router.get(
    "/deployments/{deployment_id}/benchmarks",
    response=list[BenchmarkOut],
    summary="List benchmarks",
)
def list_benchmarks(request: HttpRequest, deployment_id: str) -> list[dict[str, Any]]:
    """The endpoint's benchmarks, newest first (the latest 100)."""
    rows = benchmarks.list_benchmarks(actor_of(request), deployment_id)[:100]
    return [benchmark_out(b) for b in rows]


@router.get(
    "/deployments/{deployment_id}/benchmarks/compare",
    response=CompareOut,
    summary="Compare two benchmarks",
)
def compare_benchmarks(
    request: HttpRequest, deployment_id: str, query: Query[CompareQuery]
) -> dict[str, Any]:
    """Benchmarks ``a`` and ``b`` side by side, with each figure's change per load point."""
    out = benchmarks.compare_benchmarks(actor_of(request), deployment_id, query.a, query.b)
    return {"a": benchmark_out(out["a"]), "b": benchmark_out(out["b"]), "points": out["points"]}


@router.get(
    "/deployments/{deployment_id}/benchmarks/{benchmark_id}",
    response=BenchmarkOut,
    summary="Get a benchmark",
)
def get_benchmark(request: HttpRequest, deployment_id: str, benchmark_id: str) -> dict[str, Any]:
    return benchmark_out(benchmarks.get_benchmark(actor_of(request), deployment_id, benchmark_id))
