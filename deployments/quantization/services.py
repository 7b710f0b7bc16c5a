"""The writers of quantization: what people ask (upload a calibration set, start a run, cancel
it, deploy a candidate) and what the driving task observes (claim a run, start an attempt,
record the tool's events, finish). Reads are ``queries``'.

People's writers check the actor's role, scope every lookup to the actor's organization, record
an AuditEvent, and send the driving task by name after commit. A run's GPUs count in the
organization's GPU quotas while it is queued or running (``deployments.quotas``), so starting
one is refused where it would take the organization past them.

The task's writers keep a run consistent whatever dies when: ``claim`` is a conditional UPDATE
on a lease (``driven_until``), so one task drives a run at a time and a lapsed lease (a dead
worker) lets the next take over; ``record_progress`` applies only lines it has not read
(``lines_read``; the driver resumes its read at ``log_cursor``, saved with it), and its rows are
keyed by (run, attempt, line) and (run, candidate name), so
reading the same output twice changes nothing; a run whose process died without a word is
started again as its next attempt, up to ``MAX_ATTEMPTS``.

Deploying a candidate goes through the endpoint's own writers, the one home for revisions: a
new revision (``endpoints.services.update_settings``) or a canary with the KL quality gate
(``experiments.canary.services.start_canary`` then ``quality.services.start_gate``), whose
model source is the artifact's path and whose quantization method is the artifact's. The
revision's provenance is that path (``queries.artifact_of_revision``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from controlplane import audit
from controlplane.access import Actor, NotFound, require_role
from controlplane.celery import app as celery_app
from controlplane.models import Role
from controlplane.services import Conflict, ServiceError
from deployments.drivers.base import QuantizationProgress
from deployments.endpoints import changes, fields
from deployments.endpoints import services as endpoints
from deployments.endpoints.queries import get_deployment
from deployments.experiments.canary import services as canaries
from deployments.experiments.quality import services as gates
from deployments.quantization import queries
from deployments.quantization.models import (
    Artifact,
    CalibrationSet,
    Candidate,
    QuantizationRun,
    RunEvent,
    RunStatus,
)
from deployments.quantization.recipes import (
    FORMATS,
    RecipeError,
    cache_path_of,
    output_dir,
    parse_recipes,
    price_of_candidate,
)
from deployments.quotas import services as quotas
from runtime.catalog import UnknownGpuError, get_gpu
from runtime.quantize import (
    CandidateEvent,
    ErrorEvent,
    PhaseEvent,
    SensitivityEvent,
    parse_event,
)
from runtime.spec import Architecture, ModelSettings, RuntimeSpec

logger = logging.getLogger(__name__)
DRIVE_TASK = "deployments.drive_quantization"
MAX_ATTEMPTS = 3
LEASE_S = 90
MAX_SAMPLES = 4096
MAX_CALIBRATION_BYTES = 8 * 1024 * 1024
DEFAULT_RETENTION_DAYS = 30


def _run_snapshot(run: QuantizationRun) -> dict[str, Any]:
    return {
        "source_model": run.source_model,
        "format": run.format,
        "recipes": [r["name"] for r in run.recipes] or ("propose" if run.propose else []),
        "cluster": run.cluster.name,
        "gpu": run.gpu,
        "gpus": run.gpus,
        "status": run.status,
    }


# --- calibration sets ------------------------------------------------------------------------


def parse_calibration(jsonl: str) -> list[str]:
    """The texts of a JSONL of ``{"text": ...}``; a ServiceError naming ``samples`` otherwise."""
    if len(jsonl.encode()) > MAX_CALIBRATION_BYTES:
        raise ServiceError(
            f"samples: at most {MAX_CALIBRATION_BYTES // 2**20} MiB of text", field="samples"
        )
    texts = []
    for number, line in enumerate(jsonl.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            raise ServiceError(f"samples: line {number} is not JSON", field="samples") from None
        text = item.get("text") if isinstance(item, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise ServiceError(f'samples: line {number} has no "text" string', field="samples")
        texts.append(text)
    if not texts or len(texts) > MAX_SAMPLES:
        raise ServiceError(f"samples: 1 to {MAX_SAMPLES} lines of text", field="samples")
    return texts


def texts_sha256(texts: list[str]) -> str:
    return hashlib.sha256("".join(t + "\n" for t in texts).encode()).hexdigest()


@transaction.atomic
def upload_calibration_set(
    actor: Actor, *, name: str, samples: str, retention_days: int = DEFAULT_RETENTION_DAYS
) -> CalibrationSet:
    """A calibration set of the organization's own texts, deleted after ``retention_days``."""
    require_role(actor, Role.DEVELOPER)
    name = fields.clean_text(name, "name", 100, required=True)
    if not isinstance(retention_days, int) or not 1 <= retention_days <= 365:
        raise ServiceError("retention_days: 1 to 365", field="retention_days")
    texts = parse_calibration(samples)
    made = CalibrationSet.objects.create(
        organization=actor.organization,
        name=name,
        texts=texts,
        samples=len(texts),
        sha256=texts_sha256(texts),
        created_by=actor.label,
        expires_at=timezone.now() + timedelta(days=retention_days),
    )
    audit.record(actor, "calibration_set.upload", made, after={"name": name, "samples": len(texts)})
    return made


def purge_expired_calibration(now: Any = None) -> int:
    """Delete the texts of calibration sets past their retention; their digest stays."""
    now = now or timezone.now()
    return CalibrationSet.objects.filter(expires_at__lte=now, purged_at__isnull=True).update(
        texts=[], purged_at=now
    )


# --- starting and cancelling -----------------------------------------------------------------


def _source(actor: Actor, source_model: str, deployment_id: str | None) -> dict[str, Any]:
    """What the run loads: an endpoint's serving model, or a model source named directly."""
    if deployment_id:
        deployment = get_deployment(actor, deployment_id)
        revision = deployment.current_revision or deployment.target_revision
        if revision is None:
            raise ServiceError("deployment: the endpoint has no revision yet", field="deployment")
        spec = RuntimeSpec.model_validate(revision.spec)
        _not_quantized(spec.model.source)
        return {
            "source_model": spec.model.source,
            "source_deployment": deployment,
            "hf_token_secret": spec.model.hf_token_secret or "",
            "gpu": spec.hardware.gpu,
        }
    try:
        checked = ModelSettings.model_validate({"source": source_model})
    except ValidationError:
        raise ServiceError(
            "source_model: a hub repository id or a path under the model cache",
            field="source_model",
        ) from None
    _not_quantized(checked.source)
    return {"source_model": checked.source, "source_deployment": None, "gpu": ""}


def _not_quantized(source: str) -> None:
    """Quantizing a checkpoint Plinth already quantized compounds the error: the run is
    asked of its source model instead."""
    made = Artifact.objects.filter(path=source).first()
    if made is not None:
        raise ServiceError(
            f"source_model: {source} is already quantized; quantize its source "
            f"{made.source_model} instead",
            field="source_model",
        )


def _gpu(value: str, field: str) -> str:
    try:
        return get_gpu(value).id
    except UnknownGpuError:
        raise ServiceError(f"{field}: unknown GPU type {value!r}", field=field) from None


def _calibration(actor: Actor, set_id: str | None) -> CalibrationSet | None:
    if not set_id:
        return None
    try:
        chosen = queries.get_calibration_set(actor, set_id)
    except NotFound:
        raise ServiceError("calibration_set: no such set", field="calibration_set") from None
    if chosen.purged_at is not None:
        raise ServiceError(
            "calibration_set: its samples were deleted (retention)", field="calibration_set"
        )
    return chosen


@transaction.atomic
def start_run(
    actor: Actor,
    *,
    format: str,
    source_model: str = "",
    deployment: str | None = None,
    recipes: list[dict[str, Any]] | None = None,
    propose: bool = False,
    calibration_set: str | None = None,
    samples: int = 64,
    max_seq_len: int = 512,
    cluster: str | None = None,
    gpu: str = "",
    gpus: int = 1,
    name: str = "",
) -> QuantizationRun:
    """A queued run of the tool, driven by a task sent after commit."""
    require_role(actor, Role.DEVELOPER)
    name = fields.clean_text(name, "name", 100)
    if format not in FORMATS:
        raise ServiceError(f"format: one of {', '.join(FORMATS)}", field="format")
    if bool(recipes) == bool(propose):
        raise ServiceError("recipes: give recipes, or propose: true (not both)", field="recipes")
    try:
        asked = parse_recipes(recipes or [])
    except RecipeError as exc:
        raise ServiceError(f"recipes: {exc}", field="recipes") from None
    for field, value, low, top in (
        ("samples", samples, 1, 4096),
        ("max_seq_len", max_seq_len, 8, 32768),
    ):
        if not isinstance(value, int) or not low <= value <= top:
            raise ServiceError(f"{field}: {low} to {top}", field=field)
    if not isinstance(gpus, int) or not 1 <= gpus <= 8:
        raise ServiceError("gpus: 1 to 8", field="gpus")
    source = _source(actor, source_model, deployment)
    gpu = _gpu(gpu or source.pop("gpu") or "H100-SXM", "gpu")
    source.pop("gpu", None)
    run = QuantizationRun(
        organization=actor.organization,
        cluster=changes.cluster_for(actor, cluster),
        name=name,
        format=format,
        recipes=asked,
        propose=bool(propose),
        calibration_set=_calibration(actor, calibration_set),
        calibration_samples=samples,
        max_seq_len=max_seq_len,
        gpu=gpu,
        gpus=gpus,
        created_by=actor.label,
        **source,
    )
    quotas.check_gpus(actor.organization, gpu=gpu, gpus=gpus, field="gpus")
    run.save()
    audit.record(actor, "quantization.start", run, after=_run_snapshot(run))
    transaction.on_commit(lambda: send_drive(str(run.pk)))
    return run


def send_drive(run_id: str, countdown: float = 0) -> None:
    try:
        celery_app.send_task(DRIVE_TASK, args=[run_id], countdown=countdown)
    except Exception as exc:  # the broker is down: beat's resume pass sends it later
        logger.warning("quantization run %s not sent (%s)", run_id, exc)


@transaction.atomic
def cancel_run(actor: Actor, run_id: uuid.UUID | str) -> QuantizationRun:
    """Stop a queued or running run; the driving task removes its process or Job."""
    require_role(actor, Role.DEVELOPER)
    run = queries.get_run(actor, run_id)
    run = QuantizationRun.objects.select_for_update().get(pk=run.pk)
    if run.finished:
        raise Conflict(f"the run has already {run.status}", code="run_finished")
    before = _run_snapshot(run)
    _end(run, RunStatus.CANCELLED, f"cancelled by {actor.label}")
    audit.record(actor, "quantization.cancel", run, before=before, after=_run_snapshot(run))
    transaction.on_commit(lambda: send_drive(str(run.pk)))
    return run


# --- what the driving task observes ----------------------------------------------------------


def claim(run_id: str, *, lease_s: float = LEASE_S) -> QuantizationRun | None:
    """The run, leased to the caller, unless another task holds a live lease on it."""
    now = timezone.now()
    free = QuantizationRun.objects.filter(pk=run_id).exclude(driven_until__gt=now)
    if free.update(driven_until=now + timedelta(seconds=lease_s)) != 1:
        return None
    return QuantizationRun.objects.select_related(
        "cluster", "calibration_set", "source_deployment__target_revision"
    ).get(pk=run_id)


def release(run: QuantizationRun) -> None:
    QuantizationRun.objects.filter(pk=run.pk).update(driven_until=None)


def begin_attempt(run: QuantizationRun) -> bool:
    """Start the run's next attempt (False once it has had ``MAX_ATTEMPTS``)."""
    if run.attempt >= MAX_ATTEMPTS:
        return False
    now = timezone.now()
    run.attempt += 1
    run.lines_read, run.log_cursor = 0, ""
    run.status = RunStatus.RUNNING
    run.started_at = run.started_at or now
    run.phase, run.phase_candidate = "starting", ""
    run.save(
        update_fields=[
            "attempt", "lines_read", "log_cursor", "status", "started_at", "phase",
            "phase_candidate",
        ]
    )  # fmt: skip
    return True


def record_progress(
    run: QuantizationRun, progress: QuantizationProgress, *, lease_s: float = LEASE_S
) -> None:
    """Apply the lines of ``progress`` not yet read; keep where the read stopped with the count
    (one transaction: a worker that dies resumes the next read there); extend the lease; count
    GPU time."""
    now = timezone.now()
    with transaction.atomic():
        for number, line in enumerate(progress.lines, start=progress.first_line):
            if number >= run.lines_read:
                _apply_line(run, number, line, progress.output_dir)
        run.lines_read = max(run.lines_read, progress.first_line + len(progress.lines))
        run.log_cursor = progress.cursor or run.log_cursor
        run.gpu_seconds = _gpu_seconds(run, now)
        run.driven_until = now + timedelta(seconds=lease_s)
        run.save(
            update_fields=[
                "lines_read", "log_cursor", "phase", "phase_candidate", "sensitivity", "error",
                "gpu_seconds", "driven_until",
            ]
        )  # fmt: skip


def _gpu_seconds(run: QuantizationRun, until: Any) -> float:
    if run.started_at is None:
        return 0.0
    return float(run.gpus * max(0.0, (until - run.started_at).total_seconds()))


def _apply_line(run: QuantizationRun, number: int, line: str, seen_output: str) -> None:
    try:
        event = parse_event(line)
    except ValidationError:  # the contract says nothing else is printed: noted, skipped
        logger.warning("run %s: line %d is not one of the tool's events", run.pk, number)
        return
    made = RunEvent.objects.get_or_create(
        run=run,
        attempt=run.attempt,
        line=number,
        defaults={"kind": event.event, "data": event.model_dump(mode="json")},
    )[1]
    if not made:
        return
    if isinstance(event, PhaseEvent):
        run.phase, run.phase_candidate = event.phase, (event.candidate or "")[:100]
    elif isinstance(event, SensitivityEvent):
        run.sensitivity = [layer.model_dump(mode="json") for layer in event.layers]
    elif isinstance(event, CandidateEvent):
        _record_candidate(run, event, seen_output)
    elif isinstance(event, ErrorEvent):
        run.error = event.message[:4000]


def _record_candidate(run: QuantizationRun, event: CandidateEvent, seen_output: str) -> None:
    values: dict[str, Any] = {
        "recipe": event.recipe.model_dump(mode="json"),
        "mean_kl": event.mean_kl,
        "p99_kl": event.p99_kl,
        "top1": event.top1,
        "quantized_fraction": event.quantized_fraction,
        "bits_per_weight": event.bits_per_weight,
        "quantization": event.quantization,
        "checkpoint": event.checkpoint,
        "tool": event.tool.model_dump(mode="json"),
        "calibration_sha256": event.calibration_sha256,
    }
    values["price"] = price_of_candidate(
        run, {**values, "format_shares": dict(event.format_shares)}
    )
    candidate, _ = Candidate.objects.update_or_create(run=run, name=event.name, defaults=values)
    path = cache_path_of(event.checkpoint, seen_output, output_dir(run))
    Artifact.objects.update_or_create(
        candidate=candidate,
        defaults={
            "organization_id": run.organization_id,
            "path": path,
            "quantization": event.quantization,
            "source_model": run.source_model,
        },
    )


def finish(run: QuantizationRun, status: str, error: str = "") -> None:
    """The run ended as ``status`` (unless it was cancelled meanwhile)."""
    with transaction.atomic():
        locked = QuantizationRun.objects.select_for_update().get(pk=run.pk)
        if locked.finished:
            return
        _end(locked, status, error or locked.error)


def _end(run: QuantizationRun, status: str, error: str) -> None:
    now = timezone.now()
    run.status, run.finished_at, run.error = status, now, error
    run.gpu_seconds = _gpu_seconds(run, now)
    if status == RunStatus.SUCCEEDED:
        run.phase, run.phase_candidate = "done", ""
    run.save(
        update_fields=["status", "finished_at", "error", "gpu_seconds", "phase", "phase_candidate"]
    )


def lapsed_runs() -> list[str]:
    """Runs queued or running whose driving task is gone (no live lease)."""
    now = timezone.now()
    active = QuantizationRun.objects.filter(status__in=queries.ACTIVE)
    return [str(pk) for pk in active.exclude(driven_until__gt=now).values_list("pk", flat=True)]


# --- deploying a candidate -------------------------------------------------------------------

DEPLOY_MODES = ("canary", "revision")


def quantized_spec(spec: RuntimeSpec, artifact: Artifact) -> RuntimeSpec:
    """``spec`` loading ``artifact``: its path as the model source, its quantization method.
    The name clients call is kept (the old source, unless one was set), and a catalogued
    model's architecture is written inline (a cache path is in no catalogue)."""
    model = spec.model
    arch = model.arch()
    inline = model.architecture
    if inline is None and arch is not None:
        inline = Architecture.model_validate(
            {k: getattr(arch, k) for k in Architecture.model_fields if hasattr(arch, k)}
        )
    new_model = model.model_copy(
        update={
            "source": artifact.path,
            "revision": None,
            "served_name": model.served_name or model.source,
            "architecture": inline,
        }
    )
    method = spec.quantization.model_copy(update={"method": artifact.quantization or None})
    return spec.model_copy(update={"model": new_model, "quantization": method})


def deploy_candidate(
    actor: Actor,
    run_id: uuid.UUID | str,
    candidate: str,
    *,
    deployment: str,
    mode: str = "canary",
    weight: int = 10,
) -> dict[str, Any]:
    """A candidate's checkpoint on ``deployment``: a canary at ``weight`` percent with the KL
    quality gate (``mode`` canary: promoted only once the gate passed), or a new revision."""
    require_role(actor, Role.DEVELOPER)
    if mode not in DEPLOY_MODES:
        raise ServiceError("mode: canary or revision", field="mode")
    run = queries.get_run(actor, run_id)
    try:
        chosen = queries.get_candidate(run, candidate)
        artifact = chosen.artifact
    except (NotFound, Artifact.DoesNotExist):
        raise ServiceError(
            f"candidate: the run has no checkpoint {candidate!r}", field="candidate"
        ) from None
    with transaction.atomic():
        endpoint = get_deployment(actor, deployment)
        target = endpoint.target_revision
        if target is None:
            raise ServiceError("deployment: the endpoint has no revision yet", field="deployment")
        spec = quantized_spec(RuntimeSpec.model_validate(target.spec), artifact)
        message = (
            f"quantized: {chosen.name} of run {str(run.pk)[:8]} (mean KL {chosen.mean_kl:.4g})"
        )
        if mode == "revision":
            revision = endpoints.update_settings(
                actor, endpoint.pk, spec=spec, base_revision=target.number, message=message
            )
            return {"mode": mode, "revision": revision.number, "canary": None, "gate": None}
        started = canaries.start_canary(
            actor, endpoint.pk, spec=spec, weight=weight, message=message
        )
        gate = gates.start_gate(actor, endpoint.pk, started.revision.number)
        return {
            "mode": mode,
            "revision": started.revision.number,
            "canary": str(started.pk),
            "gate": str(gate.pk),
        }
