"""Which revision to run, and when a rollout is done or abandoned. Pure: facts in, decision out.

A new target revision is rolled out next to the serving one (surge). It becomes current once
enough of its replicas are ready; if its startup window passes first, the rollout is abandoned and
the previous revision keeps serving (automatic rollback). An abandoned target is not tried again
until the desired state changes to another revision. The first revision has nothing to fall back
to: past its window the endpoint is marked failed, and its replicas keep trying.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class RolloutFacts:
    now: datetime
    target: int
    current: int | None
    target_abandoned: bool
    deadline: datetime | None
    target_ready: int
    desired_replicas: int


@dataclass(frozen=True)
class RolloutDecision:
    apply: int  # the revision number to place
    start_clock: bool = False  # a rollout begins now: set its start and deadline
    promote: bool = False  # the target is serving: it becomes current
    abandon: bool = False  # the window passed: roll back to current
    first_deploy_late: bool = False  # the first revision is past its window with nothing ready


def decide(facts: RolloutFacts) -> RolloutDecision:
    if facts.current == facts.target:
        return RolloutDecision(apply=facts.target)
    if facts.current is not None and facts.target_abandoned:
        return RolloutDecision(apply=facts.current)
    start = facts.deadline is None
    late = facts.deadline is not None and facts.now >= facts.deadline
    if facts.current is None:
        # First revision: it serves as soon as one replica is ready.
        promote = facts.target_ready >= 1
        late_first = late and not promote
        return RolloutDecision(
            apply=facts.target, start_clock=start, promote=promote, first_deploy_late=late_first
        )
    if facts.target_ready >= max(1, facts.desired_replicas):
        return RolloutDecision(apply=facts.target, promote=True)
    if late:
        return RolloutDecision(apply=facts.current, abandon=True)
    return RolloutDecision(apply=facts.target, start_clock=start)
