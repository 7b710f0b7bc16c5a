"""The SLO policy's online correction of its performance model, in both directions.

Over the samples of the look-back, ``fit`` averages each observed p90 over the model's prediction
at that sample's per-replica rate (see ``deployments.autoscaling.slo``'s docstring for which
samples count). ``hysteresis`` turns the fits into the corrections to apply from those the last pass
applied, and ``corrected_capacity`` what one replica carries under them: an endpoint slower than
its model aims at the targets divided by the correction; one faster on every latency with
evidence is the model with every time scaled. A move of the applied corrections is a
``Correction``, which the autoscaler task records as a ``ModelCorrected`` event.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from runtime.capacity import ReplicaModel

# The observed/predicted correction: newest sample's weight, and how far it may move the model.
CORRECTION_ALPHA = 0.3
CORRECTION_BOUNDS = (0.5, 4.0)
# Samples whose predicted latency is below this share of its target are left out.
CORRECTION_FLOOR = 0.3
# Hysteresis: a correction moves down (an endpoint faster than modelled) only when the fit is more
# than this share below it, and then by at most this factor per pass; up, at once.
CORRECTION_DEADBAND = 0.15
CORRECTION_DOWN_STEP = 0.8
LATENCIES = ("ttft", "itl")
# The timeline reason a moved correction is recorded under (``record_model_correction`` in
# ``deployments.autoscaling.services``); the next pass starts from the latest of each role.
MODEL_CORRECTED = "ModelCorrected"


class LatencySample(Protocol):
    """What a fit reads of one probe sample (``deployments.autoscaling.types.Sample``)."""

    @property
    def requests_per_s(self) -> float: ...
    @property
    def ttft_p90(self) -> float | None: ...
    @property
    def itl_p90(self) -> float | None: ...
    @property
    def ready(self) -> int: ...


@dataclass(frozen=True)
class Correction:
    """A change of one role's model correction: observed/predicted latency factors."""

    role: str  # "engine", "prefill" or "decode"
    before: Mapping[str, float]
    after: Mapping[str, float]
    fitted: Mapping[str, float]  # this pass's fit over the look-back, per latency with evidence

    @property
    def message(self) -> str:
        moves = ", ".join(
            f"{metric.upper()} x{self.before.get(metric, 1.0):.2f} -> "
            f"x{self.after.get(metric, 1.0):.2f}"
            for metric in LATENCIES
            if self.after.get(metric, 1.0) != self.before.get(metric, 1.0)
        )
        fits = ", ".join(f"{m.upper()} {v:.2f}" for m, v in self.fitted.items())
        return (
            f"{self.role} performance model corrected: {moves} (observed / predicted p90 over "
            f"the look-back: {fits or 'no evidence'})"
        )


def fit(
    ordered: Sequence[LatencySample], model: ReplicaModel | None, metric: str, target: float
) -> float | None:
    """EWMA of observed / predicted p90 over the samples (oldest first), bounded; None with no
    evidence. Which samples are evidence is ``evidence``'s."""
    fitted: float | None = None
    for _, observed, expected in evidence(ordered, model, metric, target):
        ratio = observed / expected
        fitted = (
            ratio if fitted is None else CORRECTION_ALPHA * ratio + (1 - CORRECTION_ALPHA) * fitted
        )
    low, high = CORRECTION_BOUNDS
    return None if fitted is None else min(high, max(low, fitted))


def evidence(
    ordered: Sequence[LatencySample], model: ReplicaModel | None, metric: str, target: float
) -> list[tuple[float, float, float]]:
    """(Per-replica requests/s, observed p90, the model's p90 at that rate) of each sample that
    says something of ``metric``, in order. A sample with no request or no latency of
    ``metric`` says nothing, nor does one where the predicted latency is far below the target
    (under ``CORRECTION_FLOOR`` of it; a target of 0 keeps every sample): the fit matters where
    capacity ends, and at light load a p90 is a few requests that met a prompt's chunk, which
    the model's p90 (a step once prefill keeps an engine busy a tenth of the time) does not
    follow. An observed latency far below the target still counts where the model predicted
    more: that is the evidence of an endpoint faster than its model."""
    if model is None:
        return []
    out = []
    for s in ordered:
        observed = s.ttft_p90 if metric == "ttft" else s.itl_p90
        if observed is None or observed <= 0 or s.requests_per_s <= 0:
            continue
        rate = s.requests_per_s / max(1, s.ready)
        predicted = model.predict(rate)
        expected = predicted.ttft_s if metric == "ttft" else predicted.itl_s
        if not math.isfinite(expected) or expected <= 0 or expected < CORRECTION_FLOOR * target:
            continue
        out.append((rate, observed, expected))
    return out


def hysteresis(before: Mapping[str, float], fitted: Mapping[str, float]) -> dict[str, float]:
    """The corrections to apply this pass, from those applied before and this pass's fits: up
    to the fit at once (a slower endpoint misses its SLO now); down only when the fit is more
    than ``CORRECTION_DEADBAND`` below what is applied, and then by at most
    ``CORRECTION_DOWN_STEP`` (bounded, as a step down of replicas is), so a fit wandering around
    one value does not move the model back and forth. A latency without evidence this pass
    lapses to the model (1), as it did before corrections were kept between passes: no factor
    outlives the load that measured it."""
    out: dict[str, float] = {}
    low, _ = CORRECTION_BOUNDS
    for metric, fit in fitted.items():
        applied = before.get(metric, 1.0)
        if fit > applied:
            out[metric] = fit
        elif fit >= applied * (1 - CORRECTION_DEADBAND):
            out[metric] = applied
        else:
            out[metric] = max(low, fit, applied * CORRECTION_DOWN_STEP)
    return {metric: round(value, 4) for metric, value in out.items()}


def moved(before: Mapping[str, float], after: Mapping[str, float]) -> bool:
    """Whether any latency's correction changed (an absent one is the model's 1)."""
    return any(before.get(m, 1.0) != after.get(m, 1.0) for m in LATENCIES)


def speed(fix: Mapping[str, float]) -> float:
    """The endpoint's time scale against its model: the largest correction with evidence."""
    return max(fix.values(), default=1.0)


def corrected_capacity(
    model: ReplicaModel, ttft: float | None, itl: float | None, fix: Mapping[str, float]
) -> tuple[float, float]:
    """(Requests/s one replica carries within the targets under the corrections, the rate the
    model is asked its concurrency at for it).

    Slower than modelled (any correction over 1): the model must aim at the targets divided by
    each correction. Faster (every correction with evidence under 1): the endpoint is the model
    with every time scaled by ``s``, whose latency at rate r is s x the model's at r x s, so it
    carries ``capacity(targets / s) / s``: its queues and KV limits move too, not only its
    latency targets (dividing the targets alone leaves a replica's capacity at the model's
    stability bound, and a faster endpoint would never need fewer replicas).
    """
    scale = speed(fix)
    if scale < 1:
        at = model.capacity_rps(_over(ttft, scale), _over(itl, scale))
        return at / scale, at
    raw = model.capacity_rps(_over(ttft, fix.get("ttft", 1.0)), _over(itl, fix.get("itl", 1.0)))
    return raw, raw


def _over(target: float | None, correction: float) -> float | None:
    return target / correction if target is not None else None
