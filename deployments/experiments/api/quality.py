"""Quality gates: start a KL-divergence run of a canary's revision, read a revision's verdict,
list an endpoint's gate runs, an admin's override."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import Field, StrictFloat, StrictInt, StrictStr

from deployments.api.auth import actor_of
from deployments.api.schemas import PageQuery, StrictIn, page_of, page_schema
from deployments.experiments.models import QualityGate
from deployments.experiments.quality import services as quality_services
from runtime.quality import DEFAULT_MAX_MEAN_KL, DEFAULT_MIN_TOP1_AGREEMENT

router = Router(tags=["quality"])
GATE = "/deployments/{deployment_id}/revisions/{number}/gate"


class GateIn(StrictIn):
    max_mean_kl: StrictFloat | StrictInt = Field(
        DEFAULT_MAX_MEAN_KL, description="pass at or below this mean KL(baseline||candidate), nats"
    )
    min_top1_agreement: StrictFloat | StrictInt = Field(
        DEFAULT_MIN_TOP1_AGREEMENT,
        description="pass at or above this share of tokens whose top-1 is the same on both sides",
    )
    prompts_jsonl: StrictStr = Field(
        "",
        description='your prompt set, one {"prompt": ...} object per line (at most '
        f"{quality_services.MAX_PROMPTS}); empty: the built-in set",
    )
    max_new_tokens: StrictInt = Field(64, description="tokens of each baseline answer scored")


class OverrideIn(StrictIn):
    reason: StrictStr = Field(description="why the revision may serve anyway (audited)")


class GateOut(Schema):
    id: str
    revision: int
    baseline_revision: int
    status: str = Field(description="pending, running, passed, failed, error or overridden")
    max_mean_kl: float
    min_top1_agreement: float
    max_new_tokens: int
    prompt_set: str = Field(description="builtin or custom")
    prompts: int = Field(
        description="prompts the gate scores (the built-in set's or yours); once it ran, the "
        "prompts its results cover (results.prompts, one per_prompt entry each)"
    )
    results: dict[str, Any] | None = Field(
        description="mean_kl, p99_kl, top1_agreement, prompt_mean_kl_p99, worst_prompts (with "
        "their text) and per_prompt summaries, once it ran"
    )
    error: str
    override_reason: str
    overridden_by: str
    created_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


def gate_out(gate: QualityGate) -> dict[str, Any]:
    return {
        "id": str(gate.pk),
        "revision": gate.revision.number,
        "baseline_revision": gate.baseline_revision.number,
        "status": gate.status,
        "max_mean_kl": gate.max_mean_kl,
        "min_top1_agreement": gate.min_top1_agreement,
        "max_new_tokens": gate.max_new_tokens,
        "prompt_set": gate.prompt_set,
        "prompts": gate.prompt_count,
        "results": gate.results,
        "error": gate.error,
        "override_reason": gate.override_reason,
        "overridden_by": gate.overridden_by,
        "created_by": gate.created_by,
        "created_at": gate.created_at,
        "started_at": gate.started_at,
        "finished_at": gate.finished_at,
    }


GatePage = page_schema(GateOut, "GatePage")


@router.get("/deployments/{deployment_id}/gates", response=GatePage, summary="List gate runs")
def list_gates(request: HttpRequest, deployment_id: str, page: Query[PageQuery]) -> dict[str, Any]:
    """Every quality gate run of the endpoint, of any revision, newest first."""
    gates = quality_services.gates_of(actor_of(request), deployment_id)
    return page_of(request, gates, page, gate_out)


@router.post(GATE, response={201: GateOut}, summary="Run a quality gate")
def start_gate(
    request: HttpRequest, deployment_id: str, number: int, payload: GateIn
) -> Status[dict[str, Any]]:
    """Score the baseline's answers under the canary's revision ``number`` and its baseline
    (teacher forced, top-k logprobs): its promotion waits for a pass."""
    gate = quality_services.start_gate(
        actor_of(request), deployment_id, number, max_mean_kl=payload.max_mean_kl,
        min_top1_agreement=payload.min_top1_agreement, prompts_jsonl=payload.prompts_jsonl,
        max_new_tokens=payload.max_new_tokens,
    )  # fmt: skip
    return Status(201, gate_out(gate))


@router.get(GATE, response=GateOut, summary="Get a revision's quality gate")
def get_gate(request: HttpRequest, deployment_id: str, number: int) -> dict[str, Any]:
    """The revision's latest gate run; 404 when it has none."""
    return gate_out(quality_services.get_gate(actor_of(request), deployment_id, number))


@router.post(GATE + "/override", response=GateOut, summary="Override a failed quality gate")
def override_gate(
    request: HttpRequest, deployment_id: str, number: int, payload: OverrideIn
) -> dict[str, Any]:
    """Admins: let a revision whose gate failed be promoted or made the target, with a reason."""
    gate = quality_services.override_gate(
        actor_of(request), deployment_id, number, reason=payload.reason
    )
    return gate_out(gate)
