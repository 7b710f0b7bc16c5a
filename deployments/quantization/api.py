"""Quantization routes: start a run, list and read runs (progress, per-layer sensitivity,
candidates with KL and predicted throughput), compare a run's candidates, cancel, deploy a
candidate (a new revision, or a canary with the KL gate), the artifacts with their provenance,
and calibration sets (upload, list)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import Field, StrictBool, StrictInt, StrictStr

from deployments.api.auth import actor_of
from deployments.api.schemas import PageQuery, StrictIn, page_of, page_schema
from deployments.quantization import queries, services
from deployments.quantization.frontier import compare
from deployments.quantization.models import Artifact, CalibrationSet, Candidate, QuantizationRun
from deployments.quantization.recipes import FORMATS

router = Router(tags=["quantization"])
RUNS = "/quantization/runs"


class QuantizationRecipeIn(StrictIn):
    name: StrictStr
    keep_bf16: list[StrictStr] = Field(default_factory=list, description="module patterns")
    formats: dict[StrictStr, StrictStr] = Field(
        default_factory=dict, description="module pattern -> format, where formats mix"
    )


class QuantizationRunIn(StrictIn):
    format: StrictStr = Field(description=f"one of {', '.join(FORMATS)}")
    source_model: StrictStr = Field("", description="a model cache path or hub repository id")
    deployment: StrictStr | None = Field(
        None, description="an endpoint (id or slug) whose serving model is the source"
    )
    recipes: list[QuantizationRecipeIn] | None = Field(None, description="the recipes to try")
    propose: StrictBool = Field(False, description="let the tool propose recipes by sensitivity")
    calibration_set: StrictStr | None = Field(
        None, description="an uploaded calibration set's id (none: the built-in generic set)"
    )
    samples: StrictInt = Field(64, description="calibration samples")
    max_seq_len: StrictInt = Field(512, description="tokens per calibration sample")
    cluster: StrictStr | None = Field(None, description="cluster id (the default one)")
    gpu: StrictStr = Field("", description="GPU type of the node (the endpoint's by default)")
    gpus: StrictInt = 1
    name: StrictStr = ""


class ArtifactOut(Schema):
    id: str
    path: str = Field(description="what a spec's model.source names to load it")
    quantization: str = Field(description="SGLang's --quantization for it")
    source_model: str
    run: str
    candidate: str
    recipe: dict[str, Any]
    tool: dict[str, Any]
    calibration_sha256: str
    mean_kl: float
    top1: float
    created_at: datetime


class QuantizationCandidateOut(Schema):
    name: str
    recipe: dict[str, Any]
    mean_kl: float
    p99_kl: float | None
    top1: float
    quantized_fraction: float
    bits_per_weight: float
    quantization: str
    checkpoint: str
    price: dict[str, Any] | None = Field(description="predicted throughput per GPU at the SLO")
    artifact: str | None = Field(description="the model cache path to deploy")
    on_frontier: bool = Field(description="no other candidate is as close and as fast")


class QuantizationRunOut(Schema):
    id: str
    name: str
    status: str
    phase: str
    phase_candidate: str
    source_model: str
    deployment: str | None
    format: str
    recipes: list[dict[str, Any]]
    propose: bool
    calibration_set: str | None
    samples: int
    max_seq_len: int
    cluster: str
    gpu: str
    gpus: int
    attempt: int
    sensitivity: list[dict[str, Any]]
    events: int
    candidates: list[QuantizationCandidateOut]
    gpu_seconds: float
    error: str
    created_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class QuantizationDeployIn(StrictIn):
    deployment: StrictStr = Field(description="the endpoint (id or slug)")
    candidate: StrictStr
    mode: Literal["canary", "revision"] = Field(
        "canary", description="canary: with the KL quality gate; revision: a new revision"
    )
    weight: StrictInt = Field(10, description="percent of requests to the canary")


class QuantizationDeployOut(Schema):
    mode: str
    revision: int
    canary: str | None
    gate: str | None


class QuantizationCompareOut(Schema):
    baseline: str
    candidates: list[dict[str, Any]]


class CalibrationSetIn(StrictIn):
    name: StrictStr
    samples: StrictStr = Field(description='JSONL, one {"text": ...} per line')
    retention_days: StrictInt = Field(
        services.DEFAULT_RETENTION_DAYS, description="the texts are deleted after this"
    )


class CalibrationSetOut(Schema):
    id: str
    name: str
    samples: int
    sha256: str
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    purged_at: datetime | None


def artifact_out(artifact: Artifact) -> dict[str, Any]:
    candidate = artifact.candidate
    return {
        "id": str(artifact.pk),
        "path": artifact.path,
        "quantization": artifact.quantization,
        "source_model": artifact.source_model,
        "run": str(candidate.run_id),
        "candidate": candidate.name,
        "recipe": candidate.recipe,
        "tool": candidate.tool,
        "calibration_sha256": candidate.calibration_sha256,
        "mean_kl": candidate.mean_kl,
        "top1": candidate.top1,
        "created_at": artifact.created_at,
    }


def candidate_out(candidate: Candidate, frontier: set[str]) -> dict[str, Any]:
    artifact = getattr(candidate, "artifact", None)
    return {
        "name": candidate.name,
        "recipe": candidate.recipe,
        "mean_kl": candidate.mean_kl,
        "p99_kl": candidate.p99_kl,
        "top1": candidate.top1,
        "quantized_fraction": candidate.quantized_fraction,
        "bits_per_weight": candidate.bits_per_weight,
        "quantization": candidate.quantization,
        "checkpoint": candidate.checkpoint,
        "price": candidate.price,
        "artifact": artifact.path if artifact is not None else None,
        "on_frontier": candidate.name in frontier,
    }


def run_out(run: QuantizationRun) -> dict[str, Any]:
    candidates = queries.candidates_of(run)
    frontier = {c.name for c in compare(candidates).frontier}
    return {
        "id": str(run.pk),
        "name": run.name,
        "status": run.status,
        "phase": run.phase,
        "phase_candidate": run.phase_candidate,
        "source_model": run.source_model,
        "deployment": str(run.source_deployment_id) if run.source_deployment_id else None,
        "format": run.format,
        "recipes": run.recipes,
        "propose": run.propose,
        "calibration_set": str(run.calibration_set_id) if run.calibration_set_id else None,
        "samples": run.calibration_samples,
        "max_seq_len": run.max_seq_len,
        "cluster": run.cluster.name,
        "gpu": run.gpu,
        "gpus": run.gpus,
        "attempt": run.attempt,
        "sensitivity": run.sensitivity,
        "events": run.events.count(),
        "candidates": [candidate_out(c, frontier) for c in candidates],
        "gpu_seconds": round(run.gpu_seconds, 3),
        "error": run.error,
        "created_by": run.created_by,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }


def calibration_out(chosen: CalibrationSet) -> dict[str, Any]:
    return {
        "id": str(chosen.pk),
        "name": chosen.name,
        "samples": chosen.samples,
        "sha256": chosen.sha256,
        "created_by": chosen.created_by,
        "created_at": chosen.created_at,
        "expires_at": chosen.expires_at,
        "purged_at": chosen.purged_at,
    }


RunPage = page_schema(QuantizationRunOut, "QuantizationRunPage")
ArtifactPage = page_schema(ArtifactOut, "ArtifactPage")
CalibrationPage = page_schema(CalibrationSetOut, "CalibrationSetPage")


@router.post(RUNS, response={201: QuantizationRunOut}, summary="Start a quantization run")
def start_run(request: HttpRequest, payload: QuantizationRunIn) -> Status[dict[str, Any]]:
    """Quantize a model with the given recipes (or proposed ones), measure each candidate's KL
    against the original and price it; its GPUs count in the organization's quotas."""
    run = services.start_run(
        actor_of(request),
        **payload.model_dump(exclude={"recipes"}),
        recipes=[r.model_dump() for r in payload.recipes] if payload.recipes else None,
    )
    return Status(201, run_out(run))


@router.get(RUNS, response=RunPage, summary="List quantization runs")
def list_runs(request: HttpRequest, page: Query[PageQuery]) -> dict[str, Any]:
    return page_of(request, queries.runs_of(actor_of(request)), page, run_out)


@router.get(RUNS + "/{run_id}", response=QuantizationRunOut, summary="Get a quantization run")
def get_run(request: HttpRequest, run_id: str) -> dict[str, Any]:
    """Its status, phase, per-layer sensitivity and candidates (closest to the original first)."""
    return run_out(queries.get_run(actor_of(request), run_id))


@router.post(
    RUNS + "/{run_id}/cancel", response=QuantizationRunOut, summary="Cancel a quantization run"
)
def cancel_run(request: HttpRequest, run_id: str) -> dict[str, Any]:
    return run_out(services.cancel_run(actor_of(request), run_id))


@router.get(
    RUNS + "/{run_id}/compare", response=QuantizationCompareOut, summary="Compare candidates"
)
def compare_candidates(request: HttpRequest, run_id: str) -> dict[str, Any]:
    """Each candidate against the run's all-layers recipe (or its fastest): KL, top-1 and
    predicted throughput, and which are on the frontier."""
    run = queries.get_run(actor_of(request), run_id)
    return compare(queries.candidates_of(run)).as_dict()


@router.post(
    RUNS + "/{run_id}/deploy", response={201: QuantizationDeployOut}, summary="Deploy a candidate"
)
def deploy(
    request: HttpRequest, run_id: str, payload: QuantizationDeployIn
) -> Status[dict[str, Any]]:
    """The candidate's checkpoint on an endpoint: a canary gated by KL (promote once it
    passed), or a new revision."""
    done = services.deploy_candidate(actor_of(request), run_id, **payload.model_dump())
    return Status(201, done)


@router.get("/quantization/artifacts", response=ArtifactPage, summary="List quantized models")
def list_artifacts(request: HttpRequest, page: Query[PageQuery]) -> dict[str, Any]:
    """Checkpoints made by quantization runs, with their provenance."""
    return page_of(request, queries.artifacts_of(actor_of(request)), page, artifact_out)


@router.post(
    "/quantization/calibration-sets",
    response={201: CalibrationSetOut},
    summary="Upload calibration samples",
)
def upload_calibration(request: HttpRequest, payload: CalibrationSetIn) -> Status[dict[str, Any]]:
    made = services.upload_calibration_set(actor_of(request), **payload.model_dump())
    return Status(201, calibration_out(made))


@router.get(
    "/quantization/calibration-sets", response=CalibrationPage, summary="List calibration sets"
)
def list_calibration(request: HttpRequest, page: Query[PageQuery]) -> dict[str, Any]:
    return page_of(request, queries.calibration_sets_of(actor_of(request)), page, calibration_out)
