"""A change of LoRA adapters alone, applied to the running engines without a restart.

Reconcile calls ``apply_live`` at the start of a pass that finds a new target revision. When
the target differs from the serving revision only in its adapters
(``runtime.lora_live.lora_live_change``) and no rollout of it has begun, each cluster's driver loads
and unloads the adapters on the serving engines and makes them the target's
(``Driver.apply_adapters``); the pass then finds the target's replicas ready and promotes it, so
the endpoint never starts an engine for it. A driver that cannot (Kubernetes: see
``KubeDriver.apply_adapters``) leaves the change to the usual rollout, whose new replicas load
the adapters from their launch flags.

An engine that refuses (a bad source) leaves every engine with the adapters it had; the target
is recorded as a failed rollout with the engine's reason (its revision's timeline line and the
endpoint's failure reason), so the serving revision keeps serving and the target is not tried
again until the settings change, as with any rollout given up on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from deployments.drivers.errors import AdapterChangeRefused
from deployments.endpoints.models import Deployment, Revision
from deployments.endpoints.rollout import ROLLOUT_FAILED
from deployments.endpoints.sites import Site
from deployments.endpoints.timeline import record_event
from runtime.lora_live import LoraLiveChange, lora_live_change
from runtime.spec import RuntimeSpec

APPLIED = "AdaptersApplied"
Event = Callable[..., None]


def apply_live(
    deployment: Deployment,
    sites: Sequence[Site],
    target: Revision,
    event: Event,
    facts: dict[str, Any],
) -> bool:
    """Apply an adapters-only target live on every site (each as this pass observed it before
    any change, ``Site.before``); True when it was. ``event`` and ``facts`` are the pass's
    (``reconcile.Pass``)."""
    current = deployment.current_revision
    if current is None or current == target or not sites:
        return False
    change = _change(current, target)
    if change is None or _given_up(deployment, target):
        return False
    if any(site.before.engines(target.number) for site in sites):
        return False  # its rollout has begun: it goes on as one
    try:
        for site in sites:
            if not site.driver.apply_adapters(site.ref, current.number, target.number, change):
                return False
    except AdapterChangeRefused as exc:
        message = (
            f"revision {target.number}'s adapters were not applied ({exc.message}); "
            f"rolled back: revision {current.number} keeps serving"
        )
        # Written now, not with the pass's lines: the rollout rules read it in this same pass.
        record_event(deployment, "warning", ROLLOUT_FAILED, message, target.number)
        facts.update(failure_reason=message, rollout_started_at=None, rollout_deadline=None)
        return False
    event("info", APPLIED, _applied_line(target, change), target.number)
    if deployment.failed_at is None:
        facts["failure_reason"] = ""  # an earlier target's refusal no longer holds
    return True


def _change(current: Revision, target: Revision) -> LoraLiveChange | None:
    try:
        before = RuntimeSpec.model_validate(current.spec)
        after = RuntimeSpec.model_validate(target.spec)
    except ValidationError:
        return None  # refused settings: reconcile's usual path says why
    return lora_live_change(before, after)


def _given_up(deployment: Deployment, target: Revision) -> bool:
    return deployment.events.filter(reason=ROLLOUT_FAILED, revision_number=target.number).exists()


def _applied_line(target: Revision, change: LoraLiveChange) -> str:
    parts = []
    if change.load:
        parts.append("loaded " + ", ".join(a.name for a in change.load))
    if change.unload:
        parts.append("unloaded " + ", ".join(change.unload))
    done = "; ".join(parts) or "no adapter changed"
    return f"revision {target.number}: {done} on the running replicas, without a restart"
