"""The SLO policy's ``Rule``: a sample's load in replicas for one role ("engine", "prefill" or
"decode"), which ``deployments.autoscaling.load`` turns into replicas as any rule's.

The performance model (``runtime.capacity``, the optimizer's physics) says how many requests/s
one replica carries with TTFT and ITL p90 within the targets. The model is corrected online, as
Dynamo Planner's SLA mode does, in both directions (``deployments.autoscaling.correction``): over
the samples of the look-back, the ratio of each observed p90 to the model's prediction at
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
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from deployments.autoscaling import correction as slo_correction
from deployments.autoscaling.types import (
    BREACH_STEP,
    KV_TARGET,
    Observations,
    Rule,
    Sample,
    rounded,
)
from runtime.spec import AutoscalingSettings, SloTargets

__all__ = ["slo_rule"]


def slo_rule(
    policy: AutoscalingSettings,
    slo: SloTargets,
    role: str,
    samples: Sequence[Sample],
    observations: Observations,
    replicas: int,
    last_scaled_at: datetime | None,
    bounds: tuple[int, int],
    inputs: dict[str, Any],
) -> Rule:
    """Loads in replicas for ``role`` ("engine", "prefill" or "decode"); see the module's
    docstring."""
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
        correction={m: rounded(fix.get(m, 1.0)) for m in slo_correction.LATENCIES},
        correction_fitted={m: rounded(v) for m, v in fitted.items()},
        capacity_rps_per_replica=rounded(capacity),
        running_per_replica=rounded(running),
        prefill_tokens_within_ttft=rounded(prefill_budget),
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

    window = (
        [s for s in ordered if s.ts > ordered[-1].ts - timedelta(seconds=policy.window_seconds)]
        if ordered
        else []
    )
    if window:
        peak = max(window, key=load)
        named = signals(peak)
        if named and max(named.values()) > 0:
            inputs["driver"] = max(named, key=lambda k: named[k])
        inputs["peak_signals"] = {k: rounded(v) for k, v in named.items()}
    corrected = None
    if model is not None and slo_correction.moved(before, fix):
        fits = {m: round(v, 4) for m, v in fitted.items()}
        corrected = slo_correction.Correction(role, before, fix, fits)
    return Rule(
        floor=bounds[0],
        ceiling=bounds[1],
        per_replica=1.0,
        load=load,
        unit="replicas' worth of load",
        replicas=replicas,
        last_scaled_at=last_scaled_at,
        corrected=corrected,
    )
