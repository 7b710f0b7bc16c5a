"""The change kernel: the steps every writer of what is asked of an endpoint takes, and the one
commit they all go through (``commit_change``).

The writers are ``deployments.endpoints.services`` (a person's create, edit, roll back, scale,
stop, start, delete), ``deployments.experiments.canary.services`` (start, promote, abort) and
``deployments.autoscaling.services`` (the system's wake-ups and autoscaling). Each locks the
endpoint's row (``locked``), checks what it may, then commits here: the generation bumped, the
endpoint made due, one AuditEvent, the gateway told when what it routes by changed, and
``deployments.reconcile_deployment`` sent once, by name, after commit. This module imports no
task: the flow is one way, writers -> (message) tasks -> reconcile -> drivers. A broker that does
not answer then does not undo or fail a saved change: the beat sweep reconciles every due
endpoint.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnavailable

from controlplane import audit, notify
from controlplane.access import Actor, NotFound
from controlplane.celery import app as celery_app
from controlplane.services import Conflict, ServiceError
from deployments.clusters import queries as cluster_queries
from deployments.clusters import services as clusters
from deployments.clusters.checks import cluster_issues
from deployments.clusters.models import Cluster, ClusterKind
from deployments.endpoints.models import Deployment, DesiredState, Revision
from deployments.endpoints.queries import REVISION_FIELDS, by_id_or_slug
from deployments.specs import SpecInvalid, issue_dict
from runtime.spec import RuntimeSpec

__all__ = [
    "RECONCILE_TASK",
    "clamp_replicas",
    "cluster_for",
    "cluster_warnings",
    "commit_change",
    "ensure_not_deleting",
    "locked",
    "new_revision",
    "queue_reconcile",
    "send_reconcile",
]

logger = logging.getLogger(__name__)
# The task's name is the contract with deployments.endpoints.tasks, which this module never imports.
RECONCILE_TASK = "deployments.reconcile_deployment"

# Every column a writer may change; saved together, so no writer forgets one.
_ASKED = [
    "name",
    "labels",
    "desired_state",
    "desired_replicas",
    "target_revision",
    "generation",
    "next_reconcile_at",
    "updated_at",
    "last_scaled_at",
    "pool_replicas",
    "cluster",  # the home cluster, which a placement names first (``deployments.fleet``)
    "placement_policy",
]


def locked(actor: Actor, id_or_slug: uuid.UUID | str) -> Deployment:
    """The deployment, row-locked for this transaction (serialises concurrent edits), scoped to
    the actor's organization: another organization's endpoint is :class:`NotFound`."""
    deployment = (
        Deployment.objects.select_for_update(of=("self",))
        .select_related(*REVISION_FIELDS)
        .filter(by_id_or_slug(id_or_slug), organization=actor.organization)
        .first()
    )
    if deployment is None:
        raise NotFound("endpoint not found")
    return deployment


def ensure_not_deleting(deployment: Deployment) -> None:
    """Conflict when the endpoint is being deleted: nothing more is asked of it."""
    if deployment.desired_state == DesiredState.DELETED:
        raise Conflict(f"endpoint {deployment.slug} is being deleted", code="deleting")


def queue_reconcile(deployment_id: uuid.UUID) -> None:
    """Send the reconcile task for this endpoint once the transaction commits."""
    transaction.on_commit(lambda: send_reconcile(str(deployment_id)))


def send_reconcile(deployment_id: str) -> bool:
    """Send the reconcile task by name; False (logged) when the broker does not take it.

    Called after commit: the change is saved and the endpoint is due (``next_reconcile_at``),
    so the beat sweep reconciles it when the broker is back. Raising here would answer 500 for a
    change that was made.
    """
    try:
        celery_app.send_task(RECONCILE_TASK, args=[deployment_id])
    except BrokerUnavailable as exc:
        logger.warning("reconcile %s not queued (%s); the sweep takes it", deployment_id, exc)
        return False
    return True


def commit_change(
    actor: Actor,
    deployment: Deployment,
    action: str,
    before: dict[str, Any] | None,
    *,
    extra: dict[str, Any] | None = None,
    routes_changed: bool = False,
) -> None:
    """Save the desired state, audit it, and wake the reconciler and the gateway after commit.

    The gateway is told only when what it routes by changed: ``deployment.status`` is still the
    stored one until ``save`` derives it again, and ``before`` holds the desired state as it was.
    ``routes_changed`` tells it whatever the row says (a canary's split changes with no column of
    the endpoint's); ``extra`` is recorded in the audit's "after" beside the desired state (the
    canary, as its writers also put it in "before").
    """
    routed = None if before is None else (before["desired_state"], deployment.status)
    now = timezone.now()
    deployment.generation += 1
    deployment.next_reconcile_at = now
    deployment.updated_at = now
    deployment.save(update_fields=_ASKED)
    after = {**deployment.desired_snapshot(), **(extra or {})}
    audit.record(actor, action, deployment, before=before, after=after)
    if routes_changed or routed != (deployment.desired_state, deployment.status):
        notify.publish_on_commit("deployment", str(deployment.pk))
    queue_reconcile(deployment.pk)


def cluster_for(actor: Actor, cluster_id: uuid.UUID | str | None) -> Cluster:
    """The cluster a new endpoint runs on: the default one, or the actor's ``cluster_id``."""
    if cluster_id is None:
        return clusters.default_cluster()
    try:
        return cluster_queries.get_cluster(actor, cluster_id)
    except NotFound as exc:
        raise ServiceError("no such cluster", field="cluster_id", code="not_found") from exc


def cluster_warnings(cluster: Cluster, spec: RuntimeSpec, replicas: int) -> list[dict[str, Any]]:
    """The cluster's word on ``spec``: :class:`SpecInvalid` for what its operator keeps, else
    warnings (as a revision stores them) from its last observed GPU nodes."""
    if cluster.kind != ClusterKind.KUBERNETES:
        return []
    issues = cluster_issues(cluster.operator_settings, cluster.gpu_inventory, spec, replicas)
    if any(issue.is_error for issue in issues):
        raise SpecInvalid(issues)
    return [issue_dict(issue) for issue in issues]


def new_revision(
    actor: Actor,
    deployment: Deployment,
    spec: dict[str, Any],
    spec_hash: str,
    warnings: list[dict[str, Any]],
    message: str,
    rollback_of: int | None = None,
) -> Revision:
    """The endpoint's next revision, numbered after its newest, authored by ``actor``."""
    latest = deployment.revisions.aggregate(n=Max("number"))["n"] or 0
    return Revision.objects.create(
        deployment=deployment,
        number=latest + 1,
        spec=spec,
        spec_hash=spec_hash,
        warnings=warnings,
        author=actor.user if actor.user is not None else None,
        author_label=actor.label,
        message=message,
        rollback_of=rollback_of,
    )


def clamp_replicas(replicas: int, spec: RuntimeSpec) -> int:
    """``replicas`` within the autoscaling bounds of ``spec`` (new settings keep the count where
    they allow it)."""
    if replicas == 0:
        return 0  # scaled to zero stays so; the gateway wakes it
    return max(spec.autoscaling.min_replicas, min(replicas, spec.autoscaling.max_replicas))
