"""Revisions: the list with field-by-field changes, a diff page, and rollback."""

from __future__ import annotations

import html
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.traffic.models import MetricSample
from tests.conftest import Cast


def _second_revision(cast: Cast, endpoint: Deployment) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    spec = {**endpoint.target_revision.spec, "batching": {"max_running_requests": 64}}
    services.update_settings(actor, endpoint.pk, spec=spec, base_revision=1, message="bigger")


def test_revisions_list_their_changes(cast: Cast, alice: Client, endpoint: Deployment) -> None:
    _second_revision(cast, endpoint)
    page = alice.get("/endpoints/chat/revisions/").content.decode()
    assert "batching.max_running_requests" in page and "bigger" in page
    assert "Roll back to r1" in page and "Roll back to r2" not in page


def test_the_diff_page_compares_two_revisions(
    cast: Cast, alice: Client, endpoint: Deployment
) -> None:
    _second_revision(cast, endpoint)
    page = alice.get("/endpoints/chat/revisions/diff/?a=1&b=2").content.decode()
    assert "batching.max_running_requests" in page and ">64<" in page


def test_a_missing_revision_is_404(alice: Client, endpoint: Deployment) -> None:
    assert alice.get("/endpoints/chat/revisions/diff/?a=1&b=9").status_code == 404
    assert alice.get("/endpoints/chat/revisions/diff/?a=x&b=1").status_code == 404
    assert alice.post("/endpoints/chat/revisions/7/rollback/").status_code == 404


def test_rolling_back_makes_a_new_revision(cast: Cast, alice: Client, endpoint: Deployment) -> None:
    _second_revision(cast, endpoint)
    response = alice.post("/endpoints/chat/revisions/1/rollback/", follow=True)
    assert b"Rolling back to revision 1" in response.content
    endpoint.refresh_from_db()
    assert endpoint.target_revision.number == 3
    assert endpoint.target_revision.rollback_of == 1
    assert endpoint.target_revision.spec["batching"]["max_running_requests"] is None


def test_metrics_render_charts_from_samples(alice: Client, endpoint: Deployment) -> None:
    now = timezone.now()
    for i in range(3):
        MetricSample.objects.create(
            deployment=endpoint, ts=now - timedelta(seconds=30 * i),
            requests_per_s=2.0 + i, ttft_p50=0.05, ttft_p90=None,
        )  # fmt: skip
    page = alice.get("/endpoints/chat/metrics/").content.decode()
    assert page.count('<div class="chart" role="img"') == 9 and "<polyline" in page
    partial = alice.get("/endpoints/chat/metrics/?window=15", HTTP_HX_REQUEST="true")
    assert b"<html" not in partial.content and b"<svg" in partial.content


def test_metrics_pass_each_chart_as_json_over_the_window(
    alice: Client, endpoint: Deployment
) -> None:
    at = timezone.now() - timedelta(minutes=5)
    MetricSample.objects.create(deployment=endpoint, ts=at, requests_per_s=2.5, ttft_p50=0.05)
    response = alice.get("/endpoints/chat/metrics/?window=15")
    page = response.content.decode()
    charts = _payloads(page)
    assert len(charts) == 9 and "/static/js/charts.js" in page and "uplot-1.6.32" in page
    ttft = charts["chart-ttft"]
    assert ttft["unit"] == "ms" and [s["label"] for s in ttft["series"]] == ["p50", "p90"]
    assert ttft["series"][0]["values"] == [50.0] and ttft["series"][1]["values"] == [None]
    assert ttft["times"] == [pytest.approx(at.timestamp(), abs=0.001)]
    assert ttft["end"] - ttft["start"] == pytest.approx(15 * 60, abs=0.01)
    assert ttft["start"] < at.timestamp() < ttft["end"]
    partial = alice.get("/endpoints/chat/metrics/?window=15", HTTP_HX_REQUEST="true")
    assert len(_payloads(partial.content.decode())) == 9  # the 15 s refresh brings the data too


def test_metrics_draw_a_line_per_replica_and_per_revision(
    alice: Client, endpoint: Deployment
) -> None:
    def replica(name: str, revision: int, rate: float) -> dict[str, Any]:
        return {"name": name, "revision": revision, "requests_per_s": rate,
                "tokens_per_s": 10 * rate, "running": 1.0, "kv_usage": rate / 10}  # fmt: skip

    now = timezone.now()
    rollout = [  # r1-a alone, then a canary of revision 2 beside it, then r2-b alone
        [replica("r1-a", 1, 1.0)],
        [replica("r1-a", 1, 1.0), replica("r2-b", 2, 3.0)],
        [replica("r2-b", 2, 4.0)],
    ]
    for i, replicas in enumerate(rollout):
        MetricSample.objects.create(
            deployment=endpoint, ts=now - timedelta(minutes=3 - i), replicas=replicas,
            requests_per_s=sum(r["requests_per_s"] for r in replicas),
        )  # fmt: skip
    charts = _payloads(alice.get("/endpoints/chat/metrics/").content.decode())
    requests = {s["label"]: s["values"] for s in charts["chart-requests"]["series"]}
    assert requests == {
        "all": [1.0, 4.0, 4.0], "revision 1": [1.0, 1.0, None], "revision 2": [None, 3.0, 4.0],
    }  # fmt: skip
    tokens = {s["label"]: s["values"] for s in charts["chart-tokens"]["series"]}
    assert tokens["r1-a"] == [10.0, 10.0, None] and tokens["r2-b"] == [None, 30.0, 40.0]
    kv = {s["label"]: s["values"] for s in charts["chart-kv-cache-usage"]["series"]}
    assert kv["r2-b"] == [None, pytest.approx(30.0), pytest.approx(40.0)]


def test_one_replica_draws_no_breakdown(alice: Client, endpoint: Deployment) -> None:
    one = {"name": "r1-a", "revision": 1, "requests_per_s": 2.0, "tokens_per_s": 5.0}
    MetricSample.objects.create(deployment=endpoint, ts=timezone.now(), replicas=[one])
    charts = _payloads(alice.get("/endpoints/chat/metrics/").content.decode())
    assert [s["label"] for s in charts["chart-requests"]["series"]] == ["all"]
    assert [s["label"] for s in charts["chart-tokens"]["series"]] == ["all"]


def _payloads(page: str) -> dict[str, Any]:
    """Each chart's JSON payload (its data-chart attribute) in the page, by data-chart-id."""
    found = re.findall(r'data-chart-id="(chart-[\w-]+)" data-chart="([^"]*)"', page)
    return {dom_id: json.loads(html.unescape(body)) for dom_id, body in found}


def test_a_single_sample_is_drawn_as_a_dot(alice: Client, endpoint: Deployment) -> None:
    MetricSample.objects.create(deployment=endpoint, ts=timezone.now(), requests_per_s=1.0)
    page = alice.get("/endpoints/chat/metrics/").content.decode()
    assert 'class="chart-dot"' in page and "no data yet" in page  # e.g. no speculator
    assert "<circle" not in page  # a circle would be stretched into an ellipse with the plot


def test_the_hit_rate_chart_has_a_line_per_kv_tier_for_a_hicache_endpoint(
    alice: Client, endpoint: Deployment
) -> None:
    """Issue 29: the probe's per-tier shares (GPU, host memory, storage) drawn beside the hit
    rate; an endpoint without HiCache's tiers keeps its one line."""
    at = timezone.now() - timedelta(minutes=2)
    MetricSample.objects.create(deployment=endpoint, ts=at, cache_hit_rate=0.2)
    plain = _payloads(alice.get("/endpoints/chat/metrics/?window=15").content.decode())
    hits = next(c for c in plain.values() if c["title"] == "Prefix cache hit rate")
    assert [s["label"] for s in hits["series"]] == ["hit rate"]
    tiers = {"device": 0.3, "host": 0.5, "storage": 0.1}
    MetricSample.objects.create(
        deployment=endpoint, ts=at + timedelta(seconds=30), cache_hit_rate=0.9, cache_tiers=tiers
    )
    charts = _payloads(alice.get("/endpoints/chat/metrics/?window=15").content.decode())
    hits = next(c for c in charts.values() if c["title"] == "Prefix cache hit rate")
    lines = {s["label"]: s["values"] for s in hits["series"]}
    assert list(lines) == ["hit rate", "GPU", "host memory", "storage"]
    assert lines["host memory"] == [None, 50.0] and lines["storage"] == [None, 10.0]
