"""Which revision to run, and when a rollout is done or abandoned. Pure: facts in, decision out.

A new target revision is rolled out next to the serving one (surge). It becomes current once
enough of its replicas are ready; if its startup window passes first, the rollout is abandoned and
the previous revision keeps serving (automatic rollback). A target the driver says will never be
ready (its weights download gave up) is abandoned at once, without waiting for its window. An
abandoned target is not tried again until the desired state changes to another revision. The
first revision has nothing to fall back to: past its window, or once it will never be ready, the
endpoint is marked failed, and its replicas keep trying.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

# The timeline reason of a target given up on: it is not tried again (``target_abandoned``).
ROLLOUT_FAILED = "RolloutFailed"


@dataclass(frozen=True)
class RolloutFacts:
    now: datetime
    target: int
    current: int | None
    target_abandoned: bool
    deadline: datetime | None
    target_ready: int
    desired_replicas: int
    # The driver says the target will not become ready, however long it is given.
    target_failed: bool = False


@dataclass(frozen=True)
class RolloutDecision:
    apply: int  # the revision number to place
    start_clock: bool = False  # a rollout begins now: set its start and deadline
    promote: bool = False  # the target is serving: it becomes current
    abandon: bool = False  # the window passed: roll back to current
    # The first revision has nothing ready and is past its window or will never be ready.
    first_deploy_failed: bool = False


def decide(facts: RolloutFacts) -> RolloutDecision:
    if facts.current == facts.target:
        return RolloutDecision(apply=facts.target)
    if facts.current is not None and facts.target_abandoned:
        return RolloutDecision(apply=facts.current)
    start = facts.deadline is None
    late = facts.deadline is not None and facts.now >= facts.deadline
    given_up = late or facts.target_failed
    if facts.current is None:
        # First revision: it serves as soon as one replica is ready.
        promote = facts.target_ready >= 1
        failed = given_up and not promote
        return RolloutDecision(
            apply=facts.target, start_clock=start, promote=promote, first_deploy_failed=failed
        )
    if facts.target_ready >= max(1, facts.desired_replicas):
        return RolloutDecision(apply=facts.target, promote=True)
    if given_up:
        return RolloutDecision(apply=facts.current, abandon=True)
    return RolloutDecision(apply=facts.target, start_clock=start)
