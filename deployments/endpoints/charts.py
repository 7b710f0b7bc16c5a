"""The console's time-series charts: a JSON payload for the browser and an SVG fallback.

In the browser, static/js/charts.js draws each chart with the vendored uPlot (time axis, hover
values, zoom by dragging a range, units) from :attr:`Chart.payload`, which the template puts in
a ``data-chart`` attribute as JSON: data, never executed, so the strict CSP allows it, and unlike
a ``json_script`` element it survives htmx's swaps (htmx drops every <script> it swaps in, as
configured for the CSP). Without script the
server-rendered SVG below stays: a few polylines over a time axis that the template inlines.
The x axis is time, over the chart's window when it has one (a lone sample sits at its moment,
not at the left edge) and missing values (None) break the line rather than dropping to zero.

The SVG stretches to its card (``preserveAspectRatio="none"``), so every mark drawn in it must
not depend on the aspect ratio: strokes do not scale (``vector-effect``), a lone point is a
round cap of a zero-length stroke (a circle would become an ellipse), and text is HTML laid
over the plot rather than SVG text, which would be stretched with it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT, PAD = 320, 120, 4
# Distinct on white and for the common colour-vision deficiencies; per-replica charts may need
# more than four.
COLOURS = ("#3355ff", "#15803d", "#b45309", "#9333ea", "#0e7490", "#be123c", "#4d7c0f", "#475569")
# Every mark: strokes keep their on-screen width however far the plot is stretched.
_MARK = 'fill="none" vector-effect="non-scaling-stroke" stroke-linecap="round"'


@dataclass(frozen=True)
class Series:
    label: str
    values: Sequence[float | None]


@dataclass(frozen=True)
class Chart:
    title: str
    unit: str
    times: Sequence[datetime]
    series: Sequence[Series]
    # The window the x axis spans; without one, the samples' own first and last times.
    start: datetime | None = None
    end: datetime | None = None

    @property
    def latest(self) -> list[tuple[str, str, str]]:
        """(label, colour, last value) per series, for the legend."""
        out = []
        for i, s in enumerate(self.series):
            last = next((v for v in reversed(s.values) if v is not None), None)
            shown = "\N{EN DASH}" if last is None else f"{last:,.3g}"
            out.append((s.label, COLOURS[i % len(COLOURS)], shown))
        return out

    @property
    def svg(self) -> SafeString:
        return render_svg(self)

    @property
    def dom_id(self) -> str:
        """The chart's name in the page (unique per title): what a kept zoom is keyed by."""
        return "chart-" + "".join(c if c.isalnum() else "-" for c in self.title.lower())

    @property
    def payload(self) -> dict[str, Any]:
        return chart_payload(self)

    @property
    def payload_json(self) -> str:
        """The payload as JSON, for the ``data-chart`` attribute (the template escapes it)."""
        return json.dumps(self.payload, separators=(",", ":"), allow_nan=False)


def _epoch(t: datetime) -> float:
    return round(t.timestamp(), 3)


def chart_payload(chart: Chart) -> dict[str, Any]:
    """What charts.js draws, in uPlot's column form: times in Unix seconds and one list of
    values per series (None where there was no value, which uPlot leaves as a gap).

    The window (``start``/``end``) is part of the payload so the time axis spans it however few
    samples there are: a lone sample sits at its moment, and resetting a zoom returns to the
    whole window.
    """
    times = list(chart.times)
    start = chart.start or (min(times) if times else None)
    end = chart.end or (max(times) if times else None)
    return {
        "title": chart.title,
        "unit": chart.unit,
        "start": None if start is None else _epoch(start),
        "end": None if end is None else _epoch(end),
        "times": [_epoch(t) for t in times],
        "series": [
            {
                "label": s.label,
                "colour": COLOURS[i % len(COLOURS)],
                # JSON has no NaN or infinity: such a value is a gap, like a missing one.
                "values": [
                    None if v is None or not math.isfinite(v) else float(v) for v in s.values
                ],
            }
            for i, s in enumerate(chart.series)
        ],
    }


def _peak(chart: Chart) -> float:
    values = [v for s in chart.series for v in s.values if v is not None]
    return max(values, default=0.0) or 1.0


def x_fractions(chart: Chart) -> list[float]:
    """Each time's place on the x axis, 0 (left) to 1 (right).

    Over the chart's window when it has one; else over the first to the last time, and a
    window of no length (one sample, or all at one moment) puts them in the middle.
    """
    times = list(chart.times)
    if not times:
        return []
    start = chart.start or min(times)
    end = chart.end or max(times)
    span = (end - start).total_seconds()
    if span <= 0:
        return [0.5] * len(times)
    return [min(1.0, max(0.0, (t - start).total_seconds() / span)) for t in times]


def _segments(
    xs: Sequence[float], values: Sequence[float | None], peak: float
) -> list[list[tuple[float, float]]]:
    """Runs of plotted points; a None value ends the current run."""
    segments: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    for fraction, value in zip(xs, values, strict=False):
        if value is None:
            if current:
                segments.append(current)
            current = []
            continue
        x = PAD + (WIDTH - 2 * PAD) * fraction
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * (value / peak)
        current.append((x, y))
    if current:
        segments.append(current)
    return segments


def _mark(points: list[tuple[float, float]], colour: str) -> str:
    if len(points) == 1:
        # A lone point: the round cap of a zero-length stroke is a circle on screen.
        x, y = points[0]
        return (
            f'<path class="chart-dot" d="M{x:.1f},{y:.1f}h0" stroke="{colour}" '
            f'stroke-width="6" {_MARK}/>'
        )
    joined = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<polyline stroke="{colour}" stroke-width="1.5" {_MARK} points="{joined}"/>'


def render_svg(chart: Chart) -> SafeString:
    peak = _peak(chart)
    xs = x_fractions(chart)
    marks = [
        _mark(points, COLOURS[i % len(COLOURS)])
        for i, series in enumerate(chart.series)
        for points in _segments(xs, series.values, peak)
    ]
    has_values = any(v is not None for s in chart.series for v in s.values)
    if has_values:
        label = f'<span class="chart-peak">{escape(f"{peak:,.3g}")}</span>'
    else:
        label = '<span class="chart-empty">no data yet</span>'
    summary = f"peak {peak:,.3g}" if has_values else "no data yet"
    title = escape(f"{chart.title} ({chart.unit}), {summary}")
    return mark_safe(  # noqa: S308 - every interpolated value is a number or escaped above
        f'<div class="chart" role="img" aria-label="{title}">'
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" preserveAspectRatio="none" aria-hidden="true" '
        f'focusable="false"><line x1="0" y1="{HEIGHT - PAD}" x2="{WIDTH}" y2="{HEIGHT - PAD}" '
        f'class="axis" vector-effect="non-scaling-stroke"/>' + "".join(marks) + "</svg>"
        f"{label}</div>"
    )


# ---- scatter charts (the optimizer's Pareto front) ----------------------------------------------
@dataclass(frozen=True)
class Point:
    x: float
    y: float
    label: str


@dataclass(frozen=True)
class Scatter:
    """Points without lines, on numeric axes: each group of points is one series.

    Drawn by the same charts.js (``kind: "scatter"`` in the payload: no time axis, marks only);
    the SVG fallback puts a dot per point.
    """

    title: str
    x_unit: str
    unit: str  # the y axis'
    groups: Sequence[tuple[str, Sequence[Point]]]

    @property
    def dom_id(self) -> str:
        return "chart-" + "".join(c if c.isalnum() else "-" for c in self.title.lower())

    @property
    def latest(self) -> list[tuple[str, str, str]]:
        """(label, colour, point count) per group, for the legend."""
        return [
            (label, COLOURS[i % len(COLOURS)], f"{len(points)} point{'s' * (len(points) != 1)}")
            for i, (label, points) in enumerate(self.groups)
        ]

    @property
    def payload_json(self) -> str:
        return json.dumps(scatter_payload(self), separators=(",", ":"), allow_nan=False)

    @property
    def svg(self) -> SafeString:
        return render_scatter_svg(self)


def scatter_payload(chart: Scatter) -> dict[str, Any]:
    """uPlot's column form with x ascending (its cursor needs it): one row per point, the
    point's value in its group's column and None (no mark) in the others."""
    rows = sorted(
        ((p.x, gi, p) for gi, (_, points) in enumerate(chart.groups) for p in points),
        key=lambda row: (row[0], row[1]),
    )
    return {
        "kind": "scatter",
        "title": chart.title,
        "unit": chart.unit,
        "x_unit": chart.x_unit,
        "start": None,
        "end": None,
        "times": [x for x, _, _ in rows],
        "labels": [p.label for _, _, p in rows],
        "series": [
            {
                "label": label,
                "colour": COLOURS[gi % len(COLOURS)],
                "values": [p.y if g == gi else None for _, g, p in rows],
            }
            for gi, (label, _) in enumerate(chart.groups)
        ],
    }


def render_scatter_svg(chart: Scatter) -> SafeString:
    points = [(gi, p) for gi, (_, ps) in enumerate(chart.groups) for p in ps]
    x_peak = max((p.x for _, p in points), default=0.0) or 1.0
    y_peak = max((p.y for _, p in points), default=0.0) or 1.0
    marks = []
    for gi, p in points:
        x = PAD + (WIDTH - 2 * PAD) * (p.x / x_peak)
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * (p.y / y_peak)
        marks.append(_mark([(x, y)], COLOURS[gi % len(COLOURS)]))
    summary = f"{len(points)} points, up to {x_peak:,.3g} {chart.x_unit} and {y_peak:,.3g}"
    title = escape(f"{chart.title}: {summary} {chart.unit}")
    return mark_safe(  # noqa: S308 - every interpolated value is a number or escaped above
        f'<div class="chart" role="img" aria-label="{title}">'
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" preserveAspectRatio="none" aria-hidden="true" '
        f'focusable="false"><line x1="0" y1="{HEIGHT - PAD}" x2="{WIDTH}" y2="{HEIGHT - PAD}" '
        f'class="axis" vector-effect="non-scaling-stroke"/>' + "".join(marks) + "</svg>"
        f'<span class="chart-peak">{escape(f"{y_peak:,.3g}")}</span></div>'
    )
