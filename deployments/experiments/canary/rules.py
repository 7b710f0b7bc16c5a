"""Canary rules: the weight's bounds, the quality-gate hook, and the automatic abort verdict.

All pure but the gate hook, which reads the revision's latest quality gate
(``deployments.experiments.quality.gate``).

A canary runs a new revision beside the serving one (the baseline) on a share of the traffic.
``judge`` compares the two over the canary's window: the error rate the gateway saw, and the TTFT
and ITL p90 the engines reported. It answers "abort" with the numbers that crossed a threshold,
or nothing while the canary holds (or while either side has too few requests to tell).

Figures come per probe sample (``MetricSample.revisions``) and per gateway bucket; a window's
p90 is the mean of its samples' p90s weighted by their requests (the samples keep percentiles,
not histograms): close enough to tell a regression of tens of percent, which is what the
thresholds are for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from deployments.experiments.quality import gate as quality_gate

if TYPE_CHECKING:
    from deployments.experiments.models import Canary

MIN_WEIGHT = 1
MAX_WEIGHT = 50


def gate_allows(canary: Canary) -> bool:
    """Whether the quality gate lets ``canary`` be promoted: the one place promote asks.

    Refused while the canary's revision carries a KL gate (``deployments.experiments.quality.gate``)
    that has not passed (nor been overridden), or when a verdict recorded on the canary says it
    failed. A revision without a gate is allowed.
    """
    return not gate_refusal(canary)


def gate_refusal(canary: Canary) -> str:
    """Why the gate refuses ``canary``'s promotion; "" when it does not."""
    why = quality_gate.refusal_for_revision(canary.revision)
    if why:
        return why
    verdict = canary.gate_verdict
    if isinstance(verdict, dict) and verdict.get("passed") is False:
        return f"the quality gate refused revision {canary.revision.number}"
    return ""


@dataclass(frozen=True)
class Thresholds:
    max_error_rate_delta: float = 0.05  # canary error rate minus baseline's, as a fraction
    max_ttft_p90_ratio: float = 1.5  # canary TTFT p90 over baseline's
    max_itl_p90_ratio: float = 1.5
    window_s: int = 300
    min_requests: int = 20  # per side within the window before anything is judged


@dataclass(frozen=True)
class SideFigures:
    """One revision's figures over the window."""

    requests: float = 0.0  # the gateway's count (every answer, errors included)
    errors: float = 0.0  # of them, answered 5xx
    ttft_p90: float | None = None
    itl_p90: float | None = None
    prompt_tokens: float = 0.0  # the gateway's usage of this revision over the window
    completion_tokens: float = 0.0

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "errors": self.errors,
            "error_rate": round(self.error_rate, 4),
            "ttft_p90": self.ttft_p90,
            "itl_p90": self.itl_p90,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


@dataclass(frozen=True)
class Verdict:
    abort: bool
    reasons: tuple[str, ...] = ()
    canary: SideFigures = SideFigures()
    baseline: SideFigures = SideFigures()

    @property
    def message(self) -> str:
        return "; ".join(self.reasons)


def weighted_p90(samples: Iterable[tuple[float, float | None]]) -> float | None:
    """The requests-weighted mean of per-sample p90s; None when no sample had one."""
    total = weight = 0.0
    for requests, p90 in samples:
        if p90 is not None and requests > 0:
            total += p90 * requests
            weight += requests
    return total / weight if weight else None


def side_figures(
    revision: int, samples: Iterable[Mapping[str, Any]], outcomes: Mapping[str, float]
) -> SideFigures:
    """``revision``'s figures: latency from the probe's per-revision sample entries (each a
    ``MetricSample.revisions`` dict), counts from the gateway's ``outcomes`` (requests, errors)."""
    entries = [s[str(revision)] for s in samples if str(revision) in s]
    return SideFigures(
        requests=float(outcomes.get("requests", 0.0)),
        errors=float(outcomes.get("errors", 0.0)),
        ttft_p90=weighted_p90((e.get("requests") or 0.0, e.get("ttft_p90")) for e in entries),
        itl_p90=weighted_p90((e.get("requests") or 0.0, e.get("itl_p90")) for e in entries),
        prompt_tokens=float(outcomes.get("prompt_tokens", 0.0)),
        completion_tokens=float(outcomes.get("completion_tokens", 0.0)),
    )


def judge(canary: SideFigures, baseline: SideFigures, limits: Thresholds) -> Verdict:
    """Abort when the canary regressed past a threshold; hold while evidence is thin."""
    if canary.requests < limits.min_requests or baseline.requests < limits.min_requests:
        return Verdict(False, canary=canary, baseline=baseline)
    reasons: list[str] = []
    delta = canary.error_rate - baseline.error_rate
    if delta > limits.max_error_rate_delta:
        reasons.append(
            f"error rate {canary.error_rate:.1%} vs {baseline.error_rate:.1%} "
            f"(+{delta * 100:.1f} points > {limits.max_error_rate_delta * 100:.1f})"
        )
    for name, ours, theirs, limit in (
        ("TTFT p90", canary.ttft_p90, baseline.ttft_p90, limits.max_ttft_p90_ratio),
        ("ITL p90", canary.itl_p90, baseline.itl_p90, limits.max_itl_p90_ratio),
    ):
        if ours is None or theirs is None or theirs <= 0:
            continue
        ratio = ours / theirs
        if ratio > limit:
            reasons.append(
                f"{name} {ours * 1000:.1f} ms vs {theirs * 1000:.1f} ms "
                f"({ratio:.2f}x > {limit:.2f}x)"
            )
    return Verdict(bool(reasons), tuple(reasons), canary, baseline)
