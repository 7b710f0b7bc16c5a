"""Revisions: the list with field-by-field changes, a diff page, and rollback."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from deployments import services
from deployments.models import Deployment, MetricSample
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


def test_a_single_sample_is_drawn_as_a_dot(alice: Client, endpoint: Deployment) -> None:
    MetricSample.objects.create(deployment=endpoint, ts=timezone.now(), requests_per_s=1.0)
    page = alice.get("/endpoints/chat/metrics/").content.decode()
    assert 'class="chart-dot"' in page and "no data yet" in page  # e.g. no speculator
    assert "<circle" not in page  # a circle would be stretched into an ellipse with the plot
