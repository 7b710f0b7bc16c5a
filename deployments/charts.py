"""Server-rendered SVG line charts for the console (no chart library, nothing external).

A chart is a few polylines over a shared time axis; the template inlines the SVG markup.
Values that are missing (None) break the line rather than dropping to zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT, PAD = 320, 120, 4
COLOURS = ("#3355ff", "#15803d", "#b45309", "#9333ea")


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


def _peak(chart: Chart) -> float:
    values = [v for s in chart.series for v in s.values if v is not None]
    return max(values, default=0.0) or 1.0


def _segments(values: Sequence[float | None], peak: float) -> list[str]:
    """Polyline point lists; a None value ends the current segment."""
    n = max(len(values) - 1, 1)
    segments: list[str] = []
    current: list[str] = []
    for i, value in enumerate(values):
        if value is None:
            if current:
                segments.append(" ".join(current))
            current = []
            continue
        x = PAD + (WIDTH - 2 * PAD) * i / n
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * (value / peak)
        current.append(f"{x:.1f},{y:.1f}")
    if current:
        segments.append(" ".join(current))
    return segments


def render_svg(chart: Chart) -> SafeString:
    peak = _peak(chart)
    lines = []
    for i, series in enumerate(chart.series):
        colour = COLOURS[i % len(COLOURS)]
        for points in _segments(series.values, peak):
            if " " not in points:  # a lone point draws no line: show it as a dot
                x, y = points.split(",")
                lines.append(f'<circle cx="{x}" cy="{y}" r="2.5" fill="{colour}"/>')
                continue
            lines.append(
                f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}"/>'
            )
    has_values = any(v is not None for s in chart.series for v in s.values)
    if has_values:
        lines.append(
            f'<text x="{PAD + 2}" y="{PAD + 9}" class="chart-peak">{escape(f"{peak:,.3g}")}</text>'
        )
    else:
        lines.append(
            f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="chart-empty">'
            "no data yet</text>"
        )
    title = escape(f"{chart.title} ({chart.unit}), peak {peak:,.3g}")
    return mark_safe(  # noqa: S308 - every interpolated value is a number or escaped above
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{title}" '
        f'preserveAspectRatio="none"><title>{title}</title>'
        f'<line x1="0" y1="{HEIGHT - PAD}" x2="{WIDTH}" y2="{HEIGHT - PAD}" class="axis"/>'
        + "".join(lines)
        + "</svg>"
    )
