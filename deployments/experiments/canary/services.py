"""The writers of canaries: start, promote, abort (a person's, or the watcher's automatic abort).

Same contract as ``deployments.endpoints.services``, and the same change kernel
(``deployments.endpoints.changes``): one transaction on the endpoint's row lock, the actor's role
checked, a timeline line, then ``commit_change``: one AuditEvent (the canary in it), the
generation bumped so reconcile acts (it starts or removes the canary's pool), the gateway always
told after commit (its split starts or stops).

Starting makes a new revision that is *not* the target: the endpoint's target stays the serving
revision (the baseline) and the canary runs as a second pool beside it, so an edit's base stays
the target's number too (``base_revision`` of ``deployments.endpoints.services.update_settings``):
an aborted canary's revision is history, not newer settings to edit from. Promoting makes the
canary's revision the target, which reconcile rolls out as any settings change (surge, no
dropped requests); the canary's own pool is removed at once. Aborting leaves the target as it
was and removes the canary's pool: rolling back a canary is that one step.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane.access import Actor, require_role, system_actor
from controlplane.models import Role
from controlplane.services import Conflict, ServiceError
from deployments.endpoints import changes, fields
from deployments.endpoints.models import Deployment, DesiredState
from deployments.endpoints.timeline import record_event
from deployments.experiments.canary.rules import (
    MAX_WEIGHT,
    MIN_WEIGHT,
    Thresholds,
    Verdict,
    gate_allows,
    gate_refusal,
)
from deployments.experiments.models import Canary, CanaryStatus
from deployments.experiments.queries import has_running_canary, running_canary
from deployments.quotas import services as quotas
from deployments.specs import checked_spec
from runtime.spec import RuntimeSpec

__all__ = ["abort_automatically", "abort_canary", "promote_canary", "start_canary"]


def _require_running(deployment: Deployment) -> Canary:
    canary = running_canary(deployment)
    if canary is None:
        raise Conflict(f"endpoint {deployment.slug} has no canary running", code="no_canary")
    return canary


def _check_weight(weight: object) -> int:
    if isinstance(weight, bool) or not isinstance(weight, int):
        raise ServiceError("weight must be a whole number of percent", field="weight")
    if not MIN_WEIGHT <= weight <= MAX_WEIGHT:
        raise ServiceError(
            f"weight must be between {MIN_WEIGHT} and {MAX_WEIGHT} percent; promote the canary "
            "to send it all traffic",
            field="weight",
            code="out_of_range",
        )
    return weight


def check_thresholds(thresholds: Thresholds) -> Thresholds:
    """The thresholds, or a ServiceError naming the first one out of its range."""
    rules: tuple[tuple[str, float, float, float], ...] = (
        ("max_error_rate_delta", thresholds.max_error_rate_delta, 0.0, 1.0),
        ("max_ttft_p90_ratio", thresholds.max_ttft_p90_ratio, 1.0, 100.0),
        ("max_itl_p90_ratio", thresholds.max_itl_p90_ratio, 1.0, 100.0),
        ("window_s", thresholds.window_s, 10, 6 * 3600),  # canary_watch keeps 6 h
        ("min_requests", thresholds.min_requests, 1, 1_000_000),
    )
    for name, value, low, high in rules:
        if not low <= value <= high:
            raise ServiceError(
                f"{name} must be between {low:g} and {high:g}",
                field=f"thresholds.{name}",
                code="out_of_range",
            )
    return thresholds


def _snapshot(canary: Canary | None) -> dict[str, Any] | None:
    if canary is None:
        return None
    return {
        "revision": canary.revision.number,
        "baseline_revision": canary.baseline_revision.number,
        "weight": canary.weight,
        "sticky": canary.sticky,
        "status": canary.status,
    }


@transaction.atomic
def start_canary(
    actor: Actor,
    deployment_id: uuid.UUID | str,
    *,
    spec: dict[str, Any] | RuntimeSpec,
    weight: int,
    sticky: bool = False,
    replicas: int = 1,
    thresholds: Thresholds | None = None,
    message: str = "",
) -> Canary:
    """A new revision with ``spec`` run beside the serving one on ``weight`` percent of the
    requests. Refused while the endpoint is not serving, rolling out, or already canarying."""
    require_role(actor, Role.DEVELOPER)
    weight = _check_weight(weight)
    limits = check_thresholds(thresholds or Thresholds())
    message = fields.clean_text(message, "message", fields.MESSAGE_MAX_LENGTH)
    deployment = changes.locked(actor, deployment_id)
    changes.ensure_not_deleting(deployment)
    baseline = deployment.current_revision
    if deployment.desired_state != DesiredState.RUNNING or baseline is None:
        raise Conflict(
            f"endpoint {deployment.slug} is not serving; a canary needs a serving revision",
            code="not_serving",
        )
    if deployment.target_revision_id != baseline.pk:
        raise Conflict(
            f"endpoint {deployment.slug} is rolling out revision "
            f"{deployment.target_revision.number if deployment.target_revision else '?'}; "
            "wait for it to finish",
            code="rollout_in_progress",
        )
    if has_running_canary(deployment):
        raise Conflict(
            f"endpoint {deployment.slug} already has a canary running; promote or abort it",
            code="canary_running",
        )
    parsed, warnings = checked_spec(spec)
    fields.check_limits(parsed)
    stored = parsed.model_dump(mode="json")
    if parsed.content_hash() == baseline.spec_hash:
        raise ServiceError(
            "the canary's settings are those of the serving revision; change something",
            field="spec",
            code="unchanged",
        )
    fields.check_replicas(replicas, stored)
    if replicas < 1:
        raise ServiceError("a canary runs at least 1 replica", field="replicas")
    warnings += changes.cluster_warnings(deployment.cluster, parsed, replicas)
    quotas.check_canary(deployment, stored, replicas)
    revision = changes.new_revision(
        actor,
        deployment,
        stored,
        parsed.content_hash(),
        warnings,
        message or f"canary at {weight}%",
    )
    canary = Canary.objects.create(
        deployment=deployment, revision=revision, baseline_revision=baseline, weight=weight,
        sticky=bool(sticky), replicas=replicas, started_by=actor.label, **asdict(limits),
    )  # fmt: skip
    record_event(
        deployment, "info", "CanaryStarted",
        f"revision {revision.number} canary at {weight}% beside revision {baseline.number}"
        f"{' (sticky per conversation)' if sticky else ''} by {actor.label}",
        revision.number, data={"weight": weight, "baseline": baseline.number},
    )  # fmt: skip
    changes.commit_change(
        actor,
        deployment,
        "deployment.canary.start",
        deployment.desired_snapshot(),
        extra={"canary": _snapshot(canary)},
        routes_changed=True,  # the gateway's split starts
    )
    return canary


@transaction.atomic
def promote_canary(actor: Actor, deployment_id: uuid.UUID | str, *, message: str = "") -> Canary:
    """The canary's revision becomes the target (rolled out in full); its own pool goes."""
    require_role(actor, Role.DEVELOPER)
    message = fields.clean_text(message, "message", fields.MESSAGE_MAX_LENGTH)
    deployment = changes.locked(actor, deployment_id)
    changes.ensure_not_deleting(deployment)
    canary = _require_running(deployment)
    if not gate_allows(canary):
        raise Conflict(
            f"{gate_refusal(canary)}; abort the canary, or an admin may override the gate",
            code="gate_refused",
        )
    spec = RuntimeSpec.model_validate(canary.revision.spec)
    replicas = changes.clamp_replicas(deployment.desired_replicas, spec)
    quotas.check(
        actor.organization, deployment=deployment, spec=canary.revision.spec, replicas=replicas,
        field="canary", desired_state=deployment.desired_state,
    )  # fmt: skip
    before = {**deployment.desired_snapshot(), "canary": _snapshot(canary)}
    _end(canary, CanaryStatus.PROMOTED, message or f"promoted by {actor.label}")
    deployment.target_revision = canary.revision
    deployment.desired_replicas = replicas
    record_event(
        deployment, "info", "CanaryPromoted",
        f"revision {canary.revision.number} promoted by {actor.label}; rolling it out to every "
        f"replica (revision {canary.baseline_revision.number} retires once it serves)",
        canary.revision.number,
    )  # fmt: skip
    changes.commit_change(
        actor,
        deployment,
        "deployment.canary.promote",
        before,
        extra={"canary": _snapshot(canary)},
        routes_changed=True,  # the gateway's split stops
    )
    return canary


@transaction.atomic
def abort_canary(actor: Actor, deployment_id: uuid.UUID | str, *, reason: str = "") -> Canary:
    """Stop sending the canary traffic and remove its pool; the target is unchanged."""
    require_role(actor, Role.DEVELOPER)
    reason = fields.clean_text(reason, "reason", fields.MESSAGE_MAX_LENGTH)
    deployment = changes.locked(actor, deployment_id)
    canary = _require_running(deployment)
    why = reason or f"aborted by {actor.label}"
    _abort(actor, deployment, canary, why, "warning", {})
    return canary


@transaction.atomic
def abort_automatically(
    canary_id: uuid.UUID | str, verdict: Verdict, *, message: str | None = None
) -> bool:
    """The watcher's abort (system): True when this call aborted a still-running canary.

    ``message`` says why when it is not the verdict's regression (a pool never ready)."""
    owner = Canary.objects.filter(pk=canary_id).values_list("deployment_id", flat=True).first()
    if owner is None:
        return False
    # The endpoint's row first, as every writer locks it: then the canary, still running?
    deployment = (
        Deployment.objects.select_for_update(of=("self",))
        .select_related("organization")
        .get(pk=owner)
    )
    canary = running_canary(deployment)
    if canary is None or str(canary.pk) != str(canary_id):
        return False
    data = {
        "automatic": True,
        "reasons": list(verdict.reasons),
        "canary": verdict.canary.as_dict(),
        "baseline": verdict.baseline.as_dict(),
        "window_s": canary.window_s,
    }
    why = message or f"regressed over the last {canary.window_s} s: {verdict.message}"
    _abort(system_actor(deployment.organization), deployment, canary, why, "error", data)
    return True


def _abort(
    actor: Actor,
    deployment: Deployment,
    canary: Canary,
    why: str,
    level: str,
    data: dict[str, Any],
) -> None:
    before = {**deployment.desired_snapshot(), "canary": _snapshot(canary)}
    _end(canary, CanaryStatus.ABORTED, why)
    record_event(
        deployment, level, "CanaryAborted",
        f"revision {canary.revision.number} canary aborted: {why}; revision "
        f"{canary.baseline_revision.number} serves all requests",
        canary.revision.number, data=data,
    )  # fmt: skip
    changes.commit_change(
        actor,
        deployment,
        "deployment.canary.abort",
        before,
        extra={"canary": _snapshot(canary)},
        routes_changed=True,  # the gateway's split stops
    )


def _end(canary: Canary, status: str, reason: str) -> None:
    canary.status = status
    canary.reason = reason
    canary.ended_at = timezone.now()
    canary.save(update_fields=["status", "reason", "ended_at"])
