"""The only writers of what is asked of endpoints: create, edit, roll back, scale, stop, start,
delete, and the system's own asks (``wake`` for the gateway, ``autoscale_to`` for the
autoscaler). The cluster writers (``deployments.clusters.services``) are re-exported so front-ends
call one module for every change; reads are ``deployments.endpoints.queries``', never re-exported
here.

Each writer runs in one transaction on a row lock, checks the actor's role, scopes every query to
the actor's organization (objects of other organizations are :class:`NotFound`), records one
AuditEvent and a timeline line, bumps ``Deployment.generation``, makes the endpoint due and
sends ``deployments.reconcile_deployment`` once, by name, after commit. This module imports no
task: the flow is one way, services -> (message) tasks -> reconcile -> drivers. A broker that
does not answer then does not undo or fail a saved change: the beat sweep reconciles every due
endpoint. Observed facts are reconcile's and probe's to write, never this module's.

Editing to settings identical to the target revision's is a no-op that returns the target
revision (no new revision, no rollout): applying the same configuration twice is safe, which
is what automation expects. Rolling back to a revision whose settings are already the target
is the same no-op.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerUnavailable

from controlplane import audit, notify
from controlplane.access import Actor, NotFound, require_role, system_actor
from controlplane.celery import app as celery_app
from controlplane.models import Role
from controlplane.services import Conflict, ServiceError
from deployments.autoscaling.correction import Correction
from deployments.clusters import queries as cluster_queries
from deployments.clusters import services as clusters
from deployments.clusters.checks import cluster_issues
from deployments.clusters.models import Cluster, ClusterKind
from deployments.clusters.services import create_cluster, delete_cluster, update_cluster
from deployments.endpoints import fields, queries
from deployments.endpoints.models import POOL_ROLES, Deployment, DesiredState, Revision
from deployments.endpoints.queries import REVISION_FIELDS, by_id_or_slug
from deployments.endpoints.timeline import record_event
from deployments.experiments.models import CanaryStatus
from deployments.experiments.quality import gate as quality_gate
from deployments.experiments.queries import has_running_canary, running_canaries
from deployments.quotas import services as quotas
from deployments.specs import SpecInvalid, checked_spec, issue_dict
from runtime.spec import RuntimeSpec

__all__ = [
    "Conflict",
    "NotFound",
    "ServiceError",
    "SpecInvalid",
    "autoscale_to",
    "create_cluster",
    "create_deployment",
    "delete_cluster",
    "delete_deployment",
    "rollback",
    "scale",
    "start",
    "stop",
    "update_cluster",
    "update_settings",
    "wake",
]

logger = logging.getLogger(__name__)
# The task's name is the contract with deployments.endpoints.tasks, which this module never imports.
RECONCILE_TASK = "deployments.reconcile_deployment"


# --- shared steps of every change ------------------------------------------------------------


def _locked(actor: Actor, id_or_slug: uuid.UUID | str) -> Deployment:
    """The deployment, row-locked for this transaction (serialises concurrent edits)."""
    deployment = (
        Deployment.objects.select_for_update(of=("self",))
        .select_related(*REVISION_FIELDS)
        .filter(by_id_or_slug(id_or_slug), organization=actor.organization)
        .first()
    )
    if deployment is None:
        raise NotFound("endpoint not found")
    return deployment


def _ensure_not_deleting(deployment: Deployment) -> None:
    if deployment.desired_state == DesiredState.DELETED:
        raise Conflict(f"endpoint {deployment.slug} is being deleted", code="deleting")


def _queue_reconcile(deployment_id: uuid.UUID) -> None:
    transaction.on_commit(lambda: _send_reconcile(str(deployment_id)))


def _send_reconcile(deployment_id: str) -> bool:
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


def _commit_change(
    actor: Actor, deployment: Deployment, action: str, before: dict[str, Any] | None
) -> None:
    """Save the desired state, audit it, and wake the reconciler and the gateway after commit.

    The gateway is told only when what it routes by changed: ``deployment.status`` is still the
    stored one until ``save`` derives it again, and ``before`` holds the desired state as it was.
    """
    routed = None if before is None else (before["desired_state"], deployment.status)
    now = timezone.now()
    deployment.generation += 1
    deployment.next_reconcile_at = now
    deployment.updated_at = now
    deployment.save(
        update_fields=[
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
        ]
    )
    audit.record(actor, action, deployment, before=before, after=deployment.desired_snapshot())
    if routed != (deployment.desired_state, deployment.status):
        notify.publish_on_commit("deployment", str(deployment.pk))
    _queue_reconcile(deployment.pk)


# --- creating --------------------------------------------------------------------------------


def _cluster_for(actor: Actor, cluster_id: uuid.UUID | str | None) -> Cluster:
    if cluster_id is None:
        return clusters.default_cluster()
    try:
        return cluster_queries.get_cluster(actor, cluster_id)
    except NotFound as exc:
        raise ServiceError("no such cluster", field="cluster_id", code="not_found") from exc


def _cluster_warnings(cluster: Cluster, spec: RuntimeSpec, replicas: int) -> list[dict[str, Any]]:
    """The cluster's word on ``spec``: :class:`SpecInvalid` for what its operator keeps, else
    warnings (as a revision stores them) from its last observed GPU nodes."""
    if cluster.kind != ClusterKind.KUBERNETES:
        return []
    issues = cluster_issues(cluster.operator_settings, cluster.gpu_inventory, spec, replicas)
    if any(issue.is_error for issue in issues):
        raise SpecInvalid(issues)
    return [issue_dict(issue) for issue in issues]


def _new_revision(
    actor: Actor,
    deployment: Deployment,
    spec: dict[str, Any],
    spec_hash: str,
    warnings: list[dict[str, Any]],
    message: str,
    rollback_of: int | None = None,
) -> Revision:
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


@transaction.atomic
def create_deployment(
    actor: Actor,
    *,
    slug: str,
    name: str,
    spec: dict[str, Any] | RuntimeSpec,
    cluster_id: uuid.UUID | str | None = None,
    replicas: int | None = None,
    message: str = "",
    labels: dict[str, str] | None = None,
) -> Deployment:
    """A new endpoint with revision 1. Invalid settings are refused before anything is saved."""
    require_role(actor, Role.DEVELOPER)
    slug = fields.clean_slug(slug)
    labels = fields.clean_labels(labels or {})
    name = fields.clean_text(name, "name", fields.NAME_MAX_LENGTH) or slug
    message = fields.clean_text(message, "message", fields.MESSAGE_MAX_LENGTH)
    parsed, warnings = checked_spec(spec)
    fields.check_limits(parsed)
    stored = parsed.model_dump(mode="json")
    desired = (
        fields.initial_replicas(parsed)
        if replicas is None
        else fields.check_replicas(replicas, stored)
    )
    cluster = _cluster_for(actor, cluster_id)
    warnings += _cluster_warnings(cluster, parsed, desired)
    if Deployment.objects.filter(slug=slug).exists():
        raise Conflict(f"the slug {slug!r} is taken; choose another", field="slug")
    quotas.check(actor.organization, deployment=None, spec=stored, replicas=desired)
    deployment = Deployment(
        organization=actor.organization,
        slug=slug,
        name=name,
        labels=labels,
        cluster=cluster,
        created_by=actor.user if actor.user is not None else None,
        desired_replicas=desired,
    )
    try:
        with transaction.atomic():
            deployment.save()
    except IntegrityError as exc:
        raise Conflict(f"the slug {slug!r} was just taken; choose another", field="slug") from exc
    revision = _new_revision(actor, deployment, stored, parsed.content_hash(), warnings, message)
    deployment.target_revision = revision
    deployment.generation = 0  # _commit_change makes it 1
    record_event(deployment, "info", "Created", f"created by {actor.label}", revision.number)
    _commit_change(actor, deployment, "deployment.create", None)
    return deployment


# --- changing settings -------------------------------------------------------------------------


@transaction.atomic
def update_settings(
    actor: Actor,
    deployment_id: uuid.UUID | str,
    *,
    spec: dict[str, Any] | RuntimeSpec,
    base_revision: int,
    message: str = "",
    name: str | None = None,
    labels: dict[str, str] | None = None,
) -> Revision:
    """A new revision with ``spec``, made the target; Conflict when ``base_revision`` is stale.

    ``base_revision`` is the revision the caller edited (``_check_base``); if the endpoint's
    settings changed since, the caller's change is refused (409) rather than silently
    overwriting the other one.
    ``labels`` (when given) replace the endpoint's labels; they are not settings, so a change of
    labels alone makes no revision.
    """
    require_role(actor, Role.DEVELOPER)
    message = fields.clean_text(message, "message", fields.MESSAGE_MAX_LENGTH)
    new_labels = fields.clean_labels(labels) if labels is not None else None
    deployment = _locked(actor, deployment_id)
    _ensure_not_deleting(deployment)
    if has_running_canary(deployment):
        raise Conflict(
            f"endpoint {deployment.slug} has a canary running; promote or abort it before "
            "changing its settings",
            code="canary_running",
        )
    _check_base(deployment, base_revision)
    parsed, warnings = checked_spec(spec)
    fields.check_limits(parsed)
    warnings += _cluster_warnings(
        deployment.cluster, parsed, _clamp_replicas(deployment.desired_replicas, parsed)
    )
    before = deployment.desired_snapshot()
    renamed = name is not None and _rename(deployment, name)
    if new_labels is not None and new_labels != deployment.labels:
        deployment.labels = new_labels
        renamed = True  # recorded with the rename's audit action: the endpoint's plain fields
    target = deployment.target_revision
    if target is not None and parsed.content_hash() == target.spec_hash:
        if renamed:
            _commit_change(actor, deployment, "deployment.rename", before)
        return target
    _check_gate(deployment, parsed.content_hash(), "spec")
    stored = parsed.model_dump(mode="json")
    replicas = _clamp_replicas(deployment.desired_replicas, parsed)
    quotas.check(
        actor.organization, deployment=deployment, spec=stored, replicas=replicas, field="spec",
        desired_state=deployment.desired_state,
    )  # fmt: skip
    revision = _new_revision(actor, deployment, stored, parsed.content_hash(), warnings, message)
    deployment.target_revision = revision
    deployment.desired_replicas = replicas
    record_event(
        deployment, "info", "SettingsChanged", f"revision {revision.number} by {actor.label}",
        revision.number,
    )  # fmt: skip
    _commit_change(actor, deployment, "deployment.update", before)
    return revision


def _check_base(deployment: Deployment, base_revision: int) -> None:
    """Conflict unless ``base_revision`` is the target revision: the settings an edit is made
    against are the ones the endpoint reports (its ``target_revision`` and that revision's spec).

    The newest revision number is not the base: a canary's revision is never the target unless
    promoted, so an aborted one would stay newest for ever and refuse every edit. The check is
    sound because the target's number only grows: edits and rollbacks make a new newest revision
    the target, a promote makes the canary's (created after the target, and nothing else may
    change the target while it runs), and nothing sets an older one again.
    """
    target = deployment.target_revision.number if deployment.target_revision else 0
    if base_revision == target:
        return
    if base_revision < target:
        why = f"revision {target} was saved after revision {base_revision}, which you edited"
    else:
        why = f"revision {base_revision} is not the endpoint's settings (revision {target} is)"
    raise Conflict(
        f"{why}; reload the settings and apply your change again",
        field="base_revision",
        code="revision_conflict",
    )


def _rename(deployment: Deployment, name: str) -> bool:
    name = fields.clean_text(name, "name", fields.NAME_MAX_LENGTH, required=True)
    changed = name != deployment.name
    deployment.name = name
    return changed


def _clamp_replicas(replicas: int, spec: RuntimeSpec) -> int:
    if replicas == 0:
        return 0  # scaled to zero stays so; the gateway wakes it
    return max(spec.autoscaling.min_replicas, min(replicas, spec.autoscaling.max_replicas))


@transaction.atomic
def rollback(
    actor: Actor, deployment_id: uuid.UUID | str, *, to_revision: int, message: str = ""
) -> Revision:
    """A new revision whose settings equal revision ``to_revision``'s, made the target."""
    require_role(actor, Role.DEVELOPER)
    message = fields.clean_text(message, "message", fields.MESSAGE_MAX_LENGTH)
    deployment = _locked(actor, deployment_id)
    _ensure_not_deleting(deployment)
    source = deployment.revisions.filter(number=to_revision).first()
    if source is None:
        raise ServiceError(
            f"revision {to_revision} does not exist", field="to_revision", code="not_found"
        )
    target = deployment.target_revision
    if target is None or source.spec_hash != target.spec_hash:
        _check_gate(deployment, source.spec_hash, "to_revision")
    before = deployment.desired_snapshot()
    canary_ended = _end_canary_for_rollback(deployment, actor, to_revision)
    if target is not None and source.spec_hash == target.spec_hash:
        if canary_ended:  # back to the serving revision alone: reconcile removes the canary
            _commit_change(actor, deployment, "deployment.rollback", before)
        return target
    quotas.check(
        actor.organization, deployment=deployment, spec=source.spec,
        replicas=deployment.desired_replicas, field="to_revision",
        desired_state=deployment.desired_state,
    )  # fmt: skip
    revision = _new_revision(
        actor,
        deployment,
        source.spec,
        source.spec_hash,
        source.warnings,
        message or f"roll back to revision {to_revision}",
        rollback_of=to_revision,
    )
    deployment.target_revision = revision
    record_event(
        deployment, "info", "RolledBack",
        f"revision {revision.number} restores revision {to_revision} ({actor.label})",
        revision.number,
    )  # fmt: skip
    _commit_change(actor, deployment, "deployment.rollback", before)
    return revision


def _check_gate(deployment: Deployment, spec_hash: str, field: str) -> None:
    """Settings whose quality gate has not passed never become the target outside a canary
    (an admin's override lets them): ``deployments.experiments.quality.gate``."""
    why = quality_gate.refusal_for_spec(deployment, spec_hash)
    if why:
        raise Conflict(
            f"{why}; an admin may override the gate with a reason", field=field,
            code="gate_refused",
        )  # fmt: skip


def _end_canary_for_rollback(deployment: Deployment, actor: Actor, to_revision: int) -> bool:
    """A rollback stays one step while a canary runs: the canary is aborted with it (its pool
    goes in the same reconcile pass that rolls back)."""
    ended = running_canaries(deployment).update(
        status=CanaryStatus.ABORTED,
        reason=f"the endpoint was rolled back to revision {to_revision} by {actor.label}",
        ended_at=timezone.now(),
    )
    if ended:
        record_event(
            deployment, "warning", "CanaryAborted",
            f"canary aborted: the endpoint was rolled back to revision {to_revision}",
        )  # fmt: skip
        notify.publish_on_commit("deployment", str(deployment.pk))
    return bool(ended)


# --- replicas and lifecycle ----------------------------------------------------------------------


@transaction.atomic
def scale(actor: Actor, deployment_id: uuid.UUID | str, *, replicas: int) -> Deployment:
    require_role(actor, Role.DEVELOPER)
    deployment = _locked(actor, deployment_id)
    _ensure_not_deleting(deployment)
    assert deployment.target_revision is not None
    fields.check_replicas(replicas, deployment.target_revision.spec)
    if replicas == deployment.desired_replicas:
        return deployment
    quotas.check(
        actor.organization, deployment=deployment, spec=deployment.target_revision.spec,
        replicas=replicas, desired_state=deployment.desired_state,
    )  # fmt: skip
    before = deployment.desired_snapshot()
    deployment.desired_replicas = replicas
    deployment.last_scaled_at = timezone.now()  # the autoscaler's cool-down starts again
    record_event(deployment, "info", "Scaled", f"{before['desired_replicas']} -> {replicas} "
                 f"replicas by {actor.label}", data={"replicas": replicas})  # fmt: skip
    _commit_change(actor, deployment, "deployment.scale", before)
    return deployment


def _set_state(actor: Actor, deployment_id: uuid.UUID | str, state: str, reason: str) -> Deployment:
    require_role(actor, Role.DEVELOPER)
    deployment = _locked(actor, deployment_id)
    _ensure_not_deleting(deployment)
    if deployment.desired_state == state:
        return deployment
    before = deployment.desired_snapshot()
    replicas = deployment.desired_replicas
    if state == DesiredState.RUNNING:
        assert deployment.target_revision is not None
        if replicas == 0:
            spec = RuntimeSpec.model_validate(deployment.target_revision.spec)
            replicas = max(1, spec.autoscaling.min_replicas)
        quotas.check(
            actor.organization, deployment=deployment, spec=deployment.target_revision.spec,
            replicas=replicas, field="desired_state",
        )  # fmt: skip
    deployment.desired_state = state
    deployment.desired_replicas = replicas
    record_event(deployment, "info", reason, f"{reason.lower()} by {actor.label}")
    action = "deployment.delete" if state == DesiredState.DELETED else f"deployment.{state}"
    _commit_change(actor, deployment, action, before)
    return deployment


@transaction.atomic
def stop(actor: Actor, deployment_id: uuid.UUID | str) -> Deployment:
    return _set_state(actor, deployment_id, DesiredState.STOPPED, "Stopped")


@transaction.atomic
def start(actor: Actor, deployment_id: uuid.UUID | str) -> Deployment:
    return _set_state(actor, deployment_id, DesiredState.RUNNING, "Started")


@transaction.atomic
def delete_deployment(actor: Actor, deployment_id: uuid.UUID | str) -> Deployment:
    """Mark for deletion; reconcile tears the endpoint down and removes the row."""
    require_role(actor, Role.DEVELOPER)
    deployment = queries.get_deployment(actor, deployment_id)
    if deployment.desired_state == DesiredState.DELETED:
        return deployment
    return _set_state(actor, deployment_id, DesiredState.DELETED, "DeleteRequested")


@transaction.atomic
def wake(deployment_id: uuid.UUID | str) -> bool:
    """Scale a scaled-to-zero endpoint back up (system: the gateway saw a request). Idempotent.

    True when this call woke it; False when it was already awake, stopped or deleted.
    """
    deployment = (
        Deployment.objects.select_for_update(of=("self",))
        .select_related("organization", *REVISION_FIELDS)
        .filter(pk=deployment_id)
        .first()
    )
    if deployment is None or deployment.desired_state != DesiredState.RUNNING:
        return False
    if deployment.desired_replicas > 0 or deployment.target_revision is None:
        return False
    spec = RuntimeSpec.model_validate(deployment.target_revision.spec)
    replicas = max(1, spec.autoscaling.min_replicas)
    try:
        quotas.check(
            deployment.organization, deployment=deployment,
            spec=deployment.target_revision.spec, replicas=replicas,
        )  # fmt: skip
    except quotas.QuotaExceeded as exc:
        _record_quota_hold(deployment, "ScaleFromZeroRefused", exc)
        return False
    before = deployment.desired_snapshot()
    deployment.desired_replicas = replicas
    deployment.last_scaled_at = timezone.now()
    _wake_pools(deployment, spec)
    record_event(deployment, "info", "ScaleFromZero",
                 f"a request arrived; scaling to {deployment.desired_replicas}",
                 data={"replicas": deployment.desired_replicas})  # fmt: skip
    _commit_change(system_actor(deployment.organization), deployment, "deployment.wake", before)
    return True


def _wake_pools(deployment: Deployment, spec: RuntimeSpec) -> None:
    """A split endpoint coming back from zero: each pool the autoscaler sizes starts at its
    ``min_replicas`` (as a single-pool endpoint wakes at ``max(1, min_replicas)``), a pool
    without bounds at its settings' size; the sizes it had before going to zero are not kept."""
    revision = deployment.target_revision
    if revision is None or not spec.disaggregation.enabled:
        return
    sizes = {}
    for role in POOL_ROLES:
        bounds = spec.autoscaling.pool_bounds(role)
        pool = spec.disaggregation.prefill if role == "prefill" else spec.disaggregation.decode
        sizes[role] = bounds.min_replicas if bounds is not None else pool.replicas
    stamp = deployment.last_scaled_at or timezone.now()
    deployment.pool_replicas = {
        "revision": revision.number,
        **sizes,
        "scaled_at": {role: stamp.isoformat() for role in POOL_ROLES},
    }


def _record_quota_hold(
    deployment: Deployment, reason: str, exc: quotas.QuotaExceeded, wanted: int | None = None
) -> None:
    """A warning on the timeline that a system ask stopped at a quota, once per hold: the
    autoscaler asks again every pass, and the same refusal need not be recorded each time."""
    data = {
        "quota": exc.quota, "limit": exc.limit, "in_use": exc.in_use,
        "requested": exc.requested, "replicas": deployment.desired_replicas, "wanted": wanted,
    }  # fmt: skip
    last = deployment.events.order_by("-id").values_list("reason", "data").first()
    if last == (reason, data):
        return
    record_event(deployment, "warning", reason, exc.message, data=data)


@transaction.atomic
def autoscale_to(
    deployment_id: uuid.UUID | str,
    replicas: int,
    reason: str,
    inputs: dict[str, Any],
    *,
    expected: int | None = None,
) -> bool:
    """Set the replica count the autoscaler decided (system). True when it changed.

    ``expected`` is the count the decision started from: if a person scaled meanwhile, theirs
    wins and nothing changes. Stopped, deleted or rolling-out endpoints are left alone.
    """
    deployment = (
        Deployment.objects.select_for_update(of=("self",))
        .select_related("organization", *REVISION_FIELDS)
        .filter(pk=deployment_id, desired_state=DesiredState.RUNNING, rollout_started_at=None)
        .first()
    )
    if deployment is None or deployment.target_revision is None:
        return False
    if expected is not None and deployment.desired_replicas != expected:
        return False
    fields.check_replicas(replicas, deployment.target_revision.spec)
    if replicas > deployment.desired_replicas:
        # The autoscaler stops at the quota: as far as it allows, and the reason on record.
        allowed, held = quotas.headroom(deployment, replicas)
        if held is not None:
            _record_quota_hold(deployment, "QuotaLimited", held, wanted=replicas)
            if allowed == deployment.desired_replicas:
                return False
            reason = f"{reason}; held at {allowed} by quota {held.quota}"
            replicas = allowed
    if replicas == deployment.desired_replicas:
        return False
    before = deployment.desired_snapshot()
    deployment.desired_replicas = replicas
    deployment.last_scaled_at = timezone.now()
    if before["desired_replicas"] == 0:
        _wake_pools(deployment, RuntimeSpec.model_validate(deployment.target_revision.spec))
    data = {"replicas": replicas, "from": before["desired_replicas"], "inputs": inputs}
    record_event(deployment, "info", "Autoscaled", reason, data=data)
    actor = system_actor(deployment.organization)
    _commit_change(actor, deployment, "deployment.autoscale", before)
    return True


MODEL_CORRECTED = "ModelCorrected"


def record_model_correction(
    deployment_id: uuid.UUID | str,
    revision_number: int,
    correction: Correction,
    inputs: dict[str, Any],
) -> bool:
    """The SLO policy moved a role's performance-model correction (system): a ``ModelCorrected``
    event with the corrections before and after, the fit and the decision's inputs; the next
    pass starts from it (``tasks.scaling`` reads the latest per role). False when the endpoint
    is gone."""
    deployment = Deployment.objects.filter(pk=deployment_id).first()
    if deployment is None:
        return False
    data = {
        "role": correction.role,
        "correction": dict(correction.after),
        "from": dict(correction.before),
        "fitted": dict(correction.fitted),
        "inputs": inputs,
    }
    record_event(deployment, "info", MODEL_CORRECTED, correction.message, revision_number, data)
    return True


@transaction.atomic
def autoscale_pool_to(
    deployment_id: uuid.UUID | str,
    pool: str,
    replicas: int,
    reason: str,
    inputs: dict[str, Any],
    *,
    expected: int | None = None,
) -> bool:
    """Set the size of a split endpoint's ``pool`` ("prefill" or "decode") that the autoscaler
    decided (system), for the target revision. True when it changed.

    As ``autoscale_to``: a stale decision (``expected`` is not the pool's size now) changes
    nothing, nor does one for a stopped, deleted or rolling-out endpoint; a step up stops at
    the quota (the other pool's size counted as it is) with ``QuotaLimited`` on record.
    """
    deployment = (
        Deployment.objects.select_for_update(of=("self",))
        .select_related("organization", *REVISION_FIELDS)
        .filter(pk=deployment_id, desired_state=DesiredState.RUNNING, rollout_started_at=None)
        .first()
    )
    if deployment is None or deployment.target_revision is None or pool not in POOL_ROLES:
        return False
    revision = deployment.target_revision
    if not (revision.spec.get("disaggregation") or {}).get("enabled"):
        return False
    sizes = deployment.pool_sizes(revision.number, revision.spec)
    current = sizes[pool]
    if expected is not None and current != expected:
        return False
    if replicas < 1 or replicas > fields.MAX_REPLICAS:
        raise ServiceError(
            f"a pool runs between 1 and {fields.MAX_REPLICAS} replicas", field="replicas",
            code="out_of_range",
        )  # fmt: skip
    if replicas > current:
        allowed, held = _pool_headroom(deployment, sizes, pool, replicas)
        if held is not None:
            _record_quota_hold(deployment, "QuotaLimited", held, wanted=replicas)
            if allowed == current:
                return False
            reason = f"{reason}; held at {allowed} by quota {held.quota}"
            replicas = allowed
    if replicas == current:
        return False
    before = {**deployment.desired_snapshot(), "pools": sizes}
    now = timezone.now()
    scaled = deployment.pool_replicas or {}
    stamps = scaled.get("scaled_at") if scaled.get("revision") == revision.number else None
    deployment.pool_replicas = {
        "revision": revision.number,
        **sizes,
        pool: replicas,
        "scaled_at": {**(stamps or {}), pool: now.isoformat()},
    }
    data = {"pool": pool, "replicas": replicas, "from": current, "inputs": inputs}
    record_event(deployment, "info", "Autoscaled", reason, revision.number, data=data)
    _commit_change(
        system_actor(deployment.organization), deployment, "deployment.autoscale_pool", before
    )
    return True


def _pool_headroom(
    deployment: Deployment, sizes: dict[str, int], pool: str, wanted: int
) -> tuple[int, quotas.QuotaExceeded | None]:
    """The largest size of ``pool`` up to ``wanted`` the quotas allow (never below its size
    now), and the quota that stopped it short: ``quotas.check`` on the settings with the pools
    at their new sizes. Steps are small (at most doubling), so sizes are tried downwards."""
    assert deployment.target_revision is not None
    spec = deployment.target_revision.spec
    refusal: quotas.QuotaExceeded | None = None
    for size in range(wanted, sizes[pool], -1):
        split = {**spec["disaggregation"]}
        for role, count in {**sizes, pool: size}.items():
            split[role] = {**(split.get(role) or {}), "replicas": count}
        try:
            quotas.check(
                deployment.organization, deployment=deployment,
                spec={**spec, "disaggregation": split}, replicas=deployment.desired_replicas,
            )  # fmt: skip
        except quotas.QuotaExceeded as exc:
            refusal = refusal or exc
            continue
        return size, refusal
    return sizes[pool], refusal
