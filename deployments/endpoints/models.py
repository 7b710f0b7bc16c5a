"""An endpoint's records: the Deployment, its immutable revisions and its timeline's events.

A deployment's status is never hand-set: ``Deployment.facts()`` hands the fields kept here, as
plain values, to the pure ``deployments.status.derive_status``; its result is kept in the
``status`` column (recomputed by every write of a fact, in the same transaction), so lists filter
and count by status in SQL.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models, transaction
from django.utils import timezone

from controlplane.hygiene import full_pattern
from controlplane.models import Organization
from deployments.clusters.models import Cluster
from deployments.status import Facts, derive_status, is_settled, replica_counts

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
    # How desired replicas split over its clusters (``deployments.fleet.models.PlacementPolicy``;
    # the clusters and their minimums are its ``placements``). A scale-like setting, not a revision.
    placement_policy = models.CharField(max_length=16, default="cheapest")
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
