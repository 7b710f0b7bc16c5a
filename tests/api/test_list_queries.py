"""Every list of the API is a page cut on the server and costs the same number of queries for 5
rows as for 50 (the console's endpoint list likewise: tests/console/test_endpoint_pages.py)."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from controlplane import services as platform
from deployments.endpoints import services
from tests.api.conftest import SPEC, Clients
from tests.conftest import Cast


def make(cast: Cast, n: int, start: int = 0) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    for i in range(start, start + n):
        services.create_deployment(actor, slug=f"ep-{i}", name=f"Endpoint {i}", spec=SPEC)
        platform.create_api_key(actor, name=f"key-{i}", kind="inference")


URLS = [
    "deployments?limit=200",
    "deployments?status=pending&limit=200",
    "deployments?search=ep&cluster=local",
    "api-keys?limit=200",
]


def test_lists_take_the_same_queries_for_5_rows_as_for_50(
    api: Clients, cast: Cast, django_assert_num_queries: Any
) -> None:
    make(cast, 5)
    api.dave.get("deployments")  # warm the key's last-used stamp
    few = {}
    for url in URLS:
        with CaptureQueriesContext(connection) as captured:
            assert api.dave.get(url).status_code == 200, url
        few[url] = len(captured)
        assert few[url] > 0, url  # counted, not a comparison of nothing with nothing
    make(cast, 45, start=5)
    for url in URLS:
        with django_assert_num_queries(few[url]):
            body = api.dave.get(url).json()
        assert body["count"] >= 50, url


def test_api_keys_are_listed_in_pages(api: Clients, cast: Cast) -> None:
    make(cast, 5)
    page = api.carol.get("api-keys?limit=2").json()
    assert len(page["items"]) == 2 and page["count"] >= 5
    following = api.carol.get(page["next"]).json()
    assert {k["id"] for k in following["items"]}.isdisjoint({k["id"] for k in page["items"]})
