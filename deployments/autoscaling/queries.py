"""The performance model against the endpoint's own traffic: one read, ``model_accuracy``, for
the endpoint page, the REST API and the optimizer.

For the serving revision, over the autoscaler's look-back (its window + scale-down delay), each
probe sample that is evidence (``deployments.autoscaling.correction.evidence``: the same samples
the SLO policy fits on) gives an observed TTFT / ITL p90 and the model's p90 at that sample's
per-replica rate. The read reports the model's prediction at the window's mean measured load,
the mean measured p90, the correction in force and an error band (the 10th to 90th percentile of
the per-sample observed/predicted ratios). The correction in force is the SLO autoscaler's (its
latest ``ModelCorrected`` event for the revision) for a latency its policy targets; otherwise it
is fitted from the samples by the same ``fit``, with every sample counted (no target says where
capacity ends). A split endpoint's TTFT is its prefill pool's, its ITL its decode pool's.
Throughput, which an open-loop probe measures only as the rate it was sent, comes from the
revision's latest finished benchmark: measured output tokens/s against the prediction stored
with it, per load point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from deployments.autoscaling import correction as slo_correction
from deployments.autoscaling.inputs import (
    Endpoint,
    pool_samples,
    revision_corrections,
    role_models,
    sample_of,
    sample_rows,
)
from deployments.autoscaling.types import Sample
from deployments.endpoints.models import Deployment, Revision
from deployments.experiments.models import Benchmark, BenchmarkStatus
from runtime.capacity import ReplicaModel
from runtime.spec import AutoscalingSettings

__all__ = ["Accuracy", "ModelAccuracy", "model_accuracy", "revision_rows"]

# The share of per-sample ratios the error band leaves out at each end.
BAND_TAIL = 0.1
LATENCY_NAMES = {"ttft": "TTFT p90", "itl": "ITL p90", "throughput": "Throughput"}


@dataclass(frozen=True)
class Accuracy:
    """One figure, predicted against measured. Latencies in seconds, throughput in output
    tokens/s; ratios are measured / predicted."""

    metric: Literal["ttft", "itl", "throughput"]
    predicted: float
    measured: float
    correction: float  # the factor in force on the model's figure (1: uncorrected)
    fitted: float  # what the evidence of the window fits on its own
    band: tuple[float, float]  # 10th and 90th percentile of the per-sample ratios
    samples: int
    source: Literal["autoscaler", "samples", "benchmark"]

    @property
    def name(self) -> str:
        return LATENCY_NAMES[self.metric]

    @property
    def corrected_percent(self) -> int:
        return round((self.correction - 1) * 100)

    @property
    def fitted_percent(self) -> int:
        return round((self.fitted - 1) * 100)

    @property
    def band_percent(self) -> tuple[int, int]:
        return round((self.band[0] - 1) * 100), round((self.band[1] - 1) * 100)

    @property
    def summary(self) -> str:
        """E.g. "predicted 31 ms, measured 34 ms, model corrected +9%"."""
        low, high = self.band_percent
        if self.metric == "throughput":
            return (
                f"predicted {_figure(self.metric, self.predicted)}, measured "
                f"{_figure(self.metric, self.measured)} in the latest benchmark, "
                f"{self.corrected_percent:+d}% (band {low:+d}% to {high:+d}%)"
            )
        return (
            f"predicted {_figure(self.metric, self.predicted)}, measured "
            f"{_figure(self.metric, self.measured)}, model corrected "
            f"{self.corrected_percent:+d}% (band {low:+d}% to {high:+d}%)"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "predicted": round(self.predicted, 6),
            "measured": round(self.measured, 6),
            "correction": round(self.correction, 4),
            "fitted": round(self.fitted, 4),
            "band": [round(self.band[0], 4), round(self.band[1], 4)],
            "samples": self.samples,
            "source": self.source,
            "summary": self.summary,
        }


@dataclass(frozen=True)
class ModelAccuracy:
    """The serving revision's model against what it measured over ``window_s`` before ``at``."""

    revision: int
    at: datetime
    window_s: int
    modelled: bool  # False: the model cannot price this spec; nothing to compare
    rate_rps_per_replica: float | None  # the mean measured load of the latency evidence
    figures: list[Accuracy] = field(default_factory=list)

    @property
    def correction(self) -> dict[str, float]:
        """The latency corrections in force, by metric ("ttft", "itl"), where not 1."""
        return {
            f.metric: f.correction
            for f in self.figures
            if f.metric in slo_correction.LATENCIES and f.correction != 1.0
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "at": self.at,
            "window_s": self.window_s,
            "modelled": self.modelled,
            "rate_rps_per_replica": (
                round(self.rate_rps_per_replica, 4)
                if self.rate_rps_per_replica is not None
                else None
            ),
            "correction": self.correction,
            "figures": [f.as_dict() for f in self.figures],
        }


def model_accuracy(
    deployment: Deployment, now: datetime, revision: Revision | None = None
) -> ModelAccuracy | None:
    """``revision``'s model (the serving one's by default) against the endpoint's own traffic
    (see the module's docstring); None while no revision serves."""
    revision = revision or deployment.current_revision
    if revision is None:
        return None
    endpoint = _serving(deployment, revision)
    rows = sample_rows([endpoint], now, extra=("revisions",)).get(deployment.pk, [])
    rows = revision_rows(rows, revision.number)
    models = role_models(endpoint, rows)
    window = int(endpoint.lookback.total_seconds())
    if not any(models.values()):
        return ModelAccuracy(revision.number, now, window, False, None)
    in_force = _in_force(deployment, revision, endpoint.policy)
    pools = pool_samples(rows) if endpoint.disaggregated else {}
    ordered = sorted((sample_of(row) for row in rows), key=lambda s: s.ts)
    figures, rates = [], []
    for metric in ("ttft", "itl"):
        role = ("prefill" if metric == "ttft" else "decode") if endpoint.disaggregated else "engine"
        samples = sorted(pools.get(role) or [], key=lambda s: s.ts) if pools else ordered
        target = _target(endpoint.policy, metric)
        figure, rate = _latency(metric, samples, models.get(role), target, in_force.get(role))
        if figure is not None:
            figures.append(figure)
            rates.append(rate)
    throughput = _throughput(deployment, revision)
    if throughput is not None:
        figures.append(throughput)
    rate_rps = sum(rates) / len(rates) if rates else None
    return ModelAccuracy(revision.number, now, window, True, rate_rps, figures)


def revision_rows(rows: list[dict[str, Any]], number: int) -> list[dict[str, Any]]:
    """The samples as revision ``number`` measured them. While two revisions serve (a canary, a
    rollout) a sample's own figures are both's, and its ``revisions`` holds each one's rate and
    percentiles: those are taken, over the revision's own replicas (the workload, the mean
    request, stays the sample's: both revisions are sent the same traffic). A sample the
    revision took no part in (its replicas all another's) says nothing of it."""
    out = []
    for row in rows:
        replicas = row["replicas"] or []
        mine = [r for r in replicas if r.get("revision") in (None, number)]
        figures = (row.get("revisions") or {}).get(str(number))
        if row.get("revisions") and figures is not None:
            out.append({**row, "requests_per_s": figures.get("requests_per_s") or 0.0,
                        "ttft_p90": figures.get("ttft_p90"), "itl_p90": figures.get("itl_p90"),
                        "replicas": mine, "replicas_ready": len(mine)})  # fmt: skip
        elif not row.get("revisions") and (mine or not replicas):
            out.append(row)
    return out


def _serving(deployment: Deployment, revision: Revision) -> Endpoint:
    spec: dict[str, Any] = revision.spec
    return Endpoint(
        deployment=deployment,
        policy=AutoscalingSettings.model_validate(spec.get("autoscaling") or {}),
        disaggregated=bool((spec.get("disaggregation") or {}).get("enabled")),
        spec=spec,
    )


def _target(policy: AutoscalingSettings, metric: str) -> float | None:
    """The SLO policy's target for ``metric`` in seconds; None when the autoscaler fits none."""
    if policy.slo is None:
        return None
    target = policy.slo.ttft_p90_ms if metric == "ttft" else policy.slo.itl_p90_ms
    return target / 1000 if target is not None else None


def _in_force(
    deployment: Deployment, revision: Revision, policy: AutoscalingSettings
) -> dict[str, dict[str, float]]:
    """The SLO autoscaler's corrections per role for the revision ({} without the policy)."""
    if policy.slo is None:
        return {}
    return revision_corrections({deployment.pk: revision.number}).get(deployment.pk, {})


def _latency(
    metric: Literal["ttft", "itl"],
    samples: list[Sample],
    model: ReplicaModel | None,
    target: float | None,
    applied: Mapping[str, float] | None,
) -> tuple[Accuracy | None, float]:
    """One latency's comparison and the mean measured per-replica rate of its evidence."""
    points = slo_correction.evidence(samples, model, metric, target or 0.0)
    if model is None or not points:
        return None, 0.0
    fitted = slo_correction.fit(samples, model, metric, target or 0.0)
    assert fitted is not None
    rate = sum(p[0] for p in points) / len(points)
    at = model.predict(rate)
    predicted = at.ttft_s if metric == "ttft" else at.itl_s
    if not math.isfinite(predicted) or predicted <= 0:
        predicted = sum(p[2] for p in points) / len(points)
    source: Literal["autoscaler", "samples"] = "autoscaler" if target is not None else "samples"
    # The autoscaler's, 1 until it first moves it; without a target, what the samples fit.
    correction = (applied or {}).get(metric, 1.0) if target is not None else fitted
    figure = Accuracy(
        metric=metric,
        predicted=predicted,
        measured=sum(p[1] for p in points) / len(points),
        correction=correction,
        fitted=fitted,
        band=_band([observed / expected for _, observed, expected in points]),
        samples=len(points),
        source=source,
    )
    return figure, rate


def _throughput(deployment: Deployment, revision: Revision) -> Accuracy | None:
    """Output tokens/s of the revision's latest finished benchmark against the prediction
    stored with it, at its highest load point both have; None without one."""
    benchmark = (
        Benchmark.objects.filter(
            deployment=deployment, revision=revision, status=BenchmarkStatus.SUCCEEDED
        )
        .order_by("-finished_at", "-created_at")
        .only("results", "prediction")
        .first()
    )
    if benchmark is None:
        return None
    predicted = {(p["kind"], float(p["value"])): p for p in benchmark.prediction or []}
    pairs = []
    for point in benchmark.results or []:
        guess = predicted.get((point.get("kind"), float(point.get("value") or 0)))
        measured = float(point.get("output_tokens_per_s") or 0)
        expected = float((guess or {}).get("output_tokens_per_s") or 0)
        if measured > 0 and expected > 0:
            pairs.append((float(point["value"]), measured, expected))
    if not pairs:
        return None
    _, measured, expected = max(pairs)
    ratios = [m / e for _, m, e in pairs]
    return Accuracy(
        metric="throughput",
        predicted=expected,
        measured=measured,
        correction=measured / expected,
        fitted=measured / expected,
        band=_band(ratios),
        samples=len(pairs),
        source="benchmark",
    )


def _band(ratios: list[float]) -> tuple[float, float]:
    """The 10th and 90th percentile of the ratios (nearest rank): a lone outlier of many does
    not widen it, and with few samples it is their range."""
    ordered = sorted(ratios)
    last = len(ordered) - 1
    return ordered[math.floor(BAND_TAIL * last)], ordered[math.ceil((1 - BAND_TAIL) * last)]


def _figure(metric: str, value: float) -> str:
    if metric == "throughput":
        return f"{value:,.0f} tok/s"
    return f"{value * 1000:.0f} ms" if value >= 0.01 else f"{value * 1000:.1f} ms"
