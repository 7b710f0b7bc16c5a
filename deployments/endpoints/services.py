"""The writers of what people ask of an endpoint: create, edit, roll back, scale, stop, start,
delete. Reads are ``deployments.endpoints.queries``', never re-exported here.

Each writer runs in one transaction on the endpoint's row lock, checks the actor's role, scopes
every query to the actor's organization (objects of other organizations are :class:`NotFound`),
records a timeline line and commits through ``deployments.endpoints.changes.commit_change``: one
AuditEvent, ``Deployment.generation`` bumped, the endpoint made due and reconcile sent after
commit. Every write of what is asked commits there: these writers, the canary's
(``deployments.experiments.canary.services``) and the system's scale asks
(``deployments.autoscaling.services``). Observed facts are reconcile's and probe's to write,
never a writer's.

Editing to settings identical to the target revision's is a no-op that returns the target
revision (no new revision, no rollout): applying the same configuration twice is safe, which
is what automation expects. Rolling back to a revision whose settings are already the target
is the same no-op.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from controlplane import notify
from controlplane.access import Actor, NotFound, require_role
from controlplane.models import Role
from controlplane.services import Conflict, ServiceError
from deployments.endpoints import changes, fields, queries
from deployments.endpoints.models import Deployment, DesiredState, Revision
from deployments.endpoints.timeline import record_event
from deployments.experiments.models import CanaryStatus
from deployments.experiments.quality import gate as quality_gate
from deployments.experiments.queries import has_running_canary, running_canaries
from deployments.fleet.models import Placement
from deployments.quotas import services as quotas
from deployments.specs import SpecInvalid, checked_spec
from runtime.spec import RuntimeSpec

__all__ = [
    "Conflict",
    "NotFound",
    "ServiceError",
    "SpecInvalid",
    "create_deployment",
    "delete_deployment",
    "rollback",
    "scale",
    "start",
    "stop",
    "update_settings",
]


# --- creating --------------------------------------------------------------------------------


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
    cluster = changes.cluster_for(actor, cluster_id)
    warnings += changes.cluster_warnings(cluster, parsed, desired)
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
    # Every endpoint runs on its home cluster at least (``deployments.fleet``).
    Placement.objects.create(deployment=deployment, cluster=cluster)
    revision = changes.new_revision(
        actor, deployment, stored, parsed.content_hash(), warnings, message
    )
    deployment.target_revision = revision
    deployment.generation = 0  # commit_change makes it 1
    record_event(deployment, "info", "Created", f"created by {actor.label}", revision.number)
    changes.commit_change(actor, deployment, "deployment.create", None)
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
    deployment = changes.locked(actor, deployment_id)
    changes.ensure_not_deleting(deployment)
    if has_running_canary(deployment):
        raise Conflict(
            f"endpoint {deployment.slug} has a canary running; promote or abort it before "
            "changing its settings",
            code="canary_running",
        )
    _check_base(deployment, base_revision)
    parsed, warnings = checked_spec(spec)
    fields.check_limits(parsed)
    warnings += changes.cluster_warnings(
        deployment.cluster, parsed, changes.clamp_replicas(deployment.desired_replicas, parsed)
    )
    before = deployment.desired_snapshot()
    renamed = name is not None and _rename(deployment, name)
    if new_labels is not None and new_labels != deployment.labels:
        deployment.labels = new_labels
        renamed = True  # recorded with the rename's audit action: the endpoint's plain fields
    target = deployment.target_revision
    if target is not None and parsed.content_hash() == target.spec_hash:
        if renamed:
            changes.commit_change(actor, deployment, "deployment.rename", before)
        return target
    _check_gate(deployment, parsed.content_hash(), "spec")
    stored = parsed.model_dump(mode="json")
    replicas = changes.clamp_replicas(deployment.desired_replicas, parsed)
    quotas.check(
        actor.organization,
        deployment=deployment,
        spec=stored,
        replicas=replicas,
        field="spec",
        desired_state=deployment.desired_state,
    )
    revision = changes.new_revision(
        actor, deployment, stored, parsed.content_hash(), warnings, message
    )
    deployment.target_revision = revision
    deployment.desired_replicas = replicas
    record_event(
        deployment,
        "info",
        "SettingsChanged",
        f"revision {revision.number} by {actor.label}",
        revision.number,
    )
    changes.commit_change(actor, deployment, "deployment.update", before)
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


@transaction.atomic
def rollback(
    actor: Actor, deployment_id: uuid.UUID | str, *, to_revision: int, message: str = ""
) -> Revision:
    """A new revision whose settings equal revision ``to_revision``'s, made the target."""
    require_role(actor, Role.DEVELOPER)
    message = fields.clean_text(message, "message", fields.MESSAGE_MAX_LENGTH)
    deployment = changes.locked(actor, deployment_id)
    changes.ensure_not_deleting(deployment)
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
            changes.commit_change(actor, deployment, "deployment.rollback", before)
        return target
    quotas.check(
        actor.organization,
        deployment=deployment,
        spec=source.spec,
        replicas=deployment.desired_replicas,
        field="to_revision",
        desired_state=deployment.desired_state,
    )
    revision = changes.new_revision(
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
        deployment,
        "info",
        "RolledBack",
        f"revision {revision.number} restores revision {to_revision} ({actor.label})",
        revision.number,
    )
    changes.commit_change(actor, deployment, "deployment.rollback", before)
    return revision


def _check_gate(deployment: Deployment, spec_hash: str, field: str) -> None:
    """Settings whose quality gate has not passed never become the target outside a canary
    (an admin's override lets them): ``deployments.experiments.quality.gate``."""
    why = quality_gate.refusal_for_spec(deployment, spec_hash)
    if why:
        raise Conflict(
            f"{why}; an admin may override the gate with a reason",
            field=field,
            code="gate_refused",
        )


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
            deployment,
            "warning",
            "CanaryAborted",
            f"canary aborted: the endpoint was rolled back to revision {to_revision}",
        )
        notify.publish_on_commit("deployment", str(deployment.pk))
    return bool(ended)


# --- replicas and lifecycle ----------------------------------------------------------------------


@transaction.atomic
def scale(actor: Actor, deployment_id: uuid.UUID | str, *, replicas: int) -> Deployment:
    require_role(actor, Role.DEVELOPER)
    deployment = changes.locked(actor, deployment_id)
    changes.ensure_not_deleting(deployment)
    assert deployment.target_revision is not None
    fields.check_replicas(replicas, deployment.target_revision.spec)
    if replicas == deployment.desired_replicas:
        return deployment
    quotas.check(
        actor.organization,
        deployment=deployment,
        spec=deployment.target_revision.spec,
        replicas=replicas,
        desired_state=deployment.desired_state,
    )
    before = deployment.desired_snapshot()
    deployment.desired_replicas = replicas
    deployment.last_scaled_at = timezone.now()  # the autoscaler's cool-down starts again
    record_event(
        deployment,
        "info",
        "Scaled",
        f"{before['desired_replicas']} -> {replicas} replicas by {actor.label}",
        data={"replicas": replicas},
    )
    changes.commit_change(actor, deployment, "deployment.scale", before)
    return deployment


def _set_state(actor: Actor, deployment_id: uuid.UUID | str, state: str, reason: str) -> Deployment:
    require_role(actor, Role.DEVELOPER)
    deployment = changes.locked(actor, deployment_id)
    changes.ensure_not_deleting(deployment)
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
            actor.organization,
            deployment=deployment,
            spec=deployment.target_revision.spec,
            replicas=replicas,
            field="desired_state",
        )
    deployment.desired_state = state
    deployment.desired_replicas = replicas
    record_event(deployment, "info", reason, f"{reason.lower()} by {actor.label}")
    action = "deployment.delete" if state == DesiredState.DELETED else f"deployment.{state}"
    changes.commit_change(actor, deployment, action, before)
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
