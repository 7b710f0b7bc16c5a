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
   any signal asks for (see "The SLO policy" below), and one replica carries one. Then:

   - **up** on the window's *peak*: a burst of queued requests hurts time-to-first-token at once,
     so the autoscaler answers the highest sample of the last ``window_seconds``, not the mean;
   - **down** on the window's *average*, and only when that lower target has held for
     ``scale_down_delay_seconds``: the rolling window average at every sample of the delay period
     (Kubernetes HPA's stabilisation window) must fit in fewer replicas, and the samples must reach
     back over the whole delay, else there is no evidence it held;
   - **rate limited**: at most one step per cool-down of ``window_seconds`` since the last scale
     (so each step is judged on a window of fresh evidence); a step up at most doubles, a step down
     removes one replica. Waking, scale-to-zero and moving into bounds are not steps.

The SLO policy. The performance model (``runtime.capacity``, the optimizer's physics) says how
many requests/s one replica carries with TTFT and ITL p90 within the targets. The model is
corrected online, as Dynamo Planner's SLA mode does, in both directions (``slo_correction``):
over the samples of the look-back, the ratio of each observed p90 to the model's prediction at
that sample's per-replica rate is averaged (an EWMA, newest weighing most, bounded; samples whose
predicted latency is far below the target are left out, as a light load's p90 says little about
where capacity ends). An endpoint slower than its model (a correction over 1) has the targets the
capacity is sought for divided by it (a model that predicts half the observed TTFT must aim at
half the target); one faster on every latency with evidence (under 1) is the model with every
time scaled by it, so its capacity, queues and KV limits scale too. Hysteresis: from the
corrections the last passes applied (``Observations.corrections``), a correction moves up at
once, and down only when the fit is a deadband below it, by a bounded step per pass; a move is
``Decision.corrected``, which the task records as a ``ModelCorrected`` event with its inputs. A
sample's load, in replicas, is the largest of:

- arrival rate / corrected capacity (x ``target_utilization``);
- requests in flight / the concurrency one replica runs at that capacity (engine, decode);
- queued prefill tokens / what one replica prefills within the TTFT budget (engine, prefill);
- KV-cache usage x replicas / ``KV_TARGET`` (engine, decode): a full cache queues or retracts
  requests whatever the rate says;
- an observed p90 over its target: replicas x observed/target (at most ``BREACH_STEP``), so a
  miss the model did not foresee still scales up.

``decide_pools`` scales a disaggregated endpoint's prefill and decode pools independently, each
within its ``autoscaling.prefill`` / ``autoscaling.decode`` bounds (a pool without bounds keeps its
size), with its own cool-down and the rules of 3 and 5: prefill on queued prefill tokens, arrival
rate and TTFT; decode on KV usage, requests in flight, arrival rate and ITL.

Every decision carries a reason a person can read and the inputs it used, which the task
records in the endpoint's timeline when it changes the replica count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from deployments import status as statuses
from deployments.autoscaling import correction as slo_correction
from runtime.capacity import ReplicaModel
from runtime.spec import AutoscalingSettings, SloTargets

# Statuses in which the replica count is not the autoscaler's to change.
UNSCALABLE = frozenset({statuses.PENDING, statuses.FAILED, statuses.DELETING, statuses.STOPPED})
# Float sums of gauges: 44.800000001 in flight at 22.4 per replica is still 2 replicas.
_EPSILON = 1e-9
POOLS = ("prefill", "decode")
# KV-cache usage a replica should stay under: near full, SGLang queues and retracts requests.
KV_TARGET = 0.85
# An observed p90 over its target asks for at most this many times the replicas it ran on.
BREACH_STEP = 2.0


@dataclass(frozen=True)
class Sample:
    """One probe of the endpoint (or of one pool): requests in flight (running + queued, over all
    replicas), and what the SLO policy reads besides. Latencies in seconds."""

    ts: datetime
    in_flight: float
    requests_per_s: float = 0.0
    queued: float = 0.0
    queued_prefill_tokens: float = 0.0
    kv_usage: float | None = None  # mean over the replicas, 0..1
    ttft_p90: float | None = None
    itl_p90: float | None = None
    ready: int = 0  # replicas the probe read


@dataclass(frozen=True)
class Observations:
    """Samples reaching back ``window_seconds + scale_down_delay_seconds``, any order.

    ``pools``: a disaggregated endpoint's samples per pool. ``models``: the performance model of
    one replica per role ("engine", "prefill", "decode"), for the SLO policy."""

    samples: Sequence[Sample] = ()
    last_request_at: datetime | None = None
    pools: Mapping[str, Sequence[Sample]] = field(default_factory=dict)
    models: Mapping[str, ReplicaModel | None] = field(default_factory=dict)
    # The corrections applied to each role's model so far ({"ttft": x, "itl": y}, only the
    # latencies that had evidence): the starting point of this pass's hysteresis.
    corrections: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


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
    # A disaggregated endpoint's pool sizes, and when the autoscaler last changed each.
    pools: Mapping[str, int] = field(default_factory=dict)
    pools_scaled_at: Mapping[str, datetime | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    current: int
    desired: int
    reason: str
    inputs: dict[str, Any] = field(default_factory=dict)
    pool: str | None = None  # "prefill" or "decode" for a pool's decision
    # Set when this pass moved the model correction of ``role`` (the SLO policy): the new
    # corrections, which the task records as a ``ModelCorrected`` event with the inputs.
    corrected: slo_correction.Correction | None = None

    @property
    def changed(self) -> bool:
        return self.desired != self.current


@dataclass(frozen=True)
class _Rule:
    """How one scaled thing (an endpoint, or a pool) turns samples into replicas."""

    floor: int
    ceiling: int
    per_replica: float
    load: Callable[[Sample], float]
    unit: str  # what the load counts, as the reason says it
    # (current replicas, last scaled) of what is being scaled
    replicas: int
    last_scaled_at: datetime | None
    corrected: slo_correction.Correction | None = (
        None  # the SLO policy moved its model's correction
    )


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
        return _to(state.replicas, floor, f"below min_replicas {floor}", inputs)
    if state.replicas > policy.max_replicas:
        reason = f"above max_replicas {policy.max_replicas}"
        return _to(state.replicas, policy.max_replicas, reason, inputs)
    window = _in_window(observations.samples, now, policy.window_seconds)
    idle = _idle_seconds(observations, state, now)
    inputs["idle_seconds"] = _round(idle)
    if policy.scale_to_zero and _idle(policy, window, idle):
        return _to(state.replicas, 0, f"no request for {idle:.0f} s; scaling to zero", inputs)
    if policy.slo is not None:
        rule = _slo_rule(policy, policy.slo, "engine", observations.samples, observations,
                         state.replicas, state.last_scaled_at, (floor, policy.max_replicas),
                         inputs)  # fmt: skip
        decision = _by_load(policy, rule, observations.samples, now, window, inputs)
        return replace(decision, corrected=rule.corrected)
    else:
        rule = _Rule(
            floor=floor,
            ceiling=policy.max_replicas,
            per_replica=policy.concurrency_target * policy.target_utilization,
            load=lambda s: s.in_flight,
            unit="requests in flight",
            replicas=state.replicas,
            last_scaled_at=state.last_scaled_at,
        )
    return _by_load(policy, rule, observations.samples, now, window, inputs)


def _split_endpoint(
    policy: AutoscalingSettings,
    observations: Observations,
    state: State,
    now: datetime,
    inputs: dict[str, Any],
) -> Decision:
    """A split endpoint's own count moves only to zero (rule 4: both pools go, as the whole
    endpoint stops) and back (rule 2); between, its pools scale one by one (``decide_pools``)."""
    window = _in_window(observations.samples, now, policy.window_seconds)
    idle = _idle_seconds(observations, state, now)
    inputs["idle_seconds"] = _round(idle)
    if policy.scale_to_zero and _idle(policy, window, idle):
        reason = f"no request for {idle:.0f} s; scaling both pools to zero"
        return _to(state.replicas, 0, reason, inputs)
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
        return _to(current, bounds.min_replicas, reason, inputs, pool)
    if current > ceiling:
        return _to(current, ceiling, f"{pool} pool above max_replicas {ceiling}", inputs, pool)
    samples = observations.pools.get(pool, ())
    rule = _slo_rule(policy, policy.slo, pool, samples, observations, current,
                     state.last_scaled_at, (bounds.min_replicas, ceiling), inputs)  # fmt: skip
    window = _in_window(samples, now, policy.window_seconds)
    decision = _by_load(policy, rule, samples, now, window, inputs)
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
        return _to(state.replicas, max(1, policy.min_replicas), reason, inputs)
    return Decision(0, 0, "at zero replicas; waiting for a request", inputs)


def _by_load(
    policy: AutoscalingSettings,
    rule: _Rule,
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
    inputs.update(per_replica=_round(rule.per_replica), peak=_round(peak), up_target=up)
    inputs["average"] = _round(average)
    if up > current:
        return _step_up(policy, rule, now, up, peak, inputs)
    if _replicas_for(average, rule) >= current:
        return _hold(current, f"the load fits {_n(current)}", inputs)
    stable = _stabilised_load(samples, now, policy, rule.load)
    if stable is None:
        return _hold(current, _short_history(policy), inputs)
    down = _replicas_for(stable, rule)
    inputs.update(stabilised_average=_round(stable), down_target=down)
    if down < current:
        return _step_down(policy, rule, now, stable, inputs)
    reason = f"load has not stayed low for {policy.scale_down_delay_seconds} s"
    return _hold(current, reason, inputs)


def _step_up(
    policy: AutoscalingSettings,
    rule: _Rule,
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
    return _to(rule.replicas, step, reason, inputs)


def _step_down(
    policy: AutoscalingSettings,
    rule: _Rule,
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
    return _to(rule.replicas, rule.replicas - 1, reason, inputs)


# --- the SLO policy ------------------------------------------------------------------------------


def _slo_rule(
    policy: AutoscalingSettings,
    slo: SloTargets,
    role: str,
    samples: Sequence[Sample],
    observations: Observations,
    replicas: int,
    last_scaled_at: datetime | None,
    bounds: tuple[int, int],
    inputs: dict[str, Any],
) -> _Rule:
    """Loads in replicas for ``role`` ("engine", "prefill" or "decode"); see the docstring."""
    model = observations.models.get(role)
    ttft = slo.ttft_p90_ms / 1000 if slo.ttft_p90_ms is not None else None
    itl = slo.itl_p90_ms / 1000 if slo.itl_p90_ms is not None else None
    prefills, decodes = role in ("engine", "prefill"), role in ("engine", "decode")
    ordered = sorted(samples, key=lambda s: s.ts)
    targets = {"ttft": ttft if prefills else None, "itl": itl if decodes else None}
    fitted = {
        metric: fit
        for metric, target in targets.items()
        if target and (fit := slo_correction.fit(ordered, model, metric, target)) is not None
    }
    before = dict(observations.corrections.get(role, {}))
    fix = slo_correction.hysteresis(before, fitted)
    capacity = running = prefill_budget = 0.0
    if model is not None:
        raw, at = slo_correction.corrected_capacity(model, ttft, itl, fix)
        capacity = raw * policy.target_utilization
        if decodes and raw > 0:
            running = max(1.0, model.running_at(at)) * policy.target_utilization
        if prefills:
            share = 0.8 if role == "prefill" else 1.0  # the transfer and decode start take the rest
            # A faster engine prefills more within the target.
            speed = min(1.0, slo_correction.speed(fix))
            prefill_budget = model.prefill_tokens_per_s / speed * (ttft or 1.0) * share
    inputs.update(
        slo=slo.model_dump(mode="json"),
        model=model is not None,
        correction={m: _round(fix.get(m, 1.0)) for m in slo_correction.LATENCIES},
        correction_fitted={m: _round(v) for m, v in fitted.items()},
        capacity_rps_per_replica=_round(capacity),
        running_per_replica=_round(running),
        prefill_tokens_within_ttft=_round(prefill_budget),
    )

    def signals(s: Sample) -> dict[str, float]:
        n = max(1, s.ready or replicas)
        out: dict[str, float] = {}
        if capacity > 0:
            out["arrival rate"] = s.requests_per_s / capacity
        if running > 0:
            out["requests in flight"] = s.in_flight / running
        if prefill_budget > 0:
            out["queued prefill tokens"] = s.queued_prefill_tokens / prefill_budget
        if decodes and s.kv_usage is not None:
            out["KV-cache usage"] = s.kv_usage * n / KV_TARGET
        if prefills and ttft and s.ttft_p90 is not None and s.ttft_p90 > ttft:
            out["TTFT over target"] = n * min(BREACH_STEP, s.ttft_p90 / ttft)
        if decodes and itl and s.itl_p90 is not None and s.itl_p90 > itl:
            out["ITL over target"] = n * min(BREACH_STEP, s.itl_p90 / itl)
        return out

    def load(s: Sample) -> float:
        return max(signals(s).values(), default=0.0)

    window = [s for s in ordered if s.ts > ordered[-1].ts - timedelta(
        seconds=policy.window_seconds)] if ordered else []  # fmt: skip
    if window:
        peak = max(window, key=load)
        named = signals(peak)
        if named and max(named.values()) > 0:
            inputs["driver"] = max(named, key=lambda k: named[k])
        inputs["peak_signals"] = {k: _round(v) for k, v in named.items()}
    corrected = None
    if model is not None and slo_correction.moved(before, fix):
        fits = {m: round(v, 4) for m, v in fitted.items()}
        corrected = slo_correction.Correction(role, before, fix, fits)
    return _Rule(
        floor=bounds[0],
        ceiling=bounds[1],
        per_replica=1.0,
        load=load,
        unit="replicas' worth of load",
        replicas=replicas,
        last_scaled_at=last_scaled_at,
        corrected=corrected,
    )


# --- the figures -------------------------------------------------------------------------------


def _replicas_for(load: float, rule: _Rule) -> int:
    needed = math.ceil(load / rule.per_replica - _EPSILON)
    return max(rule.floor, min(needed, rule.ceiling))


def _in_window(samples: Sequence[Sample], end: datetime, seconds: float) -> list[Sample]:
    start = end - timedelta(seconds=seconds)
    return [s for s in samples if start < s.ts <= end]


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
        window = _in_window(ordered, end, policy.window_seconds)
        if window:
            averages.append(sum(loads[id(s)] for s in window) / len(window))
    return max(averages) if averages else None


def _idle_seconds(observations: Observations, state: State, now: datetime) -> float | None:
    """Seconds since the last request, last scale or first readiness, whichever is latest."""
    marks = [observations.last_request_at, state.last_scaled_at, state.first_ready_at]
    known = [mark for mark in marks if mark is not None]
    return (now - max(known)).total_seconds() if known else None


def _idle(policy: AutoscalingSettings, window: list[Sample], idle: float | None) -> bool:
    quiet = all(s.in_flight <= 0 for s in window)
    return quiet and idle is not None and idle >= policy.scale_to_zero_after_seconds


def _cooling(policy: AutoscalingSettings, last_scaled_at: datetime | None, now: datetime) -> float:
    """Seconds left before the next step may be taken (0: none)."""
    if last_scaled_at is None:
        return 0.0
    elapsed = (now - last_scaled_at).total_seconds()
    return max(0.0, policy.window_seconds - elapsed)


def _short_history(policy: AutoscalingSettings) -> str:
    return f"load samples do not yet cover the {policy.scale_down_delay_seconds} s scale-down delay"


# --- decisions -----------------------------------------------------------------------------------


def _to(
    current: int, replicas: int, reason: str, inputs: dict[str, Any], pool: str | None = None
) -> Decision:
    text = f"{reason}: {current} -> {replicas}" if replicas != current else reason
    return Decision(current, replicas, text, inputs, pool)


def _hold(current: int, reason: str, inputs: dict[str, Any]) -> Decision:
    return Decision(current, current, reason, inputs)


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
