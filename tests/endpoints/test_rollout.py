"""The rollout decision: pure facts in, which revision to place and what to record out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from deployments.endpoints.rollout import RolloutFacts, decide

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def facts(**overrides: object) -> RolloutFacts:
    base: dict[str, object] = {
        "now": NOW, "target": 2, "current": 1, "target_abandoned": False,
        "deadline": NOW + timedelta(seconds=60), "target_ready": 0, "desired_replicas": 2,
    }  # fmt: skip
    base.update(overrides)
    return RolloutFacts(**base)  # type: ignore[arg-type]


def test_steady_state_applies_the_current_revision() -> None:
    assert decide(facts(target=1)).apply == 1


def test_a_new_target_starts_its_clock_and_surges() -> None:
    decision = decide(facts(deadline=None))
    assert (decision.apply, decision.start_clock, decision.promote) == (2, True, False)


def test_the_target_is_promoted_once_all_its_replicas_are_ready() -> None:
    assert not decide(facts(target_ready=1)).promote
    assert decide(facts(target_ready=2)).promote


def test_past_the_window_the_rollout_is_abandoned_for_the_current_revision() -> None:
    decision = decide(facts(deadline=NOW - timedelta(seconds=1), target_ready=1))
    assert (decision.apply, decision.abandon) == (1, True)


def test_an_abandoned_target_is_not_retried() -> None:
    decision = decide(facts(target_abandoned=True, deadline=None))
    assert (decision.apply, decision.start_clock) == (1, False)


def test_the_first_revision_serves_with_one_ready_replica_and_is_late_without_any() -> None:
    assert decide(facts(current=None, target_ready=1)).promote
    late = decide(facts(current=None, deadline=NOW - timedelta(seconds=1)))
    assert (late.apply, late.first_deploy_failed, late.abandon) == (2, True, False)


def test_a_target_that_will_never_be_ready_is_given_up_before_its_window_passes() -> None:
    rollout = decide(facts(target_failed=True))
    assert (rollout.apply, rollout.abandon) == (1, True)
    first = decide(facts(current=None, target_failed=True))
    assert (first.apply, first.first_deploy_failed, first.abandon) == (2, True, False)
    # A replica that is ready after all (its download was retried and done) serves.
    assert decide(facts(current=None, target_failed=True, target_ready=1)).promote


@given(
    target=st.integers(1, 5),
    current=st.none() | st.integers(1, 5),
    abandoned=st.booleans(),
    ready=st.integers(0, 4),
    desired=st.integers(1, 4),
    offset=st.none() | st.integers(-100, 100),
)
def test_only_the_target_or_the_current_revision_is_ever_placed(
    target: int, current: int | None, abandoned: bool, ready: int, desired: int, offset: int | None
) -> None:
    deadline = None if offset is None else NOW + timedelta(seconds=offset)
    state = facts(
        target=target,
        current=current,
        target_abandoned=abandoned,
        deadline=deadline,
        target_ready=ready,
        desired_replicas=desired,
    )
    decision = decide(state)
    assert decision.apply in {target, current}
    assert not (decision.promote and decision.abandon)
    if decision.abandon:
        assert decision.apply == current != target
