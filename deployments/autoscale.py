"""The autoscaler's decision: how many replicas an endpoint should have, as a pure function.

``decide(policy, observations, state, now)`` reads no database and no clock; the task in
``deployments.tasks.scaling`` gathers its inputs and applies what it returns. The rules, in order:

1. Never scale an endpoint that is stopped or being deleted, is failed or not yet deployed, is
   rolling out a new revision, or is disaggregated (its prefill and decode pools have fixed sizes).
2. At zero replicas, wake (to ``max(1, min_replicas)``) only when a request arrived after the
   endpoint was last scaled: a backstop for the gateway's own wake-up message.
3. Outside ``[floor, max_replicas]`` (the floor is ``max(1, min_replicas)``): move into the bounds
   at once, with no cool-down (the settings changed, or a person scaled by hand).
4. Scale to zero when ``scale_to_zero`` is on, no request came for ``scale_to_zero_after_seconds``
   and no sample of the window shows a request in flight (a long stream keeps it up).
5. By load, where load is in-flight requests (running + queued, summed over replicas) and one
   replica should carry ``concurrency_target x target_utilization`` of them:

   - **up** on the window's *peak*: a burst of queued requests hurts time-to-first-token at once,
     so the autoscaler answers the highest sample of the last ``window_seconds``, not the mean;
   - **down** on the window's *average*, and only when that lower target has held for
     ``scale_down_delay_seconds``: the rolling window average at every sample of the delay period
     (Kubernetes HPA's stabilisation window) must fit in fewer replicas, and the samples must reach
     back over the whole delay, else there is no evidence it held;
   - **rate limited**: at most one step per cool-down of ``window_seconds`` since the last scale
     (so each step is judged on a window of fresh evidence); a step up at most doubles, a step down
     removes one replica. Waking, scale-to-zero and moving into bounds are not steps.

Every decision carries a reason a person can read and the inputs it used, which the task
records in the endpoint's timeline when it changes the replica count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from deployments import status as statuses
from runtime.spec import AutoscalingSettings

# Statuses in which the replica count is not the autoscaler's to change.
UNSCALABLE = frozenset({statuses.PENDING, statuses.FAILED, statuses.DELETING, statuses.STOPPED})
# Float sums of gauges: 44.800000001 in flight at 22.4 per replica is still 2 replicas.
_EPSILON = 1e-9


@dataclass(frozen=True)
class Sample:
    """One probe of the endpoint: requests in flight (running + queued, over all replicas)."""

    ts: datetime
    in_flight: float


@dataclass(frozen=True)
class Observations:
    """Samples reaching back ``window_seconds + scale_down_delay_seconds``, any order."""

    samples: Sequence[Sample] = ()
    last_request_at: datetime | None = None


@dataclass(frozen=True)
class State:
    """What the endpoint is now, and whether it may be scaled at all."""

    replicas: int
    last_scaled_at: datetime | None = None
    desired_state: str = "running"
    status: str = statuses.ACTIVE
    rollout_in_progress: bool = False
    disaggregated: bool = False
    # When it first served; with the last scale and request, the start of an idle period.
    first_ready_at: datetime | None = None


@dataclass(frozen=True)
class Decision:
    current: int
    desired: int
    reason: str
    inputs: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.desired != self.current


def decide(
    policy: AutoscalingSettings, observations: Observations, state: State, now: datetime
) -> Decision:
    """The replica count the endpoint should have at ``now``, with the reason and inputs."""
    inputs = _base_inputs(policy, observations, state, now)
    blocked = _blocked(state)
    if blocked is not None:
        return Decision(state.replicas, state.replicas, blocked, inputs)
    if state.replicas == 0:
        return _from_zero(policy, observations, state, inputs)
    floor = max(1, policy.min_replicas)
    if state.replicas < floor:
        return _to(state, floor, f"below min_replicas {floor}", inputs)
    if state.replicas > policy.max_replicas:
        return _to(state, policy.max_replicas, f"above max_replicas {policy.max_replicas}", inputs)
    window = _in_window(observations.samples, now, policy.window_seconds)
    idle = _idle_seconds(observations, state, now)
    inputs["idle_seconds"] = _round(idle)
    if policy.scale_to_zero and _idle(policy, window, idle):
        return _to(state, 0, f"no request for {idle:.0f} s; scaling to zero", inputs)
    return _by_load(policy, observations, state, now, window, inputs)


def _blocked(state: State) -> str | None:
    if state.desired_state != "running":
        return f"not scaled: the endpoint is {state.desired_state}"
    if state.disaggregated:
        return "not scaled: disaggregated prefill and decode pools have fixed sizes"
    if state.rollout_in_progress:
        return "not scaled: a rollout is in progress"
    if state.replicas > 0 and state.status in UNSCALABLE:
        return f"not scaled: the endpoint is {state.status}"
    return None


def _from_zero(
    policy: AutoscalingSettings, observations: Observations, state: State, inputs: dict[str, Any]
) -> Decision:
    seen = observations.last_request_at
    if seen is not None and (state.last_scaled_at is None or seen > state.last_scaled_at):
        return _to(state, max(1, policy.min_replicas), "a request arrived while at zero", inputs)
    return Decision(0, 0, "at zero replicas; waiting for a request", inputs)


def _by_load(
    policy: AutoscalingSettings,
    observations: Observations,
    state: State,
    now: datetime,
    window: list[Sample],
    inputs: dict[str, Any],
) -> Decision:
    if not window:
        return _hold(state, f"no load samples in the last {policy.window_seconds} s", inputs)
    per_replica = policy.concurrency_target * policy.target_utilization
    peak = max(s.in_flight for s in window)
    up = _replicas_for(peak, per_replica, policy)
    average = sum(s.in_flight for s in window) / len(window)
    inputs.update(per_replica=_round(per_replica), peak=_round(peak), up_target=up)
    inputs["average"] = _round(average)
    if up > state.replicas:
        return _step_up(policy, state, now, up, peak, inputs)
    if _replicas_for(average, per_replica, policy) >= state.replicas:
        return _hold(state, f"the load fits {_n(state.replicas)}", inputs)
    stable = _stabilised_load(observations.samples, now, policy)
    if stable is None:
        return _hold(state, _short_history(policy), inputs)
    down = _replicas_for(stable, per_replica, policy)
    inputs.update(stabilised_average=_round(stable), down_target=down)
    if down < state.replicas:
        return _step_down(policy, state, now, stable, inputs)
    return _hold(state, f"load has not stayed low for {policy.scale_down_delay_seconds} s", inputs)


def _step_up(
    policy: AutoscalingSettings,
    state: State,
    now: datetime,
    target: int,
    peak: float,
    inputs: dict[str, Any],
) -> Decision:
    wait = _cooling(policy, state, now)
    if wait:
        return _hold(state, f"load needs {_n(target)}; cooling down for {wait:.0f} s", inputs)
    step = min(target, state.replicas * 2)
    limit = " (at most doubling per step)" if step < target else ""
    reason = (
        f"peak of {peak:g} requests in flight over {policy.window_seconds} s needs {_n(target)} "
        f"at {inputs['per_replica']:g} per replica{limit}"
    )
    return _to(state, step, reason, inputs)


def _step_down(
    policy: AutoscalingSettings,
    state: State,
    now: datetime,
    stable: float,
    inputs: dict[str, Any],
) -> Decision:
    target = inputs["down_target"]
    wait = _cooling(policy, state, now)
    if wait:
        return _hold(state, f"load fits {_n(target)}; cooling down for {wait:.0f} s", inputs)
    reason = (
        f"average load of at most {stable:g} requests in flight for "
        f"{policy.scale_down_delay_seconds} s fits {_n(target)} (one replica per step)"
    )
    return _to(state, state.replicas - 1, reason, inputs)


# --- the figures -------------------------------------------------------------------------------


def _replicas_for(load: float, per_replica: float, policy: AutoscalingSettings) -> int:
    needed = math.ceil(load / per_replica - _EPSILON)
    return max(max(1, policy.min_replicas), min(needed, policy.max_replicas))


def _in_window(samples: Sequence[Sample], end: datetime, seconds: float) -> list[Sample]:
    start = end - timedelta(seconds=seconds)
    return [s for s in samples if start < s.ts <= end]


def _stabilised_load(
    samples: Sequence[Sample], now: datetime, policy: AutoscalingSettings
) -> float | None:
    """The highest window average over the delay period; None when history does not cover it."""
    delay_start = now - timedelta(seconds=policy.scale_down_delay_seconds)
    ordered = sorted((s for s in samples if s.ts <= now), key=lambda s: s.ts)
    if not ordered or (policy.scale_down_delay_seconds and ordered[0].ts > delay_start):
        return None
    # Every window ending in the delay period, including the one ending now.
    ends = [s.ts for s in ordered if s.ts >= delay_start] + [now]
    averages = []
    for end in ends:
        window = _in_window(ordered, end, policy.window_seconds)
        if window:
            averages.append(sum(s.in_flight for s in window) / len(window))
    return max(averages) if averages else None


def _idle_seconds(observations: Observations, state: State, now: datetime) -> float | None:
    """Seconds since the last request, last scale or first readiness, whichever is latest."""
    marks = [observations.last_request_at, state.last_scaled_at, state.first_ready_at]
    known = [mark for mark in marks if mark is not None]
    return (now - max(known)).total_seconds() if known else None


def _idle(policy: AutoscalingSettings, window: list[Sample], idle: float | None) -> bool:
    quiet = all(s.in_flight <= 0 for s in window)
    return quiet and idle is not None and idle >= policy.scale_to_zero_after_seconds


def _cooling(policy: AutoscalingSettings, state: State, now: datetime) -> float:
    """Seconds left before the next step may be taken (0: none)."""
    if state.last_scaled_at is None:
        return 0.0
    elapsed = (now - state.last_scaled_at).total_seconds()
    return max(0.0, policy.window_seconds - elapsed)


def _short_history(policy: AutoscalingSettings) -> str:
    return f"load samples do not yet cover the {policy.scale_down_delay_seconds} s scale-down delay"


# --- decisions -----------------------------------------------------------------------------------


def _to(state: State, replicas: int, reason: str, inputs: dict[str, Any]) -> Decision:
    text = f"{reason}: {state.replicas} -> {replicas}" if replicas != state.replicas else reason
    return Decision(state.replicas, replicas, text, inputs)


def _hold(state: State, reason: str, inputs: dict[str, Any]) -> Decision:
    return Decision(state.replicas, state.replicas, reason, inputs)


def _base_inputs(
    policy: AutoscalingSettings, observations: Observations, state: State, now: datetime
) -> dict[str, Any]:
    """JSON-safe inputs of a decision, as the timeline shows them."""
    return {
        "now": now.isoformat(),
        "replicas": state.replicas,
        "status": state.status,
        "policy": policy.model_dump(mode="json"),
        "samples": len(observations.samples),
        "last_request_at": _iso(observations.last_request_at),
        "last_scaled_at": _iso(state.last_scaled_at),
    }


def _n(replicas: int) -> str:
    return f"{replicas} replica" if replicas == 1 else f"{replicas} replicas"


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None
