"""Rule 5 of ``deployments.autoscaling.decide``: from a ``Rule``'s load per sample, the replicas
to have.

- **up** on the window's *peak*: a burst of queued requests hurts time-to-first-token at once,
  so the autoscaler answers the highest sample of the last ``window_seconds``, not the mean;
- **down** on the window's *average*, and only when that lower target has held for
  ``scale_down_delay_seconds``: the rolling window average at every sample of the delay period
  (Kubernetes HPA's stabilisation window) must fit in fewer replicas, and the samples must reach
  back over the whole delay, else there is no evidence it held;
- **rate limited**: at most one step per cool-down of ``window_seconds`` since the last scale
  (so each step is judged on a window of fresh evidence); a step up at most doubles, a step down
  removes one replica.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from deployments.autoscaling.types import Decision, Rule, Sample, decision_to, in_window, rounded
from runtime.spec import AutoscalingSettings

__all__ = ["by_load"]

# Float sums of gauges: 44.800000001 in flight at 22.4 per replica is still 2 replicas.
_EPSILON = 1e-9


def by_load(
    policy: AutoscalingSettings,
    rule: Rule,
    samples: Sequence[Sample],
    now: datetime,
    window: list[Sample],
    inputs: dict[str, Any],
) -> Decision:
    current = rule.replicas
    if not window:
        return _hold(current, f"no load samples in the last {policy.window_seconds} s", inputs)
    loads = [rule.load(s) for s in window]
    peak = max(loads)
    up = _replicas_for(peak, rule)
    average = sum(loads) / len(loads)
    inputs.update(per_replica=rounded(rule.per_replica), peak=rounded(peak), up_target=up)
    inputs["average"] = rounded(average)
    if up > current:
        return _step_up(policy, rule, now, up, peak, inputs)
    if _replicas_for(average, rule) >= current:
        return _hold(current, f"the load fits {_n(current)}", inputs)
    stable = _stabilised_load(samples, now, policy, rule.load)
    if stable is None:
        return _hold(current, _short_history(policy), inputs)
    down = _replicas_for(stable, rule)
    inputs.update(stabilised_average=rounded(stable), down_target=down)
    if down < current:
        return _step_down(policy, rule, now, stable, inputs)
    reason = f"load has not stayed low for {policy.scale_down_delay_seconds} s"
    return _hold(current, reason, inputs)


def _step_up(
    policy: AutoscalingSettings,
    rule: Rule,
    now: datetime,
    target: int,
    peak: float,
    inputs: dict[str, Any],
) -> Decision:
    wait = _cooling(policy, rule.last_scaled_at, now)
    if wait:
        reason = f"load needs {_n(target)}; cooling down for {wait:.0f} s"
        return _hold(rule.replicas, reason, inputs)
    step = min(target, rule.replicas * 2)
    limit = " (at most doubling per step)" if step < target else ""
    reason = (
        f"peak of {peak:g} {rule.unit} over {policy.window_seconds} s needs {_n(target)} "
        f"at {inputs['per_replica']:g} per replica{limit}"
    )
    if "driver" in inputs:
        reason += f"; driven by {inputs['driver']}"
    return decision_to(rule.replicas, step, reason, inputs)


def _step_down(
    policy: AutoscalingSettings,
    rule: Rule,
    now: datetime,
    stable: float,
    inputs: dict[str, Any],
) -> Decision:
    target = inputs["down_target"]
    wait = _cooling(policy, rule.last_scaled_at, now)
    if wait:
        return _hold(
            rule.replicas, f"load fits {_n(target)}; cooling down for {wait:.0f} s", inputs
        )
    reason = (
        f"average load of at most {stable:g} {rule.unit} for "
        f"{policy.scale_down_delay_seconds} s fits {_n(target)} (one replica per step)"
    )
    return decision_to(rule.replicas, rule.replicas - 1, reason, inputs)


def _replicas_for(load: float, rule: Rule) -> int:
    needed = math.ceil(load / rule.per_replica - _EPSILON)
    return max(rule.floor, min(needed, rule.ceiling))


def _stabilised_load(
    samples: Sequence[Sample],
    now: datetime,
    policy: AutoscalingSettings,
    load: Callable[[Sample], float],
) -> float | None:
    """The highest window average over the delay period; None when history does not cover it."""
    delay_start = now - timedelta(seconds=policy.scale_down_delay_seconds)
    ordered = sorted((s for s in samples if s.ts <= now), key=lambda s: s.ts)
    if not ordered or (policy.scale_down_delay_seconds and ordered[0].ts > delay_start):
        return None
    loads = {id(s): load(s) for s in ordered}
    # Every window ending in the delay period, including the one ending now.
    ends = [s.ts for s in ordered if s.ts >= delay_start] + [now]
    averages = []
    for end in ends:
        window = in_window(ordered, end, policy.window_seconds)
        if window:
            averages.append(sum(loads[id(s)] for s in window) / len(window))
    return max(averages) if averages else None


def _cooling(policy: AutoscalingSettings, last_scaled_at: datetime | None, now: datetime) -> float:
    """Seconds left before the next step may be taken (0: none)."""
    if last_scaled_at is None:
        return 0.0
    elapsed = (now - last_scaled_at).total_seconds()
    return max(0.0, policy.window_seconds - elapsed)


def _short_history(policy: AutoscalingSettings) -> str:
    return f"load samples do not yet cover the {policy.scale_down_delay_seconds} s scale-down delay"


def _hold(current: int, reason: str, inputs: dict[str, Any]) -> Decision:
    return Decision(current, current, reason, inputs)


def _n(replicas: int) -> str:
    return f"{replicas} replica" if replicas == 1 else f"{replicas} replicas"
