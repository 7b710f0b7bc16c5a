"""Reads of quantization: an organization's runs, calibration sets and artifacts, and the
artifact a revision loads (its provenance). Reads only: the writers are ``services``'."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from controlplane.access import Actor, NotFound
from deployments.endpoints.models import Revision
from deployments.quantization.models import (
    Artifact,
    CalibrationSet,
    Candidate,
    QuantizationRun,
    RunStatus,
)

ACTIVE = (RunStatus.QUEUED, RunStatus.RUNNING)


def runs_of(actor: Actor) -> QuerySet[QuantizationRun]:
    return QuantizationRun.objects.filter(organization=actor.organization).select_related(
        "cluster", "calibration_set"
    )


def get_run(actor: Actor, run_id: uuid.UUID | str) -> QuantizationRun:
    try:
        return runs_of(actor).get(pk=run_id)
    except (QuantizationRun.DoesNotExist, ValueError, ValidationError) as exc:
        raise NotFound("quantization run not found") from exc


def candidates_of(run: QuantizationRun) -> list[Candidate]:
    """The run's candidates, the closest to the original first, with their artifacts."""
    return list(run.candidates.select_related("artifact").order_by("mean_kl", "name"))


def get_candidate(run: QuantizationRun, name: str) -> Candidate:
    found = run.candidates.select_related("artifact").filter(name=name).first()
    if found is None:
        raise NotFound(f"run has no candidate {name!r}")
    return found


def calibration_sets_of(actor: Actor) -> QuerySet[CalibrationSet]:
    return CalibrationSet.objects.filter(organization=actor.organization)


def get_calibration_set(actor: Actor, set_id: uuid.UUID | str) -> CalibrationSet:
    try:
        return calibration_sets_of(actor).get(pk=set_id)
    except (CalibrationSet.DoesNotExist, ValueError, ValidationError) as exc:
        raise NotFound("calibration set not found") from exc


def artifacts_of(actor: Actor) -> QuerySet[Artifact]:
    return Artifact.objects.filter(organization=actor.organization).select_related("candidate__run")


def artifact_of_revision(revision: Revision) -> Artifact | None:
    """The quantized checkpoint ``revision`` loads, if it loads one: the artifact whose path
    is its model source (the path is the one home of that link)."""
    source = (revision.spec.get("model") or {}).get("source", "")
    return Artifact.objects.filter(path=source).select_related("candidate__run").first()


def gpu_hours_this_month(organization_id: uuid.UUID, now: datetime) -> float:
    """GPU-hours the organization's runs used since the start of ``now``'s month (UTC): each
    run's GPUs times its time running in the month, to ``now`` while it runs."""
    start = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    runs = QuantizationRun.objects.filter(organization_id=organization_id, started_at__isnull=False)
    runs = runs.filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
    seconds = 0.0
    for run in runs.only("gpus", "started_at", "finished_at"):
        began = max(run.started_at or start, start)
        seconds += run.gpus * max(0.0, ((run.finished_at or now) - began).total_seconds())
    return seconds / 3600


def running_gpus(organization_id: uuid.UUID) -> list[tuple[str, int]]:
    """(GPU type, count) of each run of the organization that holds or waits for GPUs."""
    rows = QuantizationRun.objects.filter(organization_id=organization_id, status__in=ACTIVE)
    return list(rows.values_list("gpu", "gpus"))
