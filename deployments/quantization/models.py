"""The records of quantization: a run (a model quantized by the tool, one or several recipes),
its progress events, its candidates (one checkpoint per recipe, measured against the original),
the calibration sets a run may use, and the artifacts (a candidate's checkpoint registered as a
model source an endpoint may load).

Written by ``deployments.quantization.services`` only. A run's observed fields (status, phase,
events, candidates, GPU-seconds) come from the tool's JSON-lines events, which
``services.record_progress`` applies; the same event applied twice changes nothing (events are
keyed by attempt and line, candidates by run and name), so re-reading a run's output after a
worker restart is safe.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from controlplane.models import Organization
from deployments.clusters.models import Cluster
from deployments.endpoints.models import Deployment


class CalibrationSet(models.Model):
    """Texts a run calibrates on, uploaded by the organization (JSONL of ``{"text": ...}``).

    ``sha256`` is the digest of the stored texts (one line each, in order), which a candidate's
    provenance names; the tool recomputes it over what it read (``calibration_sha256``).
    ``expires_at``: when the texts are deleted (a purge keeps the row and its digest, so the
    provenance of checkpoints made from it still says what they were calibrated on).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="calibration_sets"
    )
    name = models.CharField(max_length=100)
    texts = models.JSONField(default=list, blank=True)
    samples = models.PositiveIntegerField(default=0)
    sha256 = models.CharField(max_length=64)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    purged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"calibration set {self.name} ({self.samples} samples)"


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class QuantizationRun(models.Model):
    """One run of the quantization tool on a model source, on a cluster.

    ``source_model`` is what the tool loads: a model cache path or a hub repository id
    (``source_deployment`` when it was taken from an endpoint's serving revision).
    ``recipes`` are the recipes asked for, or empty with ``propose`` (the tool measures
    per-layer sensitivity and proposes). ``attempt`` counts starts: a run whose process died
    is started again (``services.MAX_ATTEMPTS``). ``driven_until`` is the lease of the task
    driving it: another task takes over only once it has lapsed.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="quantization_runs"
    )
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    name = models.CharField(max_length=100, blank=True)
    source_model = models.CharField(max_length=300)
    source_deployment = models.ForeignKey(
        Deployment, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    hf_token_secret = models.CharField(max_length=100, blank=True)
    format = models.CharField(max_length=16)
    recipes = models.JSONField(default=list, blank=True)
    propose = models.BooleanField(default=False)
    calibration_set = models.ForeignKey(
        CalibrationSet, null=True, blank=True, on_delete=models.PROTECT, related_name="runs"
    )
    calibration_samples = models.PositiveIntegerField(default=64)
    max_seq_len = models.PositiveIntegerField(default=512)
    gpu = models.CharField(max_length=32)  # catalogue id: the Job's node, the price per hour
    gpus = models.PositiveSmallIntegerField(default=1)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.QUEUED)
    phase = models.CharField(max_length=32, blank=True)
    phase_candidate = models.CharField(max_length=100, blank=True)
    sensitivity = models.JSONField(default=list, blank=True)  # [{"name", "kl"}] per layer
    attempt = models.PositiveSmallIntegerField(default=0)
    lines_read = models.PositiveIntegerField(default=0)  # of this attempt's output
    # Where the driver's last read of that output stopped (``QuantizationProgress.cursor``).
    log_cursor = models.CharField(max_length=100, blank=True)
    driven_until = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    gpu_seconds = models.FloatField(default=0.0)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["organization", "-created_at"])]

    def __str__(self) -> str:
        return f"quantization {self.name or self.pk} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class RunEvent(models.Model):
    """One line of the tool's output, as it was read (``{"event": ..., ...}``)."""

    run = models.ForeignKey(QuantizationRun, on_delete=models.CASCADE, related_name="events")
    attempt = models.PositiveSmallIntegerField()
    line = models.PositiveIntegerField()
    kind = models.CharField(max_length=16)
    data = models.JSONField()
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["attempt", "line"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "attempt", "line"], name="one_event_per_run_line"
            )
        ]

    def __str__(self) -> str:
        return f"{self.run_id} #{self.attempt}.{self.line} {self.kind}"


class Candidate(models.Model):
    """A recipe's checkpoint and how it measured against the original: ``mean_kl`` and
    ``top1`` (``runtime.quality`` over the evaluation set), the share of linear weights
    quantized, bits per weight, and ``price`` (``runtime.quantize.price_candidate``'s
    throughput per GPU at the SLO)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(QuantizationRun, on_delete=models.CASCADE, related_name="candidates")
    name = models.CharField(max_length=100)
    recipe = models.JSONField()
    mean_kl = models.FloatField()
    p99_kl = models.FloatField(null=True, blank=True)
    top1 = models.FloatField()
    quantized_fraction = models.FloatField()
    bits_per_weight = models.FloatField()
    quantization = models.CharField(max_length=32)  # SGLang's --quantization for it
    checkpoint = models.CharField(max_length=500)  # where the tool wrote it
    tool = models.JSONField(default=dict)  # {"name", "version"}
    calibration_sha256 = models.CharField(max_length=64, blank=True)
    price = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["mean_kl"]
        constraints = [
            models.UniqueConstraint(fields=["run", "name"], name="one_candidate_per_run_name")
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.name}"


class Artifact(models.Model):
    """A candidate's checkpoint registered as a model source: ``path`` is what a spec's
    ``model.source`` names (under ``runtime.spec.MODEL_CACHE_PATH``), with its provenance.
    The recipe and the measurements are its candidate's (one home each)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="quantized_artifacts"
    )
    candidate = models.OneToOneField(Candidate, on_delete=models.CASCADE, related_name="artifact")
    path = models.CharField(max_length=500, unique=True)
    quantization = models.CharField(max_length=32)
    source_model = models.CharField(max_length=300)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.path
