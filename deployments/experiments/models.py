"""Canaries, benchmarks and quality gates of an endpoint's revisions."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from controlplane.models import ApiKey
from deployments.endpoints.models import Deployment, Revision
from runtime.quality_run import builtin_prompts


class CanaryStatus(models.TextChoices):
    RUNNING = "running", "Running"
    PROMOTED = "promoted", "Promoted"
    ABORTED = "aborted", "Aborted"


class Canary(models.Model):
    """A settings change tried on a share of an endpoint's traffic beside the serving revision.

    Written by ``deployments.experiments.canary.services`` (start, promote, abort: what is asked)
    and, for the observed fields of its own pool (router address, replicas), by reconcile
    (``deployments.experiments.canary.pool``). The canary's revision is a real revision of the
    endpoint but never its target while the canary runs; promote makes it the target. At most one
    canary runs per endpoint (a partial unique constraint).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="canaries")
    revision = models.ForeignKey(Revision, on_delete=models.PROTECT, related_name="+")
    baseline_revision = models.ForeignKey(Revision, on_delete=models.PROTECT, related_name="+")
    weight = models.PositiveSmallIntegerField()  # percent of requests, 1-50
    # Requests of one conversation go to the same revision (its prefix cache stays warm).
    sticky = models.BooleanField(default=False)
    replicas = models.PositiveIntegerField(default=1)
    # Automatic abort when the canary regresses past these over the last ``window_s``.
    max_error_rate_delta = models.FloatField(default=0.05)
    max_ttft_p90_ratio = models.FloatField(default=1.5)
    max_itl_p90_ratio = models.FloatField(default=1.5)
    window_s = models.PositiveIntegerField(default=300)
    min_requests = models.PositiveIntegerField(default=20)
    status = models.CharField(
        max_length=16, choices=CanaryStatus.choices, default=CanaryStatus.RUNNING
    )
    reason = models.TextField(blank=True)
    # The quality gate's word on the canary (benchmarks, KL divergence): {"passed": bool, ...};
    # null until a gate has judged it. ``deployments.experiments.canary.rules.gate_allows`` reads
    # it.
    gate_verdict = models.JSONField(null=True, blank=True)
    started_by = models.CharField(max_length=150, blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    ended_at = models.DateTimeField(null=True, blank=True)
    # --- observed (reconcile) ---
    router_url = models.CharField(max_length=300, blank=True)
    ready_replicas = models.PositiveIntegerField(default=0)
    replica_facts = models.JSONField(default=list, blank=True)
    # Why its pool will never become ready, in the cluster's words (its weights download failed);
    # the watcher aborts a canary that has one.
    pool_failure = models.TextField(blank=True)
    # Its pool is gone from the cluster (after promote or abort): reconcile stops looking.
    pool_removed = models.BooleanField(default=False)

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["deployment"],
                condition=models.Q(status="running"),
                name="one_running_canary_per_deployment",
            )
        ]

    def __str__(self) -> str:
        return f"{self.deployment_id} canary r{self.revision_id} ({self.status})"


class BenchmarkStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class Benchmark(models.Model):
    """A run of NVIDIA AIPerf against an endpoint's gateway URL, one traffic profile, a result per
    load point (``deployments.experiments.benchmark.profile``). Written by
    ``deployments.experiments.benchmark.services`` (create) and
    ``deployments.experiments.benchmark.run`` (what the run observed)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="benchmarks")
    # The revision asked for (the serving one unless a canary's was named); ``served_revisions``
    # records which revisions the gateway says answered.
    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100, blank=True)
    profile = models.JSONField()
    status = models.CharField(
        max_length=16, choices=BenchmarkStatus.choices, default=BenchmarkStatus.QUEUED
    )
    results = models.JSONField(default=list, blank=True)  # one PointResult dict per load point
    prediction = models.JSONField(default=list, blank=True)  # the optimizer's, per load point
    served_revisions = models.JSONField(default=list, blank=True)
    runner = models.CharField(max_length=16, blank=True)  # "local" or "kubernetes"
    tool_version = models.CharField(max_length=32, blank=True)
    error = models.TextField(blank=True)
    # The temporary inference key the run called with: its usage is the benchmark's traffic.
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["deployment", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.deployment_id} benchmark {self.pk} ({self.status})"


class QualityGateStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"  # the candidate drifted past a threshold
    ERROR = "error", "Error"  # the run could not score (an engine unreachable): no verdict
    OVERRIDDEN = "overridden", "Overridden"  # failed, then let through by an admin with a reason


class QualityGate(models.Model):
    """A KL-divergence check of a candidate revision against a baseline revision
    (``runtime.quality``): the baseline's own answers scored under both, teacher forced.

    Written by ``deployments.experiments.quality.services`` (start, override) and the gate's task
    (``deployments.experiments.quality.run``: running, then the results and verdict). A revision's
    latest gate is its gate: ``deployments.experiments.quality.gate.refusal_for_revision`` (and
    ``deployments.experiments.canary.rules.gate_allows``) let a canary be promoted, or a revision
    be made the target, only when it passed or was overridden (no gate: no check).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="gates")
    revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="gates")
    baseline_revision = models.ForeignKey(Revision, on_delete=models.CASCADE, related_name="+")
    max_mean_kl = models.FloatField()
    min_top1_agreement = models.FloatField()
    max_new_tokens = models.PositiveIntegerField(default=64)
    # "builtin" (runtime/catalog/quality_prompts.json) or "custom" (from a JSONL); ``prompts``
    # holds the set's texts either way, so the record says what it scored.
    prompt_set = models.CharField(max_length=16, default="builtin")
    prompts = models.JSONField(default=list, blank=True)
    status = models.CharField(
        max_length=16, choices=QualityGateStatus.choices, default=QualityGateStatus.PENDING
    )
    results = models.JSONField(null=True, blank=True)  # QualityReport.as_dict() + per_prompt
    error = models.TextField(blank=True)
    override_reason = models.TextField(blank=True)
    overridden_by = models.CharField(max_length=150, blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["revision", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.deployment_id} quality gate {self.pk} ({self.status})"

    def prompt_texts(self) -> list[str]:
        """The prompts this gate scores: its stored set (a gate started before the built-in
        set was copied onto each gate stores none, and was run with the built-in set)."""
        return list(self.prompts) or builtin_prompts()

    @property
    def prompt_count(self) -> int:
        """How many prompts the gate scores: once it ran, how many its results cover (so the
        count and the results never disagree); before, its set's size."""
        if self.results is not None and "per_prompt" in self.results:
            return len(self.results["per_prompt"])
        return len(self.prompt_texts())
