"""Deployments domain records: clusters, endpoints, immutable revisions, events, metrics, usage.

Writers: ``deployments.services`` (what is asked), ``deployments.reconcile`` and
``deployments.probe`` (what was observed), ``deployments.timeline`` (events). A deployment's
status is never hand-set: ``Deployment.facts()`` hands the fields kept here, as plain values, to
the pure ``deployments.status.derive_status``, which knows no field of this module. Its result
is kept in the ``status`` column so lists filter and count by status in SQL; every write of a
fact recomputes it in the same transaction (``save`` and ``DeploymentQuerySet.update``), so the
column is a cache of ``derive_status`` and never a second source of truth.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models, transaction
from django.utils import timezone

from controlplane.hygiene import full_pattern
from controlplane.models import ApiKey, Organization, Secret
from deployments.status import Facts, derive_status, is_settled, replica_counts
from runtime.quality_run import builtin_prompts

# DNS-safe: it becomes part of host names, Kubernetes object names and label values.
SLUG_BODY = r"[a-z]([a-z0-9-]{0,38}[a-z0-9])?"
# For the OpenAPI document (ECMA-262, where "$" is the end of the input).
SLUG_PATTERN = f"^{SLUG_BODY}$"
SLUG_MAX_LENGTH = 40
POOL_ROLES = ("prefill", "decode")  # a split endpoint's engine pools, in launch order
SLUG_RE = full_pattern(SLUG_BODY)  # whole string: Python's "$" would accept a final newline
slug_validator = RegexValidator(
    SLUG_RE,
    "use 1-40 lowercase letters, digits and hyphens, starting with a letter and not ending "
    "with a hyphen",
)


class ClusterKind(models.TextChoices):
    LOCAL = "local", "This machine"
    KUBERNETES = "kubernetes", "Kubernetes"


class Cluster(models.Model):
    """Where endpoints run. ``organization`` null means shared by the whole installation (the
    built-in ``local`` cluster is)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, null=True, blank=True, on_delete=models.CASCADE, related_name="clusters"
    )
    name = models.SlugField(max_length=50)
    kind = models.CharField(max_length=16, choices=ClusterKind.choices)
    namespace = models.CharField(max_length=63, default="plinth")
    kubeconfig = models.ForeignKey(
        Secret, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # What its admins set once (``deployments.cluster_settings.ClusterSettings``, validated by
    # ``deployments.clusters`` when saved; {}: every default). Kubernetes clusters only.
    operator_settings = models.JSONField(default=dict, blank=True)
    # Its GPU nodes as the worker last saw them (``deployments.inventory``): {"nodes": [...],
    # "gpus": {gpu: {"nodes", "gpus", "free"}}, "error": ""}; null until first observed.
    gpu_inventory = models.JSONField(null=True, blank=True)
    inventory_observed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [
            # Shared clusters have no organization: NULLs compare equal here, so two shared
            # clusters cannot share a name either.
            models.UniqueConstraint(
                fields=["organization", "name"], name="unique_cluster_name", nulls_distinct=False
            )
        ]

    def __str__(self) -> str:
        return self.name


class DesiredState(models.TextChoices):
    RUNNING = "running", "Running"
    STOPPED = "stopped", "Stopped"
    DELETED = "deleted", "Deleted"


# The fields ``Deployment.facts()`` reads: writing any of them may change the status.
FACT_FIELDS = frozenset(
    {
        "desired_state",
        "desired_replicas",
        "target_revision",
        "applied_revision",
        "current_revision",
        "ready_replicas",
        "total_replicas",
        "replica_facts",
        "first_ready_at",
        "failed_at",
        "rollout_started_at",
        "generation",
        "observed_generation",
    }
)
_FACT_COLUMNS = FACT_FIELDS | {f"{name}_id" for name in FACT_FIELDS if name.endswith("revision")}
# What the gateway's route table holds of an endpoint (``gateway.loader``): a write that leaves
# these unchanged needs no change notification.
ROUTE_FIELDS = (
    "slug",
    "organization_id",
    "status",
    "desired_state",
    "ready_replicas",
    "router_url",
    "current_revision_id",  # named in each answer's X-Plinth-Revision
)


class DeploymentQuerySet(models.QuerySet["Deployment"]):
    def update(self, **kwargs: Any) -> int:
        """An UPDATE that keeps the stored status equal to the derived one.

        When a fact is written, the matching rows are locked first (so the same rows are
        updated, under the same conditions), then their status is derived again from what they
        hold now, in the same transaction. A caller that already knows the status passes it.
        """
        if "status" in kwargs or not _FACT_COLUMNS.intersection(kwargs):
            return super().update(**kwargs)
        with transaction.atomic(using=self.db):
            ids = list(self.select_for_update(of=("self",)).values_list("pk", flat=True))
            updated = super().update(**kwargs)
            store_statuses(ids)
        return updated

    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> list[Deployment]:
        objs = list(objs)
        for deployment in objs:
            deployment.status = derive_status(deployment.facts())
        return super().bulk_create(objs, *args, **kwargs)


def store_statuses(ids: list[Any]) -> None:
    """Derive the status of these endpoints from their rows and store it where it differs."""
    if not ids:
        return
    rows = (
        Deployment.objects.filter(pk__in=ids)
        .select_related("target_revision", "applied_revision", "current_revision")
        .only(
            "status",
            *FACT_FIELDS,
            *(f"{name}__number" for name in FACT_FIELDS if name.endswith("revision")),
        )
    )
    changed: dict[str, list[Any]] = {}
    for row in rows:
        status = derive_status(row.facts())
        if status != row.status:
            changed.setdefault(status, []).append(row.pk)
    for status, pks in changed.items():  # one UPDATE per status, at most ten
        Deployment.objects.filter(pk__in=pks).update(status=status)


class Deployment(models.Model):
    """An endpoint: what should run (target revision, replicas, state) and what was observed."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="deployments"
    )
    slug = models.CharField(max_length=SLUG_MAX_LENGTH, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=100)
    # Free key/value tags; ``plinth apply`` marks the endpoints it owns with one (for --prune).
    labels = models.JSONField(default=dict, blank=True)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="deployments")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    # --- desired (written by services) ---
    desired_state = models.CharField(
        max_length=16, choices=DesiredState.choices, default=DesiredState.RUNNING
    )
    target_revision = models.ForeignKey(
        "Revision", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    desired_replicas = models.PositiveIntegerField(default=1)
    # The autoscaler's sizes of a split endpoint's prefill and decode pools, for one revision:
    # {"revision": 3, "prefill": 2, "decode": 1, "scaled_at": {"prefill": "<iso>"}}. Another
    # revision, or a pool not named, runs the size its settings give (see ``pool_sizes``).
    pool_replicas = models.JSONField(default=dict, blank=True)
    # Bumped by every service change, so reconcile can tell stale work from new.
    generation = models.PositiveIntegerField(default=1)

    # --- observed (written by reconcile) ---
    current_revision = models.ForeignKey(
        "Revision", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    applied_revision = models.ForeignKey(
        "Revision", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    observed_generation = models.PositiveIntegerField(default=0)
    ready_replicas = models.PositiveIntegerField(default=0)
    total_replicas = models.PositiveIntegerField(default=0)
    replica_facts = models.JSONField(default=list, blank=True)
    router_url = models.CharField(max_length=300, blank=True)
    first_ready_at = models.DateTimeField(null=True, blank=True)
    rollout_started_at = models.DateTimeField(null=True, blank=True)
    rollout_deadline = models.DateTimeField(null=True, blank=True)
    failure_reason = models.TextField(blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)
    last_probe_at = models.DateTimeField(null=True, blank=True)
    # When the sweep should next reconcile it; None: not until something changes (a stopped or
    # scaled-to-zero endpoint at rest costs nothing while idle).
    next_reconcile_at = models.DateTimeField(
        default=timezone.now, null=True, blank=True, db_index=True
    )
    # derive_status(facts()), stored by every writer of a fact: filterable and countable in SQL.
    status = models.CharField(max_length=16, default="pending", editable=False)

    # --- autoscaling facts ---
    last_request_at = models.DateTimeField(null=True, blank=True)
    last_scaled_at = models.DateTimeField(null=True, blank=True)

    objects = DeploymentQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["organization", "-created_at"]),
            models.Index(fields=["organization", "status", "-created_at"]),
        ]

    def __str__(self) -> str:
        return self.slug

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Saves with the status derived from the facts being saved."""
        fields = kwargs.get("update_fields")
        if fields is None or _FACT_COLUMNS.intersection(fields):
            self.status = derive_status(self.facts())
            if fields is not None:
                kwargs["update_fields"] = {*fields, "status"}
        super().save(*args, **kwargs)

    def route_state(self) -> tuple[Any, ...]:
        """What the gateway's route table holds of this endpoint (compared before and after a
        write: a change notification is sent only when it differs)."""
        return tuple(getattr(self, name) for name in ROUTE_FIELDS)

    def pool_sizes(self, revision: int, spec: dict[str, Any]) -> dict[str, int]:
        """The prefill and decode pool sizes revision ``revision`` (settings ``spec``) runs with:
        the autoscaler's where it sized this revision's pools, else the settings'."""
        split = spec.get("disaggregation") or {}
        sizes = {role: int((split.get(role) or {}).get("replicas", 1)) for role in POOL_ROLES}
        scaled = self.pool_replicas or {}
        if scaled.get("revision") == revision:
            sizes.update({role: int(scaled[role]) for role in POOL_ROLES if role in scaled})
        return sizes

    def desired_snapshot(self) -> dict[str, Any]:
        """What is asked of the endpoint, as the audit log records it before and after a change."""
        return {
            "desired_state": self.desired_state,
            "desired_replicas": self.desired_replicas,
            "target_revision": _number(self.target_revision),
        }

    def facts(self) -> Facts:
        """This row's facts as the pure ``deployments.status`` reads them."""
        applied = _number(self.applied_revision)
        return Facts(
            desired_state=self.desired_state,
            desired_replicas=self.desired_replicas,
            target_revision=_number(self.target_revision),
            applied_revision=applied,
            current_revision=_number(self.current_revision),
            ready_replicas=self.ready_replicas,
            total_replicas=self.total_replicas,
            first_ready_at=self.first_ready_at,
            failed_at=self.failed_at,
            rollout_in_progress=self.rollout_started_at is not None,
            generation=self.generation,
            observed_generation=self.observed_generation,
            **replica_counts(self.replica_facts or [], applied),
        )

    @property
    def settled(self) -> bool:
        return is_settled(self.facts())


def _number(revision: Revision | None) -> int | None:
    # Revision numbers, not ids: what status reasons about and people read.
    return revision.number if revision is not None else None


class Revision(models.Model):
    """An immutable snapshot of an endpoint's RuntimeSpec. Edits and rollbacks add new ones."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    spec = models.JSONField()
    spec_hash = models.CharField(max_length=64)
    # Validation warnings at creation: [{"field", "code", "message", "fix"}]
    warnings = models.JSONField(default=list, blank=True)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    author_label = models.CharField(max_length=150)
    message = models.CharField(max_length=500, blank=True)
    rollback_of = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "number"], name="unique_revision_number")
        ]

    def __str__(self) -> str:
        return f"{self.deployment_id} r{self.number}"

    def save(self, *args: object, **kwargs: object) -> None:
        if not self._state.adding:
            raise ValueError("revisions are immutable; create a new one")
        super().save(*args, **kwargs)  # type: ignore[arg-type]


class EventLevel(models.TextChoices):
    INFO = "info", "Info"
    WARNING = "warning", "Warning"
    ERROR = "error", "Error"


class DeploymentEvent(models.Model):
    """One line of an endpoint's timeline: state changes, cluster events, scaling decisions."""

    id = models.BigAutoField(primary_key=True)
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="events")
    created_at = models.DateTimeField(default=timezone.now)
    level = models.CharField(max_length=8, choices=EventLevel.choices, default=EventLevel.INFO)
    reason = models.CharField(max_length=64)
    message = models.TextField()
    revision_number = models.PositiveIntegerField(null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["deployment", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.reason}: {self.message[:60]}"


class MetricSample(models.Model):
    """Engine and router figures for one deployment over one probe interval."""

    id = models.BigAutoField(primary_key=True)
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="samples")
    ts = models.DateTimeField(db_index=True)
    interval_s = models.FloatField(default=0)
    replicas_ready = models.PositiveIntegerField(default=0)
    requests = models.FloatField(default=0)
    prompt_tokens = models.FloatField(default=0)
    generation_tokens = models.FloatField(default=0)
    cached_tokens = models.FloatField(default=0)
    requests_per_s = models.FloatField(default=0)
    tokens_per_s = models.FloatField(default=0)
    ttft_p50 = models.FloatField(null=True, blank=True)
    ttft_p90 = models.FloatField(null=True, blank=True)
    itl_p50 = models.FloatField(null=True, blank=True)
    itl_p90 = models.FloatField(null=True, blank=True)
    running = models.FloatField(default=0)
    queued = models.FloatField(default=0)
    kv_usage = models.FloatField(null=True, blank=True)
    cache_hit_rate = models.FloatField(null=True, blank=True)
    spec_accept_length = models.FloatField(null=True, blank=True)
    # Each ready replica's own figures for this interval: a list of {"name", "revision",
    # "requests_per_s", "tokens_per_s", "running", "kv_usage"}, for the console's per-replica
    # and per-revision series (the fields above are their sums, or means for KV usage).
    replicas = models.JSONField(default=list, blank=True)
    # Per revision, while two serve (a canary beside the baseline): {"<number>": {"requests",
    # "requests_per_s", "tokens_per_s", "ttft_p50", "ttft_p90", "itl_p50", "itl_p90"}}; {} when
    # one revision serves alone (the fields above are then its figures).
    revisions = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-ts"]
        indexes = [models.Index(fields=["deployment", "-ts"])]

    def __str__(self) -> str:
        return f"{self.deployment_id} @ {self.ts:%Y-%m-%d %H:%M:%S}"


class UsageRecord(models.Model):
    """Tokens used per inference key per endpoint per minute (flushed from Redis by beat).

    The deployment is kept by id and slug rather than a foreign key so usage history
    survives the endpoint's deletion.
    """

    id = models.BigAutoField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="usage")
    deployment_id = models.UUIDField()
    deployment_slug = models.CharField(max_length=SLUG_MAX_LENGTH)
    minute = models.DateTimeField()
    requests = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    cached_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["-minute"]
        constraints = [
            models.UniqueConstraint(
                fields=["api_key", "deployment_id", "minute"], name="unique_usage_minute"
            )
        ]
        indexes = [models.Index(fields=["organization", "-minute"])]

    def __str__(self) -> str:
        return f"{self.deployment_slug} {self.minute:%Y-%m-%d %H:%M}"


class UsageFlushBatch(models.Model):
    """One claimed batch of the gateway's Redis counters that was added to UsageRecord.

    Written in the same transaction as the counts (``deployments.usage``): a flush that dies
    after that commit and before deleting the batch from Redis finds it here next time and
    only deletes it. Pruned after ``usage.BATCH_RETENTION``.
    """

    batch = models.CharField(max_length=100, primary_key=True)  # the Redis processing hash name
    flushed_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return self.batch


class IdempotencyRecord(models.Model):
    """The first response to a POST sent with an ``Idempotency-Key``, replayed on retries.

    A record belongs to one caller (a management key, or a signed-in user) in one organization:
    another caller sending the same key runs their own request under their own role. ``role``
    is the role the first request ran with; a replay needs it still. ``status_code`` is null
    while the first request is still running. Rows expire after a day.
    """

    id = models.BigAutoField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    # "key:<api key id>" or "user:<user id>" (deployments.api.idempotency.caller_of).
    caller = models.CharField(max_length=80, default="")
    role = models.CharField(max_length=16, default="")
    key = models.CharField(max_length=255)
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=500)
    body_hash = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.BinaryField(default=bytes)
    content_type = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "caller", "key"], name="unique_idempotency_key_per_caller"
            )
        ]

    def __str__(self) -> str:
        return f"{self.method} {self.path} ({self.key[:20]})"


class Quota(models.Model):
    """What one organization may ask for, set by instance admins (``deployments.quotas``).

    A null limit is no limit; an organization without a row has none at all. GPU limits count
    the GPUs the organization's endpoints ask for (``quotas.usage``), by GPU type
    (``gpus_by_type``: catalogue id -> count) and in total. The row is also the lock that
    serialises the organization's quota checks: each writer locks it (SELECT ... FOR UPDATE)
    before counting, so two creates racing cannot both fit under the same headroom.
    """

    organization = models.OneToOneField(
        Organization, on_delete=models.CASCADE, primary_key=True, related_name="quota"
    )
    gpus = models.PositiveIntegerField(null=True, blank=True)
    gpus_by_type = models.JSONField(default=dict, blank=True)
    endpoints = models.PositiveIntegerField(null=True, blank=True)
    replicas_per_endpoint = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.CharField(max_length=150, blank=True)

    def __str__(self) -> str:
        return f"quota of {self.organization}"


class CanaryStatus(models.TextChoices):
    RUNNING = "running", "Running"
    PROMOTED = "promoted", "Promoted"
    ABORTED = "aborted", "Aborted"


class Canary(models.Model):
    """A settings change tried on a share of an endpoint's traffic beside the serving revision.

    Written by ``deployments.canary_services`` (start, promote, abort: what is asked) and, for
    the observed fields of its own pool (router address, replicas), by reconcile
    (``deployments.canary_pool``). The canary's revision is a real revision of the endpoint but
    never its target while the canary runs; promote makes it the target. At most one canary runs
    per endpoint (a partial unique constraint).
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
    # null until a gate has judged it. ``deployments.canary.gate_allows`` reads it.
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
    load point (``deployments.benchmark_profile``). Written by ``deployments.benchmarks`` (create)
    and ``deployments.benchmark_run`` (what the run observed)."""

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

    Written by ``deployments.quality_services`` (start, override) and the gate's task
    (``deployments.quality_run``: running, then the results and verdict). A revision's latest gate
    is its gate: ``deployments.quality_services.revision_allowed`` lets a canary be promoted, or a
    revision be made the target, only when it passed or was overridden (no gate: no check).
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
