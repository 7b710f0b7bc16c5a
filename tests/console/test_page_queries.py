"""Every console page asks the database a fixed number of queries, however many endpoints, keys,
revisions and usage rows the organization has (issue 18 item 10): lists are paginated and
searched in SQL, never walked row by row. ``bench/console.py`` measures the same pages' times
at 1,000 endpoints."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from controlplane import services as platform
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.traffic.models import MetricSample, UsageRecord
from tests.conftest import Cast

SPEC = {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}
PAGES = [
    "/endpoints/",
    "/endpoints/?q=ep",
    "/endpoints/?status=stopped",
    "/endpoints/chat/",
    "/endpoints/chat/status/",
    "/endpoints/chat/metrics/",
    "/endpoints/chat/events/",
    "/endpoints/chat/revisions/",
    "/endpoints/chat/settings/",
    "/keys/",
    "/keys/?q=k",
    "/keys/endpoints/?endpoint_q=ep",
    "/usage/",
    "/members/",
    "/secrets/",
    "/clusters/",
    "/fleet/",
    "/audit/",
    "/endpoints/new/",
]


def queries_of(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as seen:
        assert client.get(path).status_code == 200, path
    return len(seen.captured_queries)


def grow(cast: Cast, chat: Deployment, start: int, n: int) -> None:
    """``n`` more endpoints (half stopped), keys with usage, revisions and samples of chat."""
    actor = cast.actor(cast.alice, cast.acme)
    minute = timezone.now().replace(second=0, microsecond=0)
    for i in range(start, start + n):
        made = services.create_deployment(actor, slug=f"ep-{i}", name=f"Ep {i}", spec=SPEC)
        if i % 2:
            services.stop(actor, made.pk)
        key = platform.create_api_key(actor, name=f"k{i}", kind="inference")
        UsageRecord.objects.create(
            organization=cast.acme, api_key=key.api_key, deployment_id=made.pk,
            deployment_slug=made.slug, minute=minute - timedelta(minutes=i), requests=1,
        )  # fmt: skip
        platform.set_secret(actor, name=f"s{i}", value="v", description="")
    chat.refresh_from_db()
    assert chat.target_revision is not None
    base = chat.target_revision.number
    for batch in (32 + start, 64 + start):
        spec = {**SPEC, "batching": {"max_running_requests": batch}}
        services.update_settings(actor, chat.pk, spec=spec, base_revision=base, message="more")
        base += 1
    MetricSample.objects.bulk_create(
        MetricSample(deployment=chat, ts=timezone.now() - timedelta(seconds=10 * i))
        for i in range(50)
    )


@pytest.mark.parametrize("path", PAGES)
def test_a_page_takes_as_many_queries_at_fourteen_endpoints_as_at_three(
    alice: Client, cast: Cast, endpoint: Deployment, path: str
) -> None:
    grow(cast, endpoint, 0, 2)  # something on every list (a search or filter that matches)
    alice.get(path)  # the session's first touches (last-seen stamps) are not the page's
    few = queries_of(alice, path)
    grow(cast, endpoint, 2, 11)
    alice.get(path)
    assert queries_of(alice, path) <= few, path
