"""The REST route of replica starts: an endpoint's latest cold starts, phase by phase."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema
from pydantic import Field

from deployments.api.auth import actor_of
from deployments.api.schemas import PageQuery, page_body, page_schema
from deployments.endpoints import queries
from deployments.starts.models import ReplicaStart

router = Router(tags=["observability"])


class PhaseOut(Schema):
    phase: str = Field(
        description="scheduled, image_pulled, weights_downloaded (or found in the node's cache), "
        "weights_loaded, cuda_graphs_captured, warmup, ready"
    )
    seconds: float


class ReplicaStartOut(Schema):
    replica: str
    role: str
    revision: int | None
    created_at: datetime = Field(description="the pod or process was created")
    ready_at: datetime
    total_seconds: float
    phases: list[PhaseOut] = Field(
        description="in order; a phase nothing reported is absent and its time is in the next"
    )

    @staticmethod
    def resolve_phases(start: ReplicaStart) -> list[dict[str, Any]]:
        return [{"phase": phase, "seconds": s} for phase, s in start.ordered_phases()]


ReplicaStartPage = page_schema(ReplicaStartOut, "ReplicaStartPage")


@router.get(
    "/deployments/{deployment_id}/starts",
    response=ReplicaStartPage,
    summary="Replica starts",
    description="Each engine replica's cold start, phase by phase, the most recent first.",
)
def list_starts(request: HttpRequest, deployment_id: str, query: Query[PageQuery]) -> Any:
    deployment = queries.get_deployment(actor_of(request), deployment_id)
    rows = ReplicaStart.objects.filter(deployment=deployment).order_by("-ready_at")
    items = list(rows[query.offset : query.offset + query.limit])
    return page_body(request, items, rows.count(), query)
