"""The system's scale asks: waking an endpoint at zero (the gateway saw a request), the
autoscaler's replica counts for an endpoint or one of a split endpoint's pools, and the SLO
policy's model corrections on the timeline.

Each ask is the system's (``controlplane.access.system_actor``), not a person's: no role is
checked, and a person's change wins over a stale ask (``expected`` is the count the decision
started from). Each ask that changes the replica count runs in one transaction on the
endpoint's row lock and commits through ``deployments.endpoints.changes.commit_change``, as every
writer of what is asked does; a step up stops at the organization's quota, with the refusal on
the timeline once per hold. A model correction changes nothing that is asked: it is a timeline
line the next pass starts from.

On an endpoint placed on several clusters a count is the endpoint's; its placement policy
splits it (``deployments.fleet.placing.split``, as the next reconcile pass plans it), and the
timeline line says how: scale to zero is zero everywhere, a wake-up starts where the policy
and the clusters' minimums say.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane.access import system_actor
from controlplane.services import ServiceError
from deployments.autoscaling.correction import MODEL_CORRECTED, Correction
from deployments.endpoints import changes, fields
from deployments.endpoints.models import POOL_ROLES, Deployment, DesiredState
from deployments.endpoints.queries import REVISION_FIELDS
from deployments.endpoints.timeline import record_event
from deployments.fleet import placing
from deployments.quotas import services as quotas
from runtime.spec import RuntimeSpec

__all__ = [
    "autoscale_pool_to",
    "autoscale_to",
    "record_model_correction",
    "wake",
]


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
            deployment.organization,
            deployment=deployment,
            spec=deployment.target_revision.spec,
            replicas=replicas,
        )
    except quotas.QuotaExceeded as exc:
        _record_quota_hold(deployment, "ScaleFromZeroRefused", exc)
        return False
    before = deployment.desired_snapshot()
    deployment.desired_replicas = replicas
    deployment.last_scaled_at = timezone.now()
    _wake_pools(deployment, spec)
    clusters = placing.split(deployment, replicas)  # by the placement policy
    record_event(
        deployment,
        "info",
        "ScaleFromZero",
        f"a request arrived; scaling to {replicas}{placing.described(clusters)}",
        data={"replicas": replicas, **({"clusters": clusters} if clusters else {})},
    )
    changes.commit_change(
        system_actor(deployment.organization), deployment, "deployment.wake", before
    )
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
        "quota": exc.quota,
        "limit": exc.limit,
        "in_use": exc.in_use,
        "requested": exc.requested,
        "replicas": deployment.desired_replicas,
        "wanted": wanted,
    }
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
    # The decision is the endpoint's; the placement policy splits it over its clusters.
    clusters = placing.split(deployment, replicas)
    if clusters:
        data["clusters"] = clusters
    record_event(deployment, "info", "Autoscaled", reason + placing.described(clusters), data=data)
    actor = system_actor(deployment.organization)
    changes.commit_change(actor, deployment, "deployment.autoscale", before)
    return True


def record_model_correction(
    deployment_id: uuid.UUID | str,
    revision_number: int,
    correction: Correction,
    inputs: dict[str, Any],
) -> bool:
    """The SLO policy moved a role's performance-model correction (system): a ``ModelCorrected``
    event with the corrections before and after, the fit and the decision's inputs; the next
    pass starts from it (the autoscaler's inputs read the latest per role). False when the
    endpoint is gone."""
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
            f"a pool runs between 1 and {fields.MAX_REPLICAS} replicas",
            field="replicas",
            code="out_of_range",
        )
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
    changes.commit_change(
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
                deployment.organization,
                deployment=deployment,
                spec={**spec, "disaggregation": split},
                replicas=deployment.desired_replicas,
            )
        except quotas.QuotaExceeded as exc:
            refusal = refusal or exc
            continue
        return size, refusal
    return sizes[pool], refusal
