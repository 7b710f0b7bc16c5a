"""Prometheus text -> MetricsSnapshot: sums over series, interval deltas, histogram percentiles."""

from __future__ import annotations

import pytest

from runtime.metrics import MetricsSnapshot, merge, parse_metrics

TEXT = """\
# HELP sglang:num_requests_total Finished requests.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m",is_streaming="true"} 3.0
sglang:num_requests_total{model_name="m",is_streaming="false"} 7.0
# HELP sglang:token_usage KV usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m",dp_rank="0"} 0.5
sglang:token_usage{model_name="m",dp_rank="1"} 0.25
# HELP sglang:time_to_first_token_seconds TTFT.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1"} 2.0
sglang:time_to_first_token_seconds_bucket{le="0.2"} 8.0
sglang:time_to_first_token_seconds_bucket{le="+Inf"} 10.0
sglang:time_to_first_token_seconds_count 10.0
sglang:time_to_first_token_seconds_sum 1.5
"""


def test_counters_and_gauges_sum_over_label_sets() -> None:
    snap = parse_metrics(TEXT)
    assert snap.counter("sglang:num_requests_total") == 10
    assert snap.gauge("sglang:token_usage") == 0.75
    assert snap.gauge_mean("sglang:token_usage") == 0.375


def test_histogram_percentiles_interpolate_inside_the_bucket() -> None:
    snap = parse_metrics(TEXT)
    assert snap.percentile("sglang:time_to_first_token_seconds", 0.5) == pytest.approx(0.15)
    assert snap.percentile("sglang:time_to_first_token_seconds", 0.1) == pytest.approx(0.05)
    # Beyond the last finite bucket, the last finite bound is the honest answer.
    assert snap.percentile("sglang:time_to_first_token_seconds", 0.99) == pytest.approx(0.2)
    assert snap.percentile("missing", 0.5) is None


def test_delta_is_the_interval_and_a_restart_starts_over() -> None:
    before = parse_metrics(TEXT)
    later = TEXT.replace(" 7.0", " 17.0").replace('le="0.2"} 8.0', 'le="0.2"} 9.0')
    later = later.replace("_count 10.0", "_count 20.0").replace('+Inf"} 10.0', '+Inf"} 20.0')
    after = parse_metrics(later)
    delta = after.delta(before)
    assert delta.counter("sglang:num_requests_total") == 10
    assert delta.histograms["sglang:time_to_first_token_seconds"].count == 10
    restarted = parse_metrics(TEXT.replace(" 7.0", " 1.0"))
    assert restarted.delta(before).counter("sglang:num_requests_total") == 4


def test_snapshots_round_trip_and_merge() -> None:
    snap = parse_metrics(TEXT)
    assert MetricsSnapshot.from_dict(snap.to_dict()) == snap
    both = merge([snap, snap])
    assert both.counter("sglang:num_requests_total") == 20
    assert both.histograms["sglang:time_to_first_token_seconds"].count == 20
    assert both.gauge_mean("sglang:token_usage") == 0.375


def test_malformed_text_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        parse_metrics("sglang:x{bad 1\n")
