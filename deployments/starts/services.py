"""The writer of replica starts, called by reconcile with what one pass observed.

For each engine replica the driver reports: while it starts, the phase it waits on (from the
cluster's milestones, and from the engine's log lines once its container runs; a warm pool's
replica, released or resuming, waits on its resume: ``runtime.startup.RESUME``), kept in its
facts so the console and the gateway's scale-from-zero hold can say it; once it is ready, one
``ReplicaStart`` with every phase's seconds, written once per start and added to the phase
histogram (``telemetry``). Reading a replica's log is the driver's ``logs``, one short read per
starting or newly ready replica; a log that cannot be read leaves the engine's phases unknown
(their time then counts as the wait for readiness), never fails the pass.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime

from django.db import IntegrityError, transaction

from deployments.drivers.base import (
    LOADING,
    RELEASED,
    RESUMING,
    RUNNING,
    STARTING,
    DeploymentRef,
    Driver,
    LogQuery,
    Observation,
    ReplicaFacts,
)
from deployments.drivers.errors import DriverError
from deployments.endpoints.models import Deployment
from deployments.starts.models import ReplicaStart
from deployments.starts.telemetry import record_start_phases
from runtime import startup

log = logging.getLogger(__name__)

# SGLang logs its start in a few hundred lines (its server args, the load, the graph capture):
# a finished start is read whole, a running one by its latest lines (where it got to).
START_LOG_LINES = 2000
PROGRESS_LOG_LINES = 300
_STARTING = frozenset({STARTING, LOADING, RUNNING})
_WARM = frozenset({RELEASED, RESUMING})


def observe_starts(
    deployment: Deployment, driver: Driver, ref: DeploymentRef, seen: Observation, now: datetime
) -> Observation:
    """``seen`` with each starting engine's phase; records the starts that became ready."""
    recorded = _recorded(deployment, seen)
    replicas = []
    for facts in seen.replicas:
        if facts.role == "router" or startup.CREATED not in facts.milestones:
            replicas.append(facts)
        elif facts.ready:
            if _start_key(facts) not in recorded:
                _record(deployment, facts, _engine(driver, ref, facts), now)
            replicas.append(facts)
        elif facts.phase in _STARTING:
            replicas.append(_with_phase(facts, driver, ref))
        elif facts.phase in _WARM:
            # A warm pool's replica serves again by a resume, not a start: what a request held
            # through a scale from zero waits on is that (a scale-up resumes these first).
            replicas.append(replace(facts, start_phase=startup.RESUME))
        else:
            replicas.append(facts)
    return replace(seen, replicas=tuple(replicas))


def _start_key(facts: ReplicaFacts) -> tuple[str, float]:
    return facts.name, round(facts.milestones[startup.CREATED], 3)


def _recorded(deployment: Deployment, seen: Observation) -> set[tuple[str, float]]:
    names = [r.name for r in seen.replicas if r.ready]
    if not names:
        return set()
    rows = ReplicaStart.objects.filter(deployment=deployment, replica__in=names)
    return {
        (name, round(at.timestamp(), 3)) for name, at in rows.values_list("replica", "created_at")
    }


def _engine(
    driver: Driver, ref: DeploymentRef, facts: ReplicaFacts, tail: int = START_LOG_LINES
) -> startup.EnginePhases:
    try:
        lines = driver.logs(ref, LogQuery(replica=facts.name, role=facts.role, tail=tail))
    except DriverError as exc:
        log.info("start phases of %s: its log could not be read: %s", facts.name, exc)
        return startup.EnginePhases()
    if lines.replica != facts.name:
        return startup.EnginePhases()
    return startup.engine_phases((line.text, line.ts) for line in lines.lines)


def _with_phase(facts: ReplicaFacts, driver: Driver, ref: DeploymentRef) -> ReplicaFacts:
    reached = ""
    if startup.IMAGE_PULLED in facts.milestones and facts.phase != STARTING:
        reached = _engine(driver, ref, facts, PROGRESS_LOG_LINES).reached
    return replace(facts, start_phase=startup.waiting_on(facts.milestones, reached))


def _record(
    deployment: Deployment, facts: ReplicaFacts, engine: startup.EnginePhases, now: datetime
) -> None:
    milestones = {startup.READY: now.timestamp(), **facts.milestones}
    phases = startup.durations(milestones, engine)
    created = milestones[startup.CREATED]
    ready = milestones[startup.READY]
    try:
        with transaction.atomic():
            ReplicaStart.objects.create(
                deployment=deployment,
                revision=facts.revision,
                replica=facts.name,
                role=facts.role,
                created_at=datetime.fromtimestamp(round(created, 3), UTC),
                ready_at=datetime.fromtimestamp(ready, UTC),
                phases=phases,
                total_seconds=round(max(0.0, ready - created), 3),
            )
    except IntegrityError:  # another pass recorded it first
        return
    transaction.on_commit(lambda: record_start_phases(phases))
