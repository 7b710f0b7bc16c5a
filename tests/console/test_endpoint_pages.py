"""The console's endpoint list at scale: pages cut on the server, filters (status included)
applied before the cut, and the same number of queries for 5 endpoints as for 50."""

from __future__ import annotations

import re
from typing import Any

from django.db import connection
from django.db.models import F
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from deployments.autoscaling import services as autoscaler
from deployments.autoscaling.correction import Correction
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.endpoints.queries import ENDPOINTS_PER_PAGE
from deployments.experiments.canary import services as canary_services
from tests.conftest import Cast
from tests.console.conftest import SPEC
from tests.fixtures.measured import SLO_POLICY, measure, model_of, serving_endpoint


def make(cast: Cast, n: int, start: int = 0) -> list[Deployment]:
    actor = cast.actor(cast.alice, cast.acme)
    return [
        services.create_deployment(actor, slug=f"ep-{i}", name=f"Endpoint {i}", spec=SPEC)
        for i in range(start, start + n)
    ]


def mark_active(endpoints: list[Deployment]) -> None:
    """Stand in for reconcile: one ready replica of the target revision each."""
    for endpoint in endpoints:
        Deployment.objects.filter(pk=endpoint.pk).update(
            applied_revision=endpoint.target_revision, current_revision=endpoint.target_revision,
            ready_replicas=1, total_replicas=1, first_ready_at=timezone.now(),
            observed_generation=F("generation"),
        )  # fmt: skip


def slugs(page: str) -> list[str]:
    return re.findall(r'data-slug="([^"]+)"', page)


def test_the_list_is_cut_into_pages_with_links(alice: Client, cast: Cast) -> None:
    make(cast, ENDPOINTS_PER_PAGE + 10)
    first = alice.get("/endpoints/").content.decode()
    assert len(slugs(first)) == ENDPOINTS_PER_PAGE
    assert slugs(first)[0] == f"ep-{ENDPOINTS_PER_PAGE + 9}"  # newest first
    assert "Page 1 of 2" in first and 'rel="next"' in first and "page=2" in first
    second = alice.get("/endpoints/?page=2").content.decode()
    assert slugs(second) == [f"ep-{i}" for i in range(9, -1, -1)]
    assert 'rel="prev"' in second and 'rel="next"' not in second
    # The live refresh of a page polls that page, not the first.
    assert "page=2" in alice.get("/endpoints/?page=2", HTTP_HX_REQUEST="true").content.decode()


def test_a_status_filter_applies_before_the_page_is_cut(alice: Client, cast: Cast) -> None:
    oldest = make(cast, 5)  # the oldest: on the last page of the unfiltered list
    make(cast, ENDPOINTS_PER_PAGE + 5, start=5)
    mark_active(oldest)
    page = alice.get("/endpoints/?status=active").content.decode()
    assert sorted(slugs(page)) == sorted(e.slug for e in oldest)
    assert "Page 1" not in page  # one page: no page links


def queries_for(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_the_list_takes_the_same_queries_for_5_endpoints_as_for_50(
    alice: Client, cast: Cast, django_assert_num_queries: Any
) -> None:
    mark_active(make(cast, 5))
    urls = ["/endpoints/", "/endpoints/?status=active", "/endpoints/?q=ep&page=1"]
    alice.get("/endpoints/")  # the session's first request
    few = {url: queries_for(alice, url) for url in urls}
    assert all(few.values())  # counted, not a comparison of nothing with nothing
    mark_active(make(cast, 45, start=5))
    for url in urls:
        with django_assert_num_queries(few[url]):
            alice.get(url)


# --- the performance model against the endpoint's own traffic -----------------------------------


def test_the_endpoint_page_shows_predicted_against_measured_with_the_correction_and_band(
    carol: Client, cast: Cast
) -> None:
    chat = serving_endpoint(cast, "chat")
    rate = 0.5 * model_of(chat).capacity_rps(0.5, 0.04)
    itl = [1.05, 1.1, 1.1, 1.15, 1.1, 1.1]
    measure(chat, ttft=[1.0] * 6, itl=itl, rate_per_replica=rate, end=timezone.now())
    predicted = model_of(chat).predict(rate).itl_s * 1000

    page = carol.get("/endpoints/chat/").content.decode()

    card = page[page.index('id="model-accuracy"') :]
    assert "Performance model" in card
    itl_row = re.search(r'id="accuracy-r1-itl"[^>]*>([^<]*)', card)
    assert itl_row is not None
    assert itl_row.group(1).startswith(f"predicted {predicted:.0f} ms, measured ")
    assert "model corrected +10% (band +5% to +15%)" in itl_row.group(1)
    assert "6 samples" in card


def test_the_endpoint_page_says_when_no_traffic_measured_the_model(
    carol: Client, cast: Cast
) -> None:
    serving_endpoint(cast, "chat")
    page = carol.get("/endpoints/chat/").content.decode()
    assert 'id="model-accuracy"' in page
    assert "No traffic in the last 180 s" in page


def test_while_a_canary_runs_the_card_compares_its_revision_too(carol: Client, cast: Cast) -> None:
    chat = serving_endpoint(cast, "chat")
    assert chat.current_revision is not None
    fp8 = {**chat.current_revision.spec, "quantization": {"method": "fp8"}}
    canary = canary_services.start_canary(
        cast.actor(cast.dave, cast.acme), chat.pk, spec=fp8, weight=10
    )

    page = carol.get("/endpoints/chat/").content.decode()

    card = page[page.index('id="model-accuracy"') :]
    assert 'id="accuracy-r1"' in card
    assert f'id="accuracy-r{canary.revision.number}"' in card
    assert f"r{canary.revision.number} (canary)" in card


def test_with_the_slo_policy_the_card_shows_the_autoscalers_correction_and_the_windows_fit(
    carol: Client, cast: Cast
) -> None:
    chat = serving_endpoint(cast, "chat", SLO_POLICY)
    rate = 0.75 * model_of(chat).capacity_rps(0.5, 0.04)
    measure(chat, ttft=[1.0] * 6, itl=[1.5] * 6, rate_per_replica=rate, end=timezone.now())
    step = Correction("engine", {}, {"itl": 1.2}, {"itl": 1.2})
    autoscaler.record_model_correction(chat.pk, 1, step, {})

    page = carol.get("/endpoints/chat/").content.decode()

    card = page[page.index('id="accuracy-r1-itl"') :].split("</dd>")[0]
    assert "model corrected +20%" in card
    assert "correction kept by the SLO autoscaler; this window fits +50%" in card
