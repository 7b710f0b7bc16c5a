"""The autoscaler's decision: how many replicas an endpoint should have, as a pure function.

``decide(policy, observations, state, now)`` reads no database and no clock; the task in
``deployments.autoscaling.tasks`` gathers its inputs and applies what it returns. The rules, in
order:

1. Never scale an endpoint that is stopped or being deleted, is failed or not yet deployed, or is
   rolling out a new revision. A disaggregated endpoint's pools are ``decide_pools``' (below);
   ``decide`` moves such an endpoint only to zero and back (rules 2 and 4, both pools at once).
2. At zero replicas, wake (to ``max(1, min_replicas)``) only when a request arrived after the
   endpoint was last scaled: a backstop for the gateway's own wake-up message.
3. Outside ``[floor, max_replicas]`` (the floor is ``max(1, min_replicas)``): move into the bounds
   at once, with no cool-down (the settings changed, or a person scaled by hand).
4. Scale to zero when ``scale_to_zero`` is on, no request came for ``scale_to_zero_after_seconds``
   and no sample of the window shows a request in flight (a long stream keeps it up).
5. By load. Under the concurrency policy, load is in-flight requests (running + queued, summed
   over replicas) and one replica should carry ``concurrency_target x target_utilization`` of
   them. Under the SLO policy (``slo`` set), each sample's load is already in replicas: the most
   any signal asks for (``deployments.autoscaling.slo``), and one replica carries one. Up on the
   window's peak, down on its average once that has held for the scale-down delay, at most one
   step per cool-down (``deployments.autoscaling.load``). Waking, scale-to-zero and moving into
   bounds are not steps.

``decide_pools`` scales a disaggregated endpoint's prefill and decode pools independently, each
within its ``autoscaling.prefill`` / ``autoscaling.decode`` bounds (a pool without bounds keeps its
size), with its own cool-down and the rules of 3 and 5: prefill on queued prefill tokens, arrival
rate and TTFT; decode on KV usage, requests in flight, arrival rate and ITL.

Every decision carries a reason a person can read and the inputs it used, which the task
records in the endpoint's timeline when it changes the replica count.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from deployments.autoscaling.load import by_load
from deployments.autoscaling.slo import slo_rule
from deployments.autoscaling.types import (
    POOLS,
    UNSCALABLE,
    Decision,
    Observations,
    Rule,
    Sample,
    State,
    decision_to,
    in_window,
    rounded,
)
from runtime.spec import AutoscalingSettings

__all__ = ["decide", "decide_pools"]


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
    if state.disaggregated:
        return _split_endpoint(policy, observations, state, now, inputs)
    floor = max(1, policy.min_replicas)
    if state.replicas < floor:
        return decision_to(state.replicas, floor, f"below min_replicas {floor}", inputs)
    if state.replicas > policy.max_replicas:
        reason = f"above max_replicas {policy.max_replicas}"
        return decision_to(state.replicas, policy.max_replicas, reason, inputs)
    window = in_window(observations.samples, now, policy.window_seconds)
    idle = _idle_seconds(observations, state, now)
    inputs["idle_seconds"] = rounded(idle)
    if policy.scale_to_zero and _idle(policy, window, idle):
        return decision_to(
            state.replicas, 0, f"no request for {idle:.0f} s; scaling to zero", inputs
        )
    if policy.slo is not None:
        rule = slo_rule(
            policy,
            policy.slo,
            "engine",
            observations.samples,
            observations,
            state.replicas,
            state.last_scaled_at,
            (floor, policy.max_replicas),
            inputs,
        )
        decision = by_load(policy, rule, observations.samples, now, window, inputs)
        return replace(decision, corrected=rule.corrected)
    else:
        rule = Rule(
            floor=floor,
            ceiling=policy.max_replicas,
            per_replica=policy.concurrency_target * policy.target_utilization,
            load=lambda s: s.in_flight,
            unit="requests in flight",
            replicas=state.replicas,
            last_scaled_at=state.last_scaled_at,
        )
    return by_load(policy, rule, observations.samples, now, window, inputs)


def _split_endpoint(
    policy: AutoscalingSettings,
    observations: Observations,
    state: State,
    now: datetime,
    inputs: dict[str, Any],
) -> Decision:
    """A split endpoint's own count moves only to zero (rule 4: both pools go, as the whole
    endpoint stops) and back (rule 2); between, its pools scale one by one (``decide_pools``)."""
    window = in_window(observations.samples, now, policy.window_seconds)
    idle = _idle_seconds(observations, state, now)
    inputs["idle_seconds"] = rounded(idle)
    if policy.scale_to_zero and _idle(policy, window, idle):
        reason = f"no request for {idle:.0f} s; scaling both pools to zero"
        return decision_to(state.replicas, 0, reason, inputs)
    reason = "not scaled: a disaggregated endpoint's prefill and decode pools scale one by one"
    return Decision(state.replicas, state.replicas, reason, inputs)


def decide_pools(
    policy: AutoscalingSettings, observations: Observations, state: State, now: datetime
) -> list[Decision]:
    """One decision per pool of a disaggregated endpoint, each on its own signals and bounds;
    none moves while the endpoint is at zero (``decide`` wakes it)."""
    out = []
    for pool in POOLS:
        current = state.pools.get(pool, 1)
        if state.replicas == 0:
            reason = f"{pool} pool: the endpoint is at zero replicas"
            out.append(Decision(current, current, reason, {"pool": pool}, pool))
            continue
        pool_state = State(
            replicas=current,
            last_scaled_at=state.pools_scaled_at.get(pool),
            desired_state=state.desired_state,
            status=state.status,
            rollout_in_progress=state.rollout_in_progress,
            disaggregated=True,
        )
        inputs = _base_inputs(policy, observations, pool_state, now)
        inputs["pool"] = pool
        out.append(_pool_decision(policy, observations, pool_state, pool, now, inputs))
    return out


def _pool_decision(
    policy: AutoscalingSettings,
    observations: Observations,
    state: State,
    pool: str,
    now: datetime,
    inputs: dict[str, Any],
) -> Decision:
    current = state.replicas

    def hold(reason: str) -> Decision:
        return Decision(current, current, reason, inputs, pool)

    blocked = _blocked(state)
    if blocked is not None:
        return hold(blocked)
    bounds = policy.pool_bounds(pool)
    if bounds is None:
        return hold(f"the {pool} pool keeps its size (no autoscaling.{pool} bounds)")
    if policy.slo is None:
        return hold(f"the {pool} pool scales only under an SLO policy (autoscaling.slo)")
    ceiling = max(bounds.min_replicas, bounds.max_replicas)
    if current < bounds.min_replicas:
        reason = f"{pool} pool below min_replicas {bounds.min_replicas}"
        return decision_to(current, bounds.min_replicas, reason, inputs, pool)
    if current > ceiling:
        return decision_to(
            current, ceiling, f"{pool} pool above max_replicas {ceiling}", inputs, pool
        )
    samples = observations.pools.get(pool, ())
    rule = slo_rule(
        policy,
        policy.slo,
        pool,
        samples,
        observations,
        current,
        state.last_scaled_at,
        (bounds.min_replicas, ceiling),
        inputs,
    )
    window = in_window(samples, now, policy.window_seconds)
    decision = by_load(policy, rule, samples, now, window, inputs)
    reason = decision.reason if decision.changed else f"{pool} pool: {decision.reason}"
    return Decision(decision.current, decision.desired, reason, inputs, pool, rule.corrected)


def _blocked(state: State) -> str | None:
    if state.desired_state != "running":
        return f"not scaled: the endpoint is {state.desired_state}"
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
        reason = "a request arrived while at zero"
        return decision_to(state.replicas, max(1, policy.min_replicas), reason, inputs)
    return Decision(0, 0, "at zero replicas; waiting for a request", inputs)


def _idle_seconds(observations: Observations, state: State, now: datetime) -> float | None:
    """Seconds since the last request, last scale or first readiness, whichever is latest."""
    marks = [observations.last_request_at, state.last_scaled_at, state.first_ready_at]
    known = [mark for mark in marks if mark is not None]
    return (now - max(known)).total_seconds() if known else None


def _idle(policy: AutoscalingSettings, window: list[Sample], idle: float | None) -> bool:
    quiet = all(s.in_flight <= 0 for s in window)
    return quiet and idle is not None and idle >= policy.scale_to_zero_after_seconds


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


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
