"""An endpoint's status, derived from facts by one pure function, never hand-set.
``Deployment.status`` keeps a copy that every writer of a fact recomputes in the same
transaction (``Deployment.save``, ``DeploymentQuerySet.update`` and ``store_statuses`` in
``deployments.endpoints.models``), so lists filter and count by it in SQL.

Statuses: pending, deploying, loading, active, degraded, scaled_to_zero, stopping, stopped,
failed, deleting. ``is_settled`` says whether nothing is expected to change by itself (the
console stops polling there, and the API says ``settled``). It is a property of the facts, not
of the label: an endpoint labelled active is still unsettled while a change is not yet acted
on, while it serves another revision than its target, or while its replica count differs from
the desired one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

PENDING = "pending"
DEPLOYING = "deploying"
LOADING = "loading"
ACTIVE = "active"
DEGRADED = "degraded"
SCALED_TO_ZERO = "scaled_to_zero"
STOPPING = "stopping"
STOPPED = "stopped"
FAILED = "failed"
DELETING = "deleting"

ALL_STATUSES = (
    PENDING,
    DEPLOYING,
    LOADING,
    ACTIVE,
    DEGRADED,
    SCALED_TO_ZERO,
    STOPPING,
    STOPPED,
    FAILED,
    DELETING,
)
# The labels an endpoint can rest at; whether it does is ``is_settled``'s to say.
RESTING = frozenset({ACTIVE, SCALED_TO_ZERO, STOPPED, FAILED})
# The labels at which no engine serves, so no new metric samples arrive (charts stop polling).
NOT_SERVING = frozenset({STOPPED, SCALED_TO_ZERO, FAILED})
# Roles of a prefill/decode split: their pools have fixed sizes, not ``desired_replicas``.
_POOL_ROLES = frozenset({"prefill", "decode"})
# Phases of a replica whose process/pod exists but is not ready yet.
_COMING_UP = frozenset({"starting", "loading", "running"})


@dataclass(frozen=True)
class Facts:
    """What status is derived from: plain values, built by ``Deployment.facts()`` (the model
    knows its fields; this module knows none of them)."""

    desired_state: str  # running | stopped | deleted
    desired_replicas: int
    target_revision: int | None  # revision numbers, not ids: easy to read in tests
    applied_revision: int | None
    current_revision: int | None
    ready_replicas: int
    total_replicas: int
    # Replicas whose process/pod exists but is not ready yet (loading weights, warming up).
    starting_replicas: int = 0
    first_ready_at: datetime | None = None
    failed_at: datetime | None = None
    rollout_in_progress: bool = False
    # Bumped by every change / the generation the last reconcile pass acted on.
    generation: int = 0
    observed_generation: int = 0
    # Replicas of the applied revision (what reconcile places): ready, and present but not ready.
    # None: no per-replica facts were recorded; ``ready_replicas``/``total_replicas`` stand in.
    placed_ready: int | None = None
    placed_unready: int = 0
    # Replicas of any other revision still present (surge leftovers, retiring, terminating).
    other_replicas: int = 0
    # The applied revision splits prefill and decode into pools of their own size.
    pooled: bool = False
    # ...and one of those pools has no ready replica: nothing can be served, however many of
    # the other pool's replicas are ready.
    pool_down: bool = False
    # ...or the pools it names are short: fewer of their replicas ready than present (the pool's
    # Deployment keeps one pod per replica it wants), so the endpoint serves at reduced capacity.
    short_pools: tuple[str, ...] = ()

    @property
    def serving_ready(self) -> int:
        return self.ready_replicas if self.placed_ready is None else self.placed_ready

    @property
    def change_pending(self) -> bool:
        """A change was committed that no reconcile pass has acted on yet."""
        return self.observed_generation < self.generation


def replica_counts(replicas: Iterable[Mapping[str, Any]], applied: int | None) -> dict[str, Any]:
    """The per-replica fields of :class:`Facts` from an observation's replicas (their
    ``as_dict`` form: role, revision, phase, ready), ``applied`` being the revision placed."""
    # A warm pool's released replica serves nothing and is on no way to: not counted.
    engines = [r for r in replicas if r.get("role") != "router" and r.get("phase") != "released"]
    if not engines:
        return {}
    starting = sum(1 for r in engines if not r.get("ready") and r.get("phase") in _COMING_UP)
    placed = [r for r in engines if r.get("revision") == applied]
    ready = sum(1 for r in placed if r.get("ready"))
    pooled = any(r.get("role") in _POOL_ROLES for r in placed)
    roles = role_counts(placed, applied)
    return {
        "starting_replicas": starting,
        "placed_ready": ready,
        "placed_unready": len(placed) - ready,
        "other_replicas": len(engines) - len(placed),
        "pooled": pooled,
        "pool_down": pooled and any(roles.get(role, (0, 0))[0] == 0 for role in _POOL_ROLES),
        "short_pools": _short_pools(placed, applied) if pooled else (),
    }


def _short_pools(placed: list[Mapping[str, Any]], applied: int | None) -> tuple[str, ...]:
    """The pools with a replica present but not ready (one on its way out is not counted)."""
    live = role_counts((r for r in placed if r.get("phase") != "terminating"), applied)
    return tuple(
        role for role in sorted(_POOL_ROLES) if role in live and live[role][0] < live[role][1]
    )


def role_counts(
    replicas: Iterable[Mapping[str, Any]], applied: int | None
) -> dict[str, tuple[int, int]]:
    """(ready, present) engine replicas of the applied revision per role: ``engine``, or
    ``prefill`` and ``decode`` (what the console and the API show of each pool)."""
    counts: dict[str, tuple[int, int]] = {}
    for replica in replicas:
        role = str(replica.get("role") or "engine")
        if role == "router" or replica.get("revision") != applied:
            continue
        ready, present = counts.get(role, (0, 0))
        counts[role] = (ready + bool(replica.get("ready")), present + 1)
    return counts


def derive_status(facts: Facts) -> str:
    """The one status a person sees for these facts."""
    if facts.desired_state == "deleted":
        return DELETING
    if facts.desired_state == "stopped":
        return STOPPING if facts.total_replicas > 0 else STOPPED
    if facts.desired_replicas == 0:
        return STOPPING if facts.total_replicas > 0 else SCALED_TO_ZERO
    if facts.failed_at is not None and facts.ready_replicas == 0:
        return FAILED
    if facts.applied_revision is None:
        return PENDING
    if rolling_out(facts):
        if facts.current_revision is not None:
            return DEPLOYING  # the previous revision keeps serving while the new one comes up
        # Nothing serves yet (a first deploy, or a start after a stop): coming up, not degraded.
        return LOADING if facts.starting_replicas > 0 else DEPLOYING
    # A split endpoint with a pool down serves nothing, whatever the other pool holds.
    ready = 0 if facts.pool_down else facts.serving_ready
    if ready >= facts.desired_replicas and not (ready and facts.short_pools):
        return ACTIVE
    if ready > 0 or facts.first_ready_at is not None:
        return DEGRADED  # it served, and has lost replicas since
    return LOADING if facts.starting_replicas > 0 else DEPLOYING


def rolling_out(facts: Facts) -> bool:
    """The target revision is not serving yet and has not been given up on.

    ``current_revision`` None means nothing serves. A target that differs from the serving one
    is rolling out while reconcile places it (``applied == target``) or has not acted on the
    change yet; once a rollout is abandoned reconcile places the serving revision again.
    """
    if facts.current_revision is None:
        return True
    if facts.current_revision == facts.target_revision:
        return False
    return facts.applied_revision == facts.target_revision or facts.change_pending


def is_settled(facts: Facts) -> bool:
    """True when nothing is expected to change by itself: every change is acted on, and what
    runs is exactly what was asked for (the target revision, or the serving one of an abandoned
    rollout, at the desired replica count, with nothing else left over)."""
    if facts.change_pending:
        return False
    status = derive_status(facts)
    if status not in RESTING:
        return False
    if status in {STOPPED, SCALED_TO_ZERO}:
        return facts.placed_unready == 0 and facts.other_replicas == 0 and not facts.serving_ready
    if status == ACTIVE:
        exact = facts.pooled or facts.serving_ready == facts.desired_replicas
        return exact and facts.placed_unready == 0 and facts.other_replicas == 0
    return True  # failed: it waits for a person
