"""The console's SVG charts: time on the x axis, and marks that survive being stretched.

The plot stretches to its card (``preserveAspectRatio="none"``), so any mark that depends on
the aspect ratio (a circle, SVG text, a scaling stroke) is drawn distorted; these tests pin
the class, for any data.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from deployments.endpoints.charts import HEIGHT, WIDTH, Chart, Series, x_fractions

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def test_a_lone_sample_sits_at_its_time_in_the_window() -> None:
    chart = Chart(
        "Requests", "req/s", [T0 + timedelta(minutes=45)], [Series("r", [3.0])],
        start=T0, end=T0 + timedelta(minutes=60),
    )  # fmt: skip
    assert x_fractions(chart) == [0.75]
    svg = str(chart.svg)
    assert svg.count('class="chart-dot"') == 1 and "<polyline" not in svg


def test_a_lone_sample_without_a_window_is_centred() -> None:
    chart = Chart("Requests", "req/s", [T0], [Series("r", [3.0])])
    assert x_fractions(chart) == [0.5]


def test_uneven_samples_are_placed_by_time_not_by_index() -> None:
    times = [T0, T0 + timedelta(minutes=1), T0 + timedelta(minutes=10)]
    assert x_fractions(Chart("c", "u", times, [Series("s", [1.0, 2.0, 3.0])])) == [0, 0.1, 1]


def test_an_empty_chart_says_so_in_html() -> None:
    svg = str(Chart("Tokens", "tok/s", [], [Series("t", [])]).svg)
    assert '<span class="chart-empty">no data yet</span>' in svg
    assert 'aria-label="Tokens (tok/s), no data yet"' in svg


values = st.lists(
    st.one_of(st.none(), st.floats(min_value=0, max_value=1e9, allow_nan=False)), max_size=40
)


@settings(max_examples=80, deadline=None)
@given(columns=st.lists(values, min_size=1, max_size=3), offsets=st.lists(st.integers(0, 3600)))
def test_every_mark_is_inside_the_plot_and_independent_of_its_shape(
    columns: list[list[float | None]], offsets: list[int]
) -> None:
    size = min(len(c) for c in columns)
    times = sorted(T0 + timedelta(seconds=o) for o in (offsets + [0] * size)[:size])
    chart = Chart(
        "c", "u", times, [Series(f"s{i}", c[:size]) for i, c in enumerate(columns)],
        start=T0, end=T0 + timedelta(hours=1),
    )  # fmt: skip
    svg = str(chart.svg)
    plot = svg.split("<svg", 1)[1].split("</svg>", 1)[0]
    # Nothing that stretches with the plot: no circles or ellipses, no SVG text.
    assert not re.search(r"<(circle|ellipse|text)\b", plot)
    marks = re.findall(r"<(?:polyline|path|line)\b[^>]*>", plot)
    assert marks and all('vector-effect="non-scaling-stroke"' in m for m in marks)
    for x, y in re.findall(r"(-?[\d.]+),(-?[\d.]+)", plot):
        assert 0 <= float(x) <= WIDTH and 0 <= float(y) <= HEIGHT
    plotted = sum(1 for c in columns for v in c[:size] if v is not None)
    drawn = plot.count("<polyline") + plot.count('class="chart-dot"')
    assert (drawn > 0) == (plotted > 0)


def test_the_payload_carries_the_window_units_and_gaps() -> None:
    chart = Chart(
        "TTFT", "ms", [T0 + timedelta(minutes=15), T0 + timedelta(minutes=30)],
        [Series("p50", [40.0, None]), Series("p90", [90.0, float("nan")])],
        start=T0, end=T0 + timedelta(hours=1),
    )  # fmt: skip
    payload = chart.payload
    assert payload["unit"] == "ms" and chart.dom_id == "chart-ttft"
    assert (payload["start"], payload["end"]) == (T0.timestamp(), T0.timestamp() + 3600)
    assert payload["times"] == [T0.timestamp() + 900, T0.timestamp() + 1800]
    assert [s["label"] for s in payload["series"]] == ["p50", "p90"]
    assert payload["series"][0]["values"] == [40.0, None]  # a gap, not a zero
    assert payload["series"][1]["values"] == [90.0, None]  # JSON has no NaN: a gap too
    assert json.loads(chart.payload_json) == payload
    assert len({s["colour"] for s in payload["series"]}) == 2
