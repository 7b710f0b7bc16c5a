"""The autoscaler's pure decision: a table of situations a user would recognise, then properties
that must hold for any input (bounds, the scale-down delay, scale to zero only when idle)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deployments.autoscaling.decide import decide
from deployments.autoscaling.types import Observations, Sample, State
from runtime.spec import AutoscalingSettings

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LONG_AGO = NOW - timedelta(hours=2)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def history(*loads: float, every: int = 15) -> list[Sample]:
    """Samples every ``every`` s, the last one now: history(30, 10) is 30 a probe ago, 10 now."""
    last = len(loads) - 1
    return [Sample(ago((last - i) * every), load) for i, load in enumerate(loads)]


def steady(load: float, seconds: int = 600) -> list[Sample]:
    return history(*([load] * (seconds // 15 + 1)))


# One replica carries 10 requests in flight; decisions over 60 s; scale down after 120 s.
BASE = {"min_replicas": 1, "max_replicas": 8, "concurrency_target": 10, "target_utilization": 1.0,
        "window_seconds": 60, "scale_down_delay_seconds": 120}  # fmt: skip
TO_ZERO = {**BASE, "min_replicas": 0, "scale_to_zero": True, "scale_to_zero_after_seconds": 900}


@dataclass
class Case:
    name: str
    replicas: int
    samples: list[Sample]
    expected: int
    reason: str  # a fragment of the reason a person reads
    policy: dict[str, Any] = field(default_factory=lambda: dict(BASE))
    last_scaled_at: datetime | None = LONG_AGO
    last_request_at: datetime | None = None
    state: dict[str, Any] = field(default_factory=dict)


# fmt: off
CASES = [
    Case("load over the target doubles at most", 1, steady(35), 2, "at most doubling"),
    Case("a small excess adds what it needs", 2, steady(25), 3, "needs 3 replicas"),
    Case("the window's peak, not its mean, scales up", 1, history(0, 0, 0, 15), 2, "peak of 15"),
    Case("a peak beyond max stops at max", 6, steady(500), 8, "needs 8 replicas"),
    Case("no step up during the cool-down", 1, steady(35), 1, "cooling down",
         last_scaled_at=ago(30)),
    Case("low load that held past the delay removes one replica", 4, steady(5), 3,
         "one replica per step"),
    Case("no step down during the cool-down", 4, steady(5), 4, "cooling down",
         last_scaled_at=ago(30)),
    Case("history shorter than the delay holds", 4, steady(5, seconds=90), 4, "do not yet cover"),
    Case("a busy minute inside the delay holds", 4, history(*[5] * 20, 40, 40, 40, *[5] * 6), 4,
         "has not stayed low"),
    Case("a busy minute before the delay no longer holds", 4,
         history(40, 40, 40, *[5] * 20), 3, "one replica per step"),
    Case("fitting load holds", 3, steady(25), 3, "the load fits 3 replicas"),
    Case("float sums still fit", 2, steady(20.000000001), 2, "the load fits"),
    Case("no samples: no evidence, no change", 3, [], 3, "no load samples"),
    Case("below min_replicas rises at once", 1, [], 3, "below min_replicas 3",
         policy={**BASE, "min_replicas": 3}, last_scaled_at=ago(1)),
    Case("above max_replicas falls at once", 9, steady(500), 8, "above max_replicas 8",
         last_scaled_at=ago(1)),
    Case("idle past the limit scales to zero", 2, steady(0), 0, "scaling to zero",
         policy=TO_ZERO, last_request_at=ago(901)),
    Case("not idle long enough keeps one", 2, steady(0), 1, "one replica per step",
         policy=TO_ZERO, last_request_at=ago(600)),
    Case("a request in flight keeps it up", 1, steady(1), 1, "the load fits",
         policy=TO_ZERO, last_request_at=ago(5000)),
    Case("idle counts from the last scale when newer", 1, steady(0), 1, "the load fits",
         policy=TO_ZERO, last_request_at=ago(5000), last_scaled_at=ago(300)),
    Case("without scale_to_zero idle keeps min", 1, steady(0), 1, "the load fits",
         last_request_at=ago(5000)),
    Case("a request after scaling to zero wakes it", 0, [], 1, "a request arrived",
         policy=TO_ZERO, last_scaled_at=ago(100), last_request_at=ago(2)),
    Case("a created-at-zero endpoint wakes on its first request", 0, [], 1, "a request arrived",
         policy=TO_ZERO, last_scaled_at=None, last_request_at=ago(2)),
    Case("at zero without a new request stays", 0, [], 0, "waiting for a request",
         policy=TO_ZERO, last_scaled_at=ago(100), last_request_at=ago(1000)),
    Case("a stopped endpoint is not scaled", 1, steady(500), 1, "is stopped",
         state={"desired_state": "stopped", "status": "stopped"}),
    Case("a deleting endpoint is not scaled", 1, steady(500), 1, "is deleted",
         state={"desired_state": "deleted", "status": "deleting"}),
    Case("a failed endpoint is not scaled", 1, steady(500), 1, "is failed",
         state={"status": "failed"}),
    Case("a rollout is not disturbed", 1, steady(500), 1, "rollout is in progress",
         state={"rollout_in_progress": True}),
    Case("disaggregated pools are fixed", 1, steady(500), 1, "disaggregated",
         state={"disaggregated": True}),
    Case("an idle split endpoint takes both pools to zero", 1, steady(0), 0,
         "scaling both pools to zero", policy=TO_ZERO, last_request_at=ago(901),
         state={"disaggregated": True}),
    Case("a split endpoint not idle long enough keeps its pools", 1, steady(0), 1,
         "scale one by one", policy=TO_ZERO, last_request_at=ago(600),
         state={"disaggregated": True}),
    Case("a request wakes a split endpoint at zero", 0, [], 1, "a request arrived",
         policy=TO_ZERO, last_scaled_at=ago(100), last_request_at=ago(2),
         state={"disaggregated": True}),
]
# fmt: on


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_decide(case: Case) -> None:
    state = State(replicas=case.replicas, last_scaled_at=case.last_scaled_at, **case.state)
    observations = Observations(samples=case.samples, last_request_at=case.last_request_at)
    decision = decide(AutoscalingSettings(**case.policy), observations, state, NOW)
    assert (decision.current, decision.desired) == (case.replicas, case.expected), decision.reason
    assert case.reason in decision.reason
    if decision.changed:
        assert f"{case.replicas} -> {case.expected}" in decision.reason


def test_the_inputs_say_what_the_decision_saw() -> None:
    decision = decide(
        AutoscalingSettings(**BASE),
        Observations(samples=steady(35), last_request_at=ago(3)),
        State(replicas=1, last_scaled_at=LONG_AGO),
        NOW,
    )
    inputs = decision.inputs
    assert inputs["peak"] == 35 and inputs["average"] == 35 and inputs["per_replica"] == 10
    assert inputs["up_target"] == 4 and inputs["replicas"] == 1
    assert inputs["policy"]["concurrency_target"] == 10
    assert inputs["last_request_at"] == ago(3).isoformat()
    assert inputs["samples"] == len(steady(35))


def test_utilization_leaves_headroom() -> None:
    # 32 in flight per replica at 70%: 22.4 each, so 45 requests need 3 replicas, not 2.
    policy = AutoscalingSettings(max_replicas=8, concurrency_target=32, target_utilization=0.7)
    decision = decide(policy, Observations(steady(45)), State(replicas=2), NOW)
    assert decision.desired == 3


# --- properties ---------------------------------------------------------------------------------


@st.composite
def policies(draw: st.DrawFn) -> AutoscalingSettings:
    minimum = draw(st.integers(0, 3))
    return AutoscalingSettings(
        min_replicas=minimum,
        max_replicas=draw(st.integers(max(1, minimum), 8)),
        concurrency_target=draw(st.integers(1, 64)),
        target_utilization=draw(st.floats(0.1, 1.0)),
        window_seconds=draw(st.integers(1, 300)),
        scale_down_delay_seconds=draw(st.integers(0, 600)),
        scale_to_zero=minimum == 0,  # the validation rules couple these two
        scale_to_zero_after_seconds=draw(st.integers(1, 1800)),
    )


samples_st = st.lists(
    st.builds(
        lambda offset, load: Sample(ago(offset), load),
        st.integers(0, 1500),
        st.floats(0, 1000, allow_nan=False),
    ),
    max_size=40,
)
optional_ago = st.one_of(st.none(), st.integers(0, 4000).map(ago))


@settings(max_examples=300, deadline=None)
@given(policies(), samples_st, st.integers(0, 10), optional_ago, optional_ago)
def test_a_change_always_lands_within_bounds(
    policy: AutoscalingSettings,
    samples: list[Sample],
    replicas: int,
    last_scaled: datetime | None,
    last_request: datetime | None,
) -> None:
    state = State(replicas=replicas, last_scaled_at=last_scaled)
    decision = decide(policy, Observations(samples, last_request), state, NOW)
    if decision.changed:
        assert (decision.desired == 0 and policy.scale_to_zero) or (
            max(1, policy.min_replicas) <= decision.desired <= policy.max_replicas
        )
    else:
        assert decision.desired == replicas


@settings(max_examples=300, deadline=None)
@given(policies(), samples_st, st.integers(1, 8), optional_ago, st.data())
def test_never_scales_down_before_the_delay(
    policy: AutoscalingSettings,
    samples: list[Sample],
    replicas: int,
    last_scaled: datetime | None,
    data: st.DataObject,
) -> None:
    # A flood of requests at some moment of the delay period: that moment's window average
    # needs every replica there is, so the lower target has not held for the whole delay.
    moment = data.draw(st.integers(0, policy.scale_down_delay_seconds))
    flood = Sample(ago(moment), 1e9)
    state = State(replicas=replicas, last_scaled_at=last_scaled)
    decision = decide(policy, Observations([*samples, flood]), state, NOW)
    in_bounds = max(1, policy.min_replicas) <= replicas <= policy.max_replicas
    if in_bounds:
        assert decision.desired >= replicas or decision.desired == 0
    if 0 < decision.desired < replicas and in_bounds:
        raise AssertionError(decision.reason)


@settings(max_examples=300, deadline=None)
@given(policies(), samples_st, st.integers(1, 8), optional_ago, optional_ago)
def test_scales_to_zero_only_when_enabled_and_idle(
    policy: AutoscalingSettings,
    samples: list[Sample],
    replicas: int,
    last_scaled: datetime | None,
    last_request: datetime | None,
) -> None:
    state = State(replicas=replicas, last_scaled_at=last_scaled)
    decision = decide(policy, Observations(samples, last_request), state, NOW)
    if decision.desired != 0:
        return
    assert policy.scale_to_zero
    window_start = ago(policy.window_seconds)
    assert all(s.in_flight == 0 for s in samples if window_start < s.ts <= NOW)
    for mark in (last_request, last_scaled):
        assert mark is None or (NOW - mark).total_seconds() >= policy.scale_to_zero_after_seconds


@settings(max_examples=200, deadline=None)
@given(policies(), samples_st, st.integers(1, 8), optional_ago, optional_ago)
def test_a_step_is_rate_limited(
    policy: AutoscalingSettings,
    samples: list[Sample],
    replicas: int,
    last_scaled: datetime | None,
    last_request: datetime | None,
) -> None:
    state = State(replicas=replicas, last_scaled_at=last_scaled)
    decision = decide(policy, Observations(samples, last_request), state, NOW)
    in_bounds = max(1, policy.min_replicas) <= replicas <= policy.max_replicas
    if not (decision.changed and decision.desired > 0 and in_bounds):
        return  # waking, scale to zero and moving into bounds are not steps
    assert last_scaled is None or (NOW - last_scaled).total_seconds() >= policy.window_seconds
    assert decision.desired in {replicas - 1} | set(range(replicas + 1, 2 * replicas + 1))
