"""An endpoint's status, derived from facts by one pure function. Never stored, never hand-set.

Statuses: pending, deploying, loading, active, degraded, scaled_to_zero, stopping, stopped,
failed, deleting. ``SETTLED`` are the ones in which nothing is expected to change by itself
(the console stops polling there).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deployments.models import Deployment

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
SETTLED = frozenset({ACTIVE, SCALED_TO_ZERO, STOPPED, FAILED})


@dataclass(frozen=True)
class Facts:
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

    @classmethod
    def from_deployment(cls, deployment: Deployment) -> Facts:
        def number(revision: Any) -> int | None:
            return revision.number if revision is not None else None

        replicas = deployment.replica_facts or []
        starting = sum(
            1
            for r in replicas
            if not r.get("ready") and r.get("phase") in {"starting", "loading", "running"}
        )
        return cls(
            desired_state=deployment.desired_state,
            desired_replicas=deployment.desired_replicas,
            target_revision=number(deployment.target_revision),
            applied_revision=number(deployment.applied_revision),
            current_revision=number(deployment.current_revision),
            ready_replicas=deployment.ready_replicas,
            total_replicas=deployment.total_replicas,
            starting_replicas=starting,
            first_ready_at=deployment.first_ready_at,
            failed_at=deployment.failed_at,
            rollout_in_progress=deployment.rollout_started_at is not None,
        )


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
    if facts.rollout_in_progress and facts.current_revision is not None:
        # The previous revision keeps serving while the new one comes up.
        return DEPLOYING
    if facts.ready_replicas >= facts.desired_replicas:
        return ACTIVE
    if facts.ready_replicas > 0:
        return DEGRADED
    if facts.first_ready_at is not None and facts.current_revision == facts.target_revision:
        return DEGRADED
    if facts.starting_replicas > 0:
        return LOADING
    return DEPLOYING


def is_settled(status: str) -> bool:
    return status in SETTLED
