"""Catalogues (GPU types, known models), the dry-run check of settings and the optimizer."""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema
from pydantic import Field, StrictStr

from controlplane.services import ServiceError
from deployments.api.auth import actor_of
from deployments.api.schemas import FieldErrorOut, StrictIn
from deployments.clusters import queries as cluster_queries
from deployments.clusters.checks import cluster_issues
from deployments.clusters.models import ClusterKind
from deployments.endpoints import diff, queries, recommend
from deployments.endpoints.api.revisions import FieldChangeOut
from deployments.endpoints.fields import initial_replicas
from deployments.specs import issue_dict
from runtime.catalog import GpuType, ModelArch, list_gpus, list_models
from runtime.optimize import Limits, Objective, OptimizeRequest, Slo, Traffic
from runtime.spec import Architecture, RuntimeSpec
from runtime.validate import Estimate, check, estimate, has_errors

router = Router(tags=["catalogue"])
logger = logging.getLogger(__name__)


class ValidateIn(StrictIn):
    spec: dict[str, Any] = Field(description="a RuntimeSpec to check (see POST /deployments)")
    cluster_id: StrictStr | None = Field(
        default=None,
        max_length=100,
        description="also check against this cluster: what its operator keeps (errors) and its "
        "observed GPU nodes (warnings)",
    )
    deployment: StrictStr | None = Field(
        default=None,
        max_length=100,
        description="also compare with this endpoint's (id or slug) target revision: `changes` "
        "lists what saving these settings would change, as the revision diff does",
    )


class IssueOut(FieldErrorOut):
    severity: str = Field(description="error (blocks a deploy) or warning")


class ValidateOut(Schema):
    valid: bool
    issues: list[IssueOut]
    estimate: Estimate | None = Field(description="memory fit and cost; null when unparsable")
    target_revision: int | None = Field(
        None, description="with `deployment`: the revision compared with (send it as base_revision)"
    )
    changes: list[FieldChangeOut] | None = Field(
        None,
        description="with `deployment`: every setting that differs from the target revision's "
        "(empty: saving would change nothing); null when unparsable or without `deployment`",
    )


@router.get("/gpus", response=list[GpuType], summary="GPU catalogue")
def gpus(request: HttpRequest) -> list[GpuType]:
    return list_gpus()


@router.get("/models", response=list[ModelArch], summary="Model catalogue")
def models(request: HttpRequest) -> list[ModelArch]:
    return list_models()


@router.post("/validate", response=ValidateOut, summary="Check settings without deploying")
def validate(request: HttpRequest, payload: ValidateIn) -> dict[str, Any]:
    """Every issue (errors and warnings, field by field), the memory fit and the cost."""
    spec, issues = check(payload.spec)
    if spec is not None and payload.cluster_id is not None:
        cluster = cluster_queries.get_cluster(actor_of(request), payload.cluster_id)
        if cluster.kind == ClusterKind.KUBERNETES:
            replicas = initial_replicas(spec)
            issues += cluster_issues(
                cluster.operator_settings, cluster.gpu_inventory, spec, replicas
            )
    body: dict[str, Any] = {
        "valid": spec is not None and not has_errors(issues),
        "issues": [{**issue_dict(i), "severity": i.severity} for i in issues],
        "estimate": _estimate(spec) if spec is not None else None,
    }
    if payload.deployment is not None:
        deployment = queries.get_deployment(actor_of(request), payload.deployment)
        target = deployment.target_revision
        body["target_revision"] = target.number if target else None
        if spec is not None:
            stored = target.spec if target else {}
            body["changes"] = diff.diff_revisions(stored, spec.model_dump(mode="json"))
    return body


def _estimate(spec: RuntimeSpec) -> Estimate | None:
    try:
        return estimate(spec)
    except Exception:
        # The figures are a convenience of the dry run: a gap in the estimator's arithmetic
        # for some exotic spec must not turn the whole check into a 500. Logged for fixing.
        logger.exception("estimate failed for a spec that passed validation")
        return None


# ---- the optimizer: a dry run like /validate; it creates nothing, so any member may run it ----
class TrafficIn(StrictIn):
    input_tokens: int = Field(default=1024, ge=1, le=1_000_000, strict=True)
    output_tokens: int = Field(default=256, ge=1, le=1_000_000, strict=True)
    rate_rps: float | None = Field(default=None, gt=0, le=100_000, description="requests/s")
    concurrency: int | None = Field(default=None, ge=1, le=1_000_000, strict=True)
    prefix_share: float = Field(default=0.0, ge=0, lt=1, description="shared prompt prefix")
    turns: int = Field(default=1, ge=1, le=100, strict=True, description="multi-turn depth")
    working_set_tokens: int = Field(
        default=0,
        ge=0,
        le=1_000_000_000,
        strict=True,
        description="distinct shared contexts the prefix is drawn from, tokens; past the GPU's "
        "KV pool HiCache becomes a candidate (0: one prefix)",
    )


class SloIn(StrictIn):
    ttft_p90_s: float = Field(default=1.0, gt=0, le=600)
    itl_p90_s: float | None = Field(
        default=None,
        gt=0,
        le=60,
        description="the gaps between tokens at p90; default 0.05, or `tpot_mean_s` when only "
        "that is given (give a looser one to hold the mean alone)",
    )
    e2e_p90_s: float | None = Field(default=None, gt=0, le=3600)
    tpot_mean_s: float | None = Field(
        default=None, gt=0, le=60, description="mean time per output token (a Dynamo-style TPOT)"
    )


class LimitsIn(StrictIn):
    max_cost_per_hour: float | None = Field(default=None, gt=0)
    max_gpus: int | None = Field(default=None, ge=1, le=4096, strict=True)


class OptimizeIn(StrictIn):
    model: StrictStr = Field(min_length=1, max_length=200, description="catalogue id or HF repo")
    architecture: Architecture | None = Field(
        default=None, description="a model the catalogue does not know (its config.json numbers)"
    )
    gpus: list[StrictStr] = Field(
        default_factory=list, max_length=16, description="candidate GPU types; empty: all"
    )
    traffic: TrafficIn = TrafficIn()
    slo: SloIn = SloIn()
    limits: LimitsIn = LimitsIn()
    objective: Objective = Field(
        default="cost",
        description="cost: the cheapest carrying the traffic's rate; throughput: the most output "
        "tokens/s per GPU within the SLOs, each layout sized to the GPU budget (max_gpus, the "
        "cluster's free GPUs, or one node)",
    )
    cluster_id: StrictStr | None = Field(
        default=None,
        max_length=100,
        description="search this cluster's observed GPU types (unless `gpus` names some), each "
        "within the GPUs it had free when last observed",
    )
    confirm: bool = Field(
        default=False,
        strict=True,
        description="also run the top `confirm_top` candidates through the simulator for a short "
        "run in simulated time (well under a second each) and report the measured figures "
        "under `measured`",
    )
    confirm_top: int = Field(default=3, ge=1, le=5, strict=True)
    deployment_id: StrictStr | None = Field(
        default=None,
        max_length=100,
        description="recommend for this endpoint (id or slug, serving the same model): the "
        "waterfall starts from its serving revision, priced at this traffic, instead of the "
        "model's simplest deployment; and the correction in force on its performance model, "
        "learned from its own traffic (GET /deployments/{id}/model-accuracy), scales every "
        "candidate's predicted TTFT and ITL, the search aiming at the targets divided by it "
        "(the answer says so under `correction`)",
    )


class PredictedOut(Schema):
    rate_rps: float
    capacity_rps: float = Field(description="the most requests/s it carries within the SLOs")
    output_tokens_per_s: float
    tokens_per_s_per_gpu: float
    ttft_p90_s: float
    itl_p90_s: float
    e2e_p90_s: float
    gpus: int
    cost_per_hour: float
    meets_slo: bool


class MeasuredOut(Schema):
    requests: int = Field(description="requests sent (Poisson arrivals at the load)")
    completed: int
    ttft_p90_s: float | None = Field(description="null when no request got a first token")
    itl_p90_s: float | None
    e2e_p90_s: float | None
    tpot_mean_s: float | None = Field(description="mean time per output token over the answers")
    output_tokens_per_s: float
    simulated_s: float = Field(description="simulated seconds the run covered")
    meets_slo: bool


class CandidateOut(Schema):
    label: str
    spec: dict[str, Any] = Field(
        description="a RuntimeSpec that passes /validate: create an endpoint from it with POST "
        "/deployments (`spec`), or apply it to one with PATCH /deployments/{id} (`spec`, and a "
        "`message` saying it came from the optimizer)"
    )
    predicted: PredictedOut
    features: list[str] = Field(description="the optimizations it uses")
    reasons: list[str]
    warnings: list[IssueOut]
    measured: MeasuredOut | None = Field(
        default=None, description="with `confirm`: what a short simulated run measured"
    )


class WaterfallOut(Schema):
    step: str = Field(description="baseline, then each optimization added")
    candidate: CandidateOut | None


class CorrectionOut(Schema):
    deployment: str = Field(description="the endpoint whose traffic corrected the model")
    revision: int = Field(description="its serving revision, whose samples were compared")
    factors: dict[str, float] = Field(
        description="measured / predicted by latency (ttft, itl) the predictions were scaled by"
    )


class OptimizeOut(Schema):
    rate_rps: float
    evaluated: int
    best: CandidateOut | None = Field(
        description="the cheapest (or, under `throughput`, most tokens/s per GPU) meeting the "
        "SLOs and limits with no validation warning of its own; with `confirm`, the first by "
        "the simulated runs' figures"
    )
    ranked: list[CandidateOut]
    pareto: list[CandidateOut]
    waterfall: list[WaterfallOut]
    notes: list[str]
    correction: CorrectionOut | None = Field(
        default=None, description="with `deployment_id`: how its own traffic corrected the model"
    )


@router.post("/optimize", response=OptimizeOut, summary="Recommend settings for a traffic profile")
def optimize_settings(request: HttpRequest, payload: OptimizeIn) -> dict[str, Any]:
    """Ranked configurations with their predicted TTFT, ITL, throughput and cost, and reasons."""
    if payload.traffic.rate_rps is not None and payload.traffic.concurrency is not None:
        raise ServiceError("give rate_rps or concurrency, not both", field="traffic")
    traffic = Traffic(**payload.traffic.model_dump())
    if traffic.rate_rps is None and traffic.concurrency is None:
        traffic = Traffic(**{**payload.traffic.model_dump(), "rate_rps": 1.0})
    query = OptimizeRequest(
        model=payload.model,
        architecture=payload.architecture,
        gpus=tuple(payload.gpus),
        traffic=traffic,
        slo=Slo.targets(**payload.slo.model_dump()),
        limits=Limits(**payload.limits.model_dump()),
        objective=payload.objective,
    )
    return recommend.recommend(
        actor_of(request),
        query,
        cluster_id=payload.cluster_id,
        confirm=payload.confirm,
        confirm_count=payload.confirm_top,
        deployment_id=payload.deployment_id,
    )
