"""Reconcile one endpoint: desired state from the database, observed state from the driver.

The writer of observed facts (``services`` writes what is asked; ``probe`` its own time). One
pass: observe, decide which revision to place (``rollout.decide``), apply it, observe again, and
store the facts and the timeline events they imply. An endpoint marked deleted is torn down and
its row removed here (``finalize_deletion``). A pass is idempotent and safe to repeat;
``tasks.engine`` holds the per-endpoint lock and retries temporary driver errors. Facts are saved
with a conditional UPDATE of observed fields only, so a user's change made meanwhile is never
lost. Nothing here calls up into ``services`` or the tasks.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from controlplane import audit, notify
from controlplane.access import system_actor
from controlplane.services import reveal_secret
from deployments.costs.spans import record_spans
from deployments.drivers.base import Driver, Observation, RevisionPlan
from deployments.drivers.errors import PermanentDriverError
from deployments.endpoints import moves
from deployments.endpoints import sites as fleet_sites
from deployments.endpoints.live import apply_live
from deployments.endpoints.models import ROUTE_FIELDS, Deployment, DesiredState, Revision
from deployments.endpoints.rollout import ROLLOUT_FAILED, RolloutDecision, RolloutFacts, decide
from deployments.endpoints.sites import Site, answering, merged, on_each
from deployments.endpoints.timeline import record_event
from deployments.experiments.canary import pool as canary_pool
from deployments.experiments.models import Canary
from deployments.fleet import placing
from deployments.fleet.models import Placement
from deployments.starts.services import observe_starts
from deployments.status import SCALED_TO_ZERO, STOPPED, derive_status, role_counts
from runtime import launch
from runtime.argv import UnsafeArgvError
from runtime.spec import RuntimeSpec

log = logging.getLogger(__name__)

# Settled at these, nothing runs and nothing is expected to change by itself: no next pass.
AT_REST = frozenset({STOPPED, SCALED_TO_ZERO})
# Timeline reasons that start a rollout's clock.
DEPLOYING = "Deploying"
ROLLOUT_STARTED = "RolloutStarted"


@dataclass
class Pass:
    """What one reconcile pass learned and decided, saved at the end."""

    deployment: Deployment
    now: datetime
    facts: dict[str, Any] = field(default_factory=dict)
    events: list[tuple[str, str, str, int | None, dict[str, Any]]] = field(default_factory=list)
    # Something this pass started is not finished (a stop still waiting on a process).
    unfinished: bool = False
    # A canary's pool changed what the gateway routes by (``canary_pool.sync``).
    rerouted: bool = False
    # The endpoint's clusters (``fleet.placing``) and the ones this pass could work on.
    placements: list[Placement] = field(default_factory=list)
    sites: list[Site] = field(default_factory=list)

    @property
    def named(self) -> bool:
        """Placed on several clusters: replicas and events say which."""
        return len(self.placements) > 1

    def event(
        self, level: str, reason: str, message: str, revision: int | None = None, **data: Any
    ) -> None:
        self.events.append((level, reason, message, revision, data))


def reconcile(deployment_id: str) -> bool:
    """One pass for one endpoint. False when there is nothing (left) to reconcile."""
    deployment = (
        Deployment.objects.select_related(
            "cluster",
            "cluster__kubeconfig",
            "target_revision",
            "current_revision",
            "applied_revision",
            "organization",
        )
        .filter(pk=deployment_id)
        .first()
    )
    if deployment is None:
        return False
    work = Pass(deployment=deployment, now=timezone.now())
    work.placements = placing.placements_of(deployment)
    try:
        work.sites = fleet_sites.open_sites(deployment, work.placements)
    except PermanentDriverError as exc:  # e.g. the cluster's kubeconfig is unusable
        _fail(work, exc.message)
        _save(work)
        return True
    try:
        if deployment.desired_state == DesiredState.DELETED:
            return _tear_down(work)
        serving = not (
            deployment.desired_state == DesiredState.STOPPED or deployment.desired_replicas == 0
        )
        if not work.sites:
            pass  # every cluster it is on is unavailable: nothing to ask, nothing deleted
        elif serving:
            _run(work)
        else:
            _stop(work)
        home = _home(work)
        if home is not None and not home.unanswered:  # a canary's pool runs on the home cluster
            _sync_canary(work, home.driver, serving)
        _note_unanswered(work)
    except PermanentDriverError as exc:
        _fail(work, exc.message)
    finally:
        fleet_sites.close_sites(work.sites)
    _save(work)
    return True


def _note_unanswered(work: Pass) -> None:
    """The timeline's lines for clusters that stopped answering or answer again; one that does
    not answer is asked again soon (the pass is not done with it)."""
    for level, reason, message, data in fleet_sites.unanswered_lines(work.sites):
        work.event(level, reason, message, None, **data)
    work.unfinished |= any(site.unanswered for site in work.sites)


def _home(work: Pass) -> Site | None:
    return next((s for s in work.sites if s.placement.cluster == work.deployment.cluster), None)


def _sync_canary(work: Pass, driver: Driver, serving: bool) -> None:
    """The canary's pool beside the endpoint's (``canary_pool``). Its settings being refused
    fails the canary's pool only, never the endpoint that serves."""
    try:
        work.rerouted = canary_pool.sync(work.deployment, driver, revision_plan, serving=serving)
    except PermanentDriverError as exc:
        work.event("warning", "CanaryFailed", exc.message, key=f"canary-failed:{exc.message}")


# --- desired: running ------------------------------------------------------------------------


def _run(work: Pass) -> None:
    deployment, sites = work.deployment, work.sites
    target = deployment.target_revision
    assert target is not None, "services always set a target revision"
    on_each(sites, _look_before)  # a cluster that does not answer is set aside from here on
    # Adapters alone: no restart (one that does not answer gets them by a rollout later).
    if apply_live(deployment, answering(sites), target, work.event, work.facts):
        on_each(sites, _look_before)  # its engines now serve the target
    before = merged(sites, after=False, named=work.named)
    decision = decide(_rollout_facts(work, target, before))
    revision = target if decision.apply == target.number else deployment.current_revision
    assert revision is not None
    _start_or_abandon(work, decision, target, before)
    ready = {s.placement.pk: s.before.ready_count() for s in sites}
    counts, plan, work.unfinished = placing.counts(
        deployment, work.placements, deployment.desired_replicas, revision.spec, ready
    )
    for level, reason, message, data in moves.lines(work.placements, counts, plan):
        work.event(level, reason, message, None, **data)
    plans = {}
    for index, site in enumerate(sites):
        site.planned = counts[site.placement.pk]
        placed = _revision_at(work, index, revision, target)
        plans[site.placement.pk] = revision_plan(deployment, placed, site.planned)
    on_each(sites, lambda site: site.driver.apply(site.ref, plans[site.placement.pk]))
    on_each(sites, lambda site: _look_after(work, site))
    after = merged(sites, after=True, named=work.named)
    # Promotion is judged on what runs after this pass's apply, so a ready target is current
    # in the same pass that saw it ready.
    settled = decide(_rollout_facts(work, target, after))
    if revision == target and settled.promote and deployment.current_revision != target:
        _promote(work, target)
    if settled.first_deploy_failed and deployment.failed_at is None:
        _fail(work, _why_not_serving(after, target.number))
    _record_observation(work, after, revision, before)
    work.facts["router_url"] = fleet_sites.serving_router(
        work.deployment, work.placements, work.sites
    )


def _look_before(site: Site) -> None:
    site.before = site.driver.observe(site.ref)


def _look_after(work: Pass, site: Site) -> None:
    seen = site.driver.observe(site.ref)
    site.after = observe_starts(work.deployment, site.driver, site.ref, seen, work.now)
    _retire(site)


def _revision_at(work: Pass, index: int, revision: Revision, target: Revision) -> Revision:
    """Cluster by cluster: the target once every cluster before it (home first) runs its
    target replicas ready, or where it runs some already; else the serving revision."""
    current = work.deployment.current_revision
    if revision != target or current is None:
        return revision
    site = work.sites[index]
    if site.before.engines(target.number):
        return target
    for earlier in work.sites[:index]:
        if earlier.before.ready_count(target.number) < (earlier.planned or 0):
            return current
    return target


def _retire(site: Site) -> None:
    """Out of the placement, its replicas moved off: delete all there (the row goes too)."""
    if site.placement.retiring and site.planned == 0 and not site.after.engines():
        site.retired = site.driver.delete(site.ref)


def _rollout_facts(work: Pass, target: Revision, seen: Observation) -> RolloutFacts:
    deployment = work.deployment
    if "rollout_deadline" in work.facts:
        deadline = work.facts["rollout_deadline"]
    elif deployment.rollout_deadline is not None and _clock_started(deployment, target):
        deadline = deployment.rollout_deadline
    else:
        # No clock, or another revision's: a target changed mid-rollout (or after a failed
        # first deploy) gets a startup window of its own, not what is left of the previous one.
        deadline = None
    return RolloutFacts(
        now=work.now,
        target=target.number,
        current=_number(deployment.current_revision),
        target_abandoned=_abandoned(deployment, target),
        deadline=deadline,
        target_ready=seen.ready_count(target.number),
        desired_replicas=deployment.desired_replicas,
        target_failed=seen.failure(target.number) is not None,
    )


def _start_or_abandon(
    work: Pass, decision: RolloutDecision, target: Revision, seen: Observation
) -> None:
    deployment, facts = work.deployment, work.facts
    if decision.start_clock:
        window = startup_window_s(target)
        facts["rollout_started_at"] = work.now
        facts["rollout_deadline"] = work.now + timedelta(seconds=window)
        if deployment.failed_at is not None or deployment.failure_reason:
            # A new revision gets its own chance: the failure was the previous target's.
            facts.update(failed_at=None, failure_reason="")
        verb = DEPLOYING if deployment.current_revision is None else ROLLOUT_STARTED
        replicas = deployment.desired_replicas
        # A deadline, not a prediction: past it the rollout is abandoned (or a first deploy fails).
        message = (
            f"revision {target.number}: starting {replicas} replica(s); deadline {window} s "
            "to become ready"
        )
        if deployment.current_revision is not None:
            message += f", else revision {deployment.current_revision.number} keeps serving"
        work.event("info", verb, message, target.number)
    if decision.abandon:
        why = _why_not_serving(seen, target.number)
        current = _number(deployment.current_revision)
        message = f"{why}; rolled back: revision {current} keeps serving"
        # The endpoint serves, so it is not failed (no ``failed_at``), but its failure reason
        # says why the target does not serve until a new rollout starts.
        facts.update(rollout_started_at=None, rollout_deadline=None, failure_reason=message)
        work.event("warning", ROLLOUT_FAILED, message, target.number, why=why)


def _promote(work: Pass, target: Revision) -> None:
    previous = work.deployment.current_revision
    work.facts.update(current_revision=target, rollout_started_at=None, rollout_deadline=None)
    if previous is not None:
        message = f"revision {target.number} is serving; revision {previous.number} is retired"
        work.event("info", "RolloutComplete", message, target.number)


def _why_not_serving(observation: Observation, revision: int) -> str:
    """Why a target was given up on: in the cluster's words when it will never be ready (its
    weights download failed), else its window passed with what its replicas were doing."""
    failure = observation.failure(revision)
    if failure is not None:
        return f"revision {revision} will not become ready ({failure.reason}: {failure.message})"
    why = _not_ready_reason(observation, revision)
    return f"revision {revision} was not ready within its startup window ({why})"


def _not_ready_reason(observation: Observation, revision: int) -> str:
    for replica in observation.engines(revision):
        if replica.reason:
            detail = f": {replica.message}" if replica.message else ""
            return f"{replica.reason}{detail}"
    phases = sorted({r.phase for r in observation.engines(revision)}) or ["no replica started"]
    return ", ".join(phases)


def _clock_started(deployment: Deployment, target: Revision) -> bool:
    """The running rollout clock is this target's: its start is on the timeline."""
    return deployment.events.filter(
        reason__in=(DEPLOYING, ROLLOUT_STARTED), revision_number=target.number
    ).exists()


def _abandoned(deployment: Deployment, target: Revision) -> bool:
    return deployment.events.filter(reason=ROLLOUT_FAILED, revision_number=target.number).exists()


def _number(revision: Revision | None) -> int | None:
    return revision.number if revision is not None else None


def startup_window_s(revision: Revision) -> int:
    """How long a revision may take to become ready: the setting, else its startup probe's."""
    configured = settings.PLINTH_STARTUP_WINDOW_S
    if configured > 0:
        return configured
    return launch.startup_allowance_s(stored_spec(revision))


def _refused(revision: Revision) -> PermanentDriverError:
    return PermanentDriverError(
        f"revision {revision.number}'s settings are refused by this version of Plinth "
        "(validate them and save corrected settings)"
    )


def stored_spec(revision: Revision) -> RuntimeSpec:
    """The revision's settings. One saved before a check Plinth now makes (an extra flag since
    refused, say) fails the endpoint with a reason rather than raising on every pass."""
    try:
        return RuntimeSpec.model_validate(revision.spec)
    except ValidationError as exc:
        raise _refused(revision) from exc


def revision_plan(
    deployment: Deployment, revision: Revision, replicas: int | None = None
) -> RevisionPlan:
    """What ``revision`` runs on one cluster: ``replicas`` engine replicas (the cluster's share
    of the endpoint's, ``fleet.placing``), by default all of the endpoint's."""
    spec = stored_spec(revision)
    try:
        plan = launch.plan(spec, deployment_labels={"deployment": deployment.slug})
    except UnsafeArgvError as exc:
        raise _refused(revision) from exc
    return RevisionPlan.for_spec(
        spec,
        plan,
        number=revision.number,
        replicas=deployment.desired_replicas if replicas is None else replicas,
        spec_hash=revision.spec_hash,
        hf_token=_hf_token(deployment, spec),
        pools=deployment.pool_sizes(revision.number, revision.spec),
    )


def _hf_token(deployment: Deployment, spec: RuntimeSpec) -> str | None:
    name = spec.model.hf_token_secret
    if not name:
        return None
    secret = deployment.organization.secrets.filter(name=name).first()
    if secret is None:
        raise PermanentDriverError(f"the secret {name!r} named by model.hf_token_secret is gone")
    return reveal_secret(secret)


# --- what was seen -----------------------------------------------------------------------------


def _record_observation(
    work: Pass, seen: Observation, serving: Revision, earlier: Observation
) -> None:
    deployment, facts = work.deployment, work.facts
    ready = seen.ready_count()
    engines = [r for r in seen.engines() if r.phase != "terminating"]
    was_ready = deployment.ready_replicas
    facts.update(
        applied_revision=serving,
        ready_replicas=ready,
        total_replicas=len(engines),
        replica_facts=[r.as_dict() for r in seen.replicas],
        router_url=seen.router_url,
    )
    if ready and deployment.first_ready_at is None:
        facts["first_ready_at"] = work.now
    if ready and deployment.failed_at is not None:
        facts.update(failed_at=None, failure_reason="")
    desired = deployment.desired_replicas
    if ready >= desired > was_ready:
        started = deployment.rollout_started_at
        took = (
            f", {(work.now - started).total_seconds():.0f} s after the deploy began"
            if started
            else ""
        )
        work.event("info", "Ready", f"{ready}/{desired} replicas ready{took}", serving.number)
    elif was_ready > 0 and ready < min(was_ready, desired):
        why = _not_ready_reason(seen, serving.number)
        work.event(
            "warning", "Degraded", f"{ready}/{desired} replicas ready ({why})", serving.number
        )
    for role, line in _pools_lost(deployment, seen, serving):
        work.event("warning", "Degraded", line, serving.number, pool=role)
    for event in (*earlier.events, *seen.events):
        work.event(event.level, event.reason, event.message, None, key=event.key)


def _pools_lost(
    deployment: Deployment, seen: Observation, serving: Revision
) -> list[tuple[str, str]]:
    """(role, line) of each prefill/decode pool that lost ready replicas since the last pass
    and is below its size, though not down: the endpoint still serves, with less of that pool."""
    if not (serving.spec.get("disaggregation") or {}).get("enabled"):
        return []
    sizes = deployment.pool_sizes(serving.number, serving.spec)  # the autoscaler's, or the spec's
    now = role_counts([r.as_dict() for r in seen.replicas], serving.number)
    before = role_counts(deployment.replica_facts or [], serving.number)
    lines = []
    for role, size in sorted(sizes.items(), key=lambda item: item[0] != "prefill"):
        ready, was = now.get(role, (0, 0))[0], before.get(role, (0, 0))[0]
        if 0 < ready < min(was, size):
            why = [r for r in seen.engines(serving.number) if r.role == role and r.reason]
            detail = f" ({why[0].reason}: {why[0].message})" if why else ""
            lines.append((role, f"{role} pool: {ready}/{size} replicas ready{detail}"))
    return lines


def _stop(work: Pass) -> None:
    warm = _warm_plan(work.deployment)

    def stop(site: Site) -> None:
        site.planned, site.done = 0, False  # not done until its cluster says so
        if warm is not None:  # engines released, not stopped: done once none holds a GPU
            site.driver.apply(site.ref, warm)
            # Through the starts' writer too: what a request held through the wake waits on
            # (the released replica's resume) is in the facts the gateway reads at zero.
            observed = site.driver.observe(site.ref)
            site.after = observe_starts(work.deployment, site.driver, site.ref, observed, work.now)
            site.done = not site.after.engines()
            return
        site.done = site.driver.stop(site.ref)
        site.after = Observation() if site.done else site.driver.observe(site.ref)

    on_each(work.sites, stop)
    done = all(site.done for site in work.sites)
    seen = merged(work.sites, after=True, named=work.named)
    for event in seen.events if warm is not None else ():
        work.event(event.level, event.reason, event.message, None, key=event.key)
    work.unfinished = not done
    work.facts.update(
        ready_replicas=seen.ready_count(),
        total_replicas=len(seen.engines()),
        replica_facts=[r.as_dict() for r in seen.replicas],
        router_url="" if done else seen.router_url,
        rollout_started_at=None,
        rollout_deadline=None,
    )
    if done or not seen.engines():
        # Nothing serves now (a router may still be on its way out): the next start is a fresh
        # deploy with its own startup window, coming up from zero rather than degraded.
        work.facts["current_revision"] = None
    if done and work.deployment.total_replicas and warm is None:
        work.event("info", "Stopped", "every replica and the router are stopped")
    if warm is not None:
        work.facts["router_url"] = ""  # the router stays, with no worker: the gateway holds


def _warm_plan(deployment: Deployment) -> RevisionPlan | None:
    """At zero with a warm pool (``autoscaling.warm_replicas``): the target revision at no
    replica, whose engines the driver keeps loaded with their GPU memory released."""
    target = deployment.target_revision
    if deployment.desired_state != DesiredState.RUNNING or target is None:
        return None
    if not (target.spec.get("autoscaling") or {}).get("warm_replicas"):
        return None  # no plan built, no secret revealed, for an endpoint without one
    try:
        return revision_plan(deployment, target, 0)
    except PermanentDriverError:
        return None  # settings now refused: stopping must still work


def _tear_down(work: Pass) -> bool:
    """Delete everything of the endpoint on every cluster. A cluster Plinth cannot see (or that
    does not answer) is left as it is: the endpoint stays deleting until it answers again."""
    home = _home(work)
    canaries_gone = home is not None and canary_pool.tear_down(work.deployment, home.driver)
    gone: dict[int, bool] = {}  # placement id -> everything there is deleted

    def delete(site: Site) -> None:
        gone[site.placement.pk] = site.driver.delete(site.ref)

    on_each(work.sites, delete)
    unseen = len(gone) < len(work.placements)  # lost, or set aside as not answering
    if not all(gone.values()) or not canaries_gone or unseen:
        work.facts.update(replica_facts=[], router_url="")
        _note_unanswered(work)
        _save(work)
        return True
    finalize_deletion(work.deployment.pk)
    return False


@transaction.atomic
def finalize_deletion(deployment_id: uuid.UUID | str) -> bool:
    """Remove the row of a torn-down endpoint (only once it is marked deleted); audited as the
    system's act. False when there is no such endpoint marked deleted."""
    deployment = (
        Deployment.objects.select_for_update(of=("self",))
        .select_related("organization", "target_revision")
        .filter(pk=deployment_id, desired_state=DesiredState.DELETED)
        .first()
    )
    if deployment is None:
        return False
    actor = system_actor(deployment.organization)
    before = deployment.desired_snapshot()
    audit.record(actor, "deployment.finalize_deletion", deployment, before=before)
    # The deployment and its canaries point at its own revisions (PROTECT); unhook them before
    # the cascade.
    Deployment.objects.filter(pk=deployment.pk).update(
        target_revision=None, current_revision=None, applied_revision=None
    )
    Canary.objects.filter(deployment=deployment).delete()
    Deployment.objects.filter(pk=deployment.pk).delete()
    notify.publish_on_commit("deployment", str(deployment_id))
    return True


def _fail(work: Pass, reason: str) -> None:
    log.warning("deployment %s failed: %s", work.deployment.slug, reason)
    if work.deployment.failure_reason != reason:
        work.event("error", "Failed", reason, _number(work.deployment.target_revision))
    work.facts.update(failed_at=work.deployment.failed_at or work.now, failure_reason=reason)


# --- saving ------------------------------------------------------------------------------------


def _next_pass_in(work: Pass) -> float | None:
    """Seconds until the next pass; None for an endpoint at rest with nothing running (stopped
    or scaled to zero): it costs nothing until something changes, since every change (a
    person's, the autoscaler's, a wake-up) makes it due again."""
    deployment = work.deployment
    for name, value in work.facts.items():
        setattr(deployment, name, value)
    deployment.observed_generation = deployment.generation
    deployment.status = derive_status(deployment.facts())
    settled = deployment.settled and not work.unfinished
    if settled and deployment.status in AT_REST:
        return None
    fast = float(settings.PLINTH_RECONCILE_INTERVAL_S)
    slow = float(settings.PLINTH_SETTLED_RECONCILE_S)
    return slow if settled and not deployment.rollout_deadline else fast


@transaction.atomic
def _save(work: Pass) -> None:
    deployment = work.deployment
    generation = deployment.generation
    routed = deployment.route_state()  # as loaded, before this pass's facts
    wait = _next_pass_in(work)
    due = work.now + timedelta(seconds=wait) if wait is not None else None
    observed = {**work.facts, "observed_at": work.now, "observed_generation": generation}
    rows = Deployment.objects.filter(pk=deployment.pk)
    # The status is derived from the row as this pass leaves it, which is only what is in
    # memory while the generation is the one the pass read.
    current = rows.filter(generation=generation)
    if not current.update(**observed, status=deployment.status, next_reconcile_at=due):
        # A change was committed since this pass read the row: due at once, whatever a sweep
        # that claimed the row meanwhile set (its lease would hide the change for its length).
        # The status is derived again from the row as it now is (the queryset's update does).
        rows.update(**observed, next_reconcile_at=work.now)
        deployment.refresh_from_db(fields=list(ROUTE_FIELDS))
    work.rerouted |= fleet_sites.store_sites(work.deployment, work.placements, work.sites, work.now)
    record_spans(deployment, work.facts.get("replica_facts"), work.now)
    for level, reason, message, revision, data in work.events:
        key = data.get("key")
        if key and deployment.events.filter(data__key=key).exists():
            continue
        record_event(deployment, level, reason, message, revision, data)
    if deployment.route_state() != routed or work.rerouted:
        # Only then: a pass that changed nothing the gateway routes by costs it nothing.
        notify.publish_on_commit("deployment", str(deployment.pk))
