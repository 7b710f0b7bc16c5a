"""Prometheus text exposition -> a typed snapshot: counters, gauges and histograms with percentiles.

Framework-free (no Django). A snapshot sums every series of a name over its labels (an engine
exports one series per DP rank; several engines add up with ``merge``), and keeps the shares of a
few labels' values apart too (``SPLIT_LABELS``: the KV tier a cached token came from). ``delta``
turns two cumulative snapshots into the figures of the interval between them, treating a counter
that went down as a restarted process (its new value is the interval's count), as Prometheus'
``rate`` does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

# Labels whose values the snapshot keeps apart, besides the sum over all of a name's series:
# ``sglang:cached_tokens_total{cache_source="host"}`` (HiCache's tiers) is counted under that key.
SPLIT_LABELS = ("cache_source",)


def split_name(name: str, label: str, value: str) -> str:
    """The key of one label value's share of a counter (``SPLIT_LABELS``)."""
    return f'{name}{{{label}="{value}"}}'


@dataclass(frozen=True)
class Histogram:
    """Cumulative buckets as (upper bound, count), sorted, ending with +Inf."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    total: float

    def minus(self, earlier: Histogram) -> Histogram:
        if self.count < earlier.count:  # the process restarted: this is all new
            return self
        before = dict(earlier.buckets)
        buckets = tuple((le, max(0.0, c - before.get(le, 0.0))) for le, c in self.buckets)
        return Histogram(buckets, self.count - earlier.count, self.total - earlier.total)

    def plus(self, other: Histogram) -> Histogram:
        merged: dict[float, float] = dict(self.buckets)
        for le, c in other.buckets:
            merged[le] = merged.get(le, 0.0) + c
        return Histogram(
            tuple(sorted(merged.items())), self.count + other.count, self.total + other.total
        )

    def quantile(self, q: float) -> float | None:
        """Prometheus' ``histogram_quantile``: linear interpolation inside the bucket."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for le, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(le):
                    return lower  # beyond the last finite bound: report that bound
                width = cumulative - below
                return lower + (le - lower) * ((rank - below) / width if width else 1.0)
            lower, below = le, cumulative
        return lower


@dataclass(frozen=True)
class MetricsSnapshot:
    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    gauge_series: dict[str, int] = field(default_factory=dict)
    histograms: dict[str, Histogram] = field(default_factory=dict)

    def counter(self, name: str) -> float:
        return self.counters.get(name, 0.0)

    def gauge(self, name: str) -> float | None:
        return self.gauges.get(name)

    def gauge_mean(self, name: str) -> float | None:
        n = self.gauge_series.get(name, 0)
        return self.gauges[name] / n if n else None

    def percentile(self, name: str, q: float) -> float | None:
        histogram = self.histograms.get(name)
        return histogram.quantile(q) if histogram else None

    def delta(self, earlier: MetricsSnapshot | None) -> MetricsSnapshot:
        """Counters and histograms of the interval since ``earlier``; gauges as now."""
        if earlier is None:
            return self
        counters = {}
        for name, value in self.counters.items():
            before = earlier.counters.get(name, 0.0)
            counters[name] = value - before if value >= before else value
        histograms = {
            name: h.minus(earlier.histograms[name]) if name in earlier.histograms else h
            for name, h in self.histograms.items()
        }
        return MetricsSnapshot(counters, dict(self.gauges), dict(self.gauge_series), histograms)

    def to_dict(self) -> dict[str, Any]:
        return {
            "counters": self.counters,
            "gauges": self.gauges,
            "gauge_series": self.gauge_series,
            "histograms": {
                name: {"buckets": [list(b) for b in h.buckets], "count": h.count, "sum": h.total}
                for name, h in self.histograms.items()
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricsSnapshot:
        histograms = {
            name: Histogram(
                tuple((float(le), float(c)) for le, c in h["buckets"]), h["count"], h["sum"]
            )
            for name, h in data.get("histograms", {}).items()
        }
        return cls(
            dict(data.get("counters", {})),
            dict(data.get("gauges", {})),
            dict(data.get("gauge_series", {})),
            histograms,
        )


def merge(snapshots: Iterable[MetricsSnapshot]) -> MetricsSnapshot:
    """Several processes' snapshots as one: counters, gauges and histograms added."""
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    series: dict[str, int] = {}
    histograms: dict[str, Histogram] = {}
    for snap in snapshots:
        for name, value in snap.counters.items():
            counters[name] = counters.get(name, 0.0) + value
        for name, value in snap.gauges.items():
            gauges[name] = gauges.get(name, 0.0) + value
            series[name] = series.get(name, 0) + snap.gauge_series.get(name, 1)
        for name, h in snap.histograms.items():
            histograms[name] = histograms[name].plus(h) if name in histograms else h
    return MetricsSnapshot(counters, gauges, series, histograms)


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus text format. Raises ``ValueError`` on malformed input."""
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    series: dict[str, int] = {}
    buckets: dict[str, dict[float, float]] = {}
    counts: dict[str, float] = {}
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, value = sample.name, float(sample.value)
            if family.type == "counter" and not name.endswith("_created"):
                counters[name] = counters.get(name, 0.0) + value
                for label in SPLIT_LABELS:
                    if label in sample.labels:
                        key = split_name(name, label, sample.labels[label])
                        counters[key] = counters.get(key, 0.0) + value
            elif family.type == "gauge":
                gauges[name] = gauges.get(name, 0.0) + value
                series[name] = series.get(name, 0) + 1
            elif family.type == "histogram":
                base = family.name
                if name.endswith("_bucket"):
                    le = float(sample.labels["le"])
                    per = buckets.setdefault(base, {})
                    per[le] = per.get(le, 0.0) + value
                elif name.endswith("_count"):
                    counts[base] = counts.get(base, 0.0) + value
                elif name.endswith("_sum"):
                    sums[base] = sums.get(base, 0.0) + value
    histograms = {
        base: Histogram(tuple(sorted(b.items())), counts.get(base, 0.0), sums.get(base, 0.0))
        for base, b in buckets.items()
    }
    return MetricsSnapshot(counters, gauges, series, histograms)
