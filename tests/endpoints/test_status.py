"""The derived status and ``settled``: pure functions of facts, checked on the cases seen lying
(issue 12 item 8) and, as properties, on any facts at all."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from deployments.status import (
    ACTIVE,
    ALL_STATUSES,
    DEGRADED,
    DEPLOYING,
    LOADING,
    RESTING,
    Facts,
    derive_status,
    is_settled,
)

EARLIER = datetime(2025, 1, 1, tzinfo=UTC)

# One replica of revision 1 serving, every change acted on.
SERVING = Facts(
    desired_state="running",
    desired_replicas=1,
    target_revision=1,
    applied_revision=1,
    current_revision=1,
    ready_replicas=1,
    total_replicas=1,
    first_ready_at=EARLIER,
    generation=1,
    observed_generation=1,
    placed_ready=1,
)


def test_serving_the_target_at_the_desired_count_is_active_and_settled() -> None:
    assert derive_status(SERVING) == ACTIVE and is_settled(SERVING)


def test_a_change_not_yet_acted_on_is_not_settled() -> None:
    # Right after a PATCH: revision 2 is the target, the pass that places it has not run.
    patched = replace(SERVING, target_revision=2, generation=2)
    assert derive_status(patched) == DEPLOYING
    assert not is_settled(patched)
    # A scale or a stop likewise, whatever the label says before the pass.
    assert not is_settled(replace(SERVING, desired_replicas=2, generation=2))
    assert not is_settled(replace(SERVING, generation=2))


def test_a_rollout_is_not_settled_until_the_target_serves() -> None:
    rolling = replace(
        SERVING, target_revision=2, applied_revision=2, placed_ready=0, placed_unready=1,
        other_replicas=1, rollout_in_progress=True,
    )  # fmt: skip
    assert derive_status(rolling) == DEPLOYING and not is_settled(rolling)
    # Promoted, but revision 1's replica is still up: "2 / 1" is not settled.
    promoted = replace(rolling, current_revision=2, placed_ready=1, placed_unready=0,
                       ready_replicas=2, total_replicas=2, rollout_in_progress=False)  # fmt: skip
    assert derive_status(promoted) == ACTIVE and not is_settled(promoted)
    retired = replace(promoted, other_replicas=0, ready_replicas=1, total_replicas=1)
    assert is_settled(retired)


def test_an_abandoned_rollout_settles_on_the_revision_that_keeps_serving() -> None:
    # Revision 2 missed its window: reconcile places revision 1 again.
    abandoned = replace(SERVING, target_revision=2)
    assert derive_status(abandoned) == ACTIVE and is_settled(abandoned)


def test_more_ready_replicas_than_desired_is_not_settled() -> None:
    scaled_down = replace(SERVING, ready_replicas=2, total_replicas=2, placed_ready=2)
    assert derive_status(scaled_down) == ACTIVE and not is_settled(scaled_down)


def test_a_start_after_a_stop_comes_up_rather_than_degrades() -> None:
    # Stopped: nothing serves (reconcile cleared the serving revision), nothing runs.
    started = replace(
        SERVING, current_revision=None, ready_replicas=0, total_replicas=0, placed_ready=None,
        generation=3, observed_generation=2,
    )  # fmt: skip
    assert derive_status(started) == DEPLOYING
    loading = replace(started, observed_generation=3, starting_replicas=1, placed_ready=0,
                      placed_unready=1, total_replicas=1)  # fmt: skip
    assert derive_status(loading) == LOADING and not is_settled(loading)


def test_a_serving_revision_that_lost_its_replicas_is_degraded() -> None:
    lost = replace(SERVING, ready_replicas=0, placed_ready=0, placed_unready=1, starting_replicas=1)
    assert derive_status(lost) == DEGRADED and not is_settled(lost)


revisions = st.integers(min_value=1, max_value=3)
counts = st.integers(min_value=0, max_value=3)


@st.composite
def any_facts(draw: st.DrawFn) -> Facts:
    generation = draw(st.integers(min_value=1, max_value=4))
    return Facts(
        desired_state=draw(st.sampled_from(["running", "running", "stopped", "deleted"])),
        desired_replicas=draw(counts),
        target_revision=draw(revisions),
        applied_revision=draw(st.none() | revisions),
        current_revision=draw(st.none() | revisions),
        ready_replicas=draw(counts),
        total_replicas=draw(counts),
        starting_replicas=draw(counts),
        first_ready_at=draw(st.none() | st.just(EARLIER)),
        failed_at=draw(st.none() | st.just(EARLIER)),
        rollout_in_progress=draw(st.booleans()),
        generation=generation,
        observed_generation=draw(st.integers(min_value=0, max_value=generation)),
        placed_ready=draw(st.none() | counts),
        placed_unready=draw(counts),
        other_replicas=draw(counts),
        pooled=draw(st.booleans()),
    )


@given(any_facts())
def test_settled_never_hides_a_pending_change_or_a_mismatch(facts: Facts) -> None:
    status = derive_status(facts)
    assert status in ALL_STATUSES
    if not is_settled(facts):
        return
    assert status in RESTING
    assert facts.observed_generation == facts.generation
    if status == ACTIVE:
        assert facts.current_revision is not None
        # The target serves, or it was given up on and the serving revision is placed again.
        assert facts.current_revision == facts.target_revision or (
            facts.applied_revision == facts.current_revision
        )
        assert facts.other_replicas == 0 and facts.placed_unready == 0
        assert facts.pooled or facts.serving_ready == facts.desired_replicas


@given(any_facts())
def test_a_target_being_placed_is_never_settled(facts: Facts) -> None:
    placing = facts.target_revision != facts.current_revision and (
        facts.applied_revision == facts.target_revision
        or facts.observed_generation < facts.generation
    )
    running = facts.desired_state == "running" and facts.desired_replicas > 0
    if placing and running and facts.failed_at is None:
        assert not is_settled(facts)


@given(any_facts())
def test_nothing_serving_is_coming_up_never_degraded(facts: Facts) -> None:
    coming_up = (
        facts.desired_state == "running"
        and facts.desired_replicas > 0
        and facts.failed_at is None
        and facts.applied_revision is not None
        and facts.current_revision is None
    )
    if coming_up:
        assert derive_status(facts) in {DEPLOYING, LOADING}
