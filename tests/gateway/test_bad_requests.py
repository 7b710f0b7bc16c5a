"""Malformed requests get a clear 4xx in OpenAI's error shape and never reach the engine."""

from __future__ import annotations

import httpx
import pytest

from tests.gateway.conftest import create_endpoint, inference_key, mark_serving, wait_routable
from tests.runtime.sim.scrape import metric_sum

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def endpoint_url(cast, sim_cluster, gateway):
    mark_serving(create_endpoint(cast, "strict"), sim_cluster.url)
    key = inference_key(cast)
    wait_routable(gateway, "strict", key)
    return f"{gateway.base_url('strict')}/chat/completions", {"Authorization": f"Bearer {key}"}


def engine_requests(cluster) -> float:
    return sum(
        metric_sum(url, "sglang:http_requests_total", endpoint="/v1/chat/completions")
        for url in cluster.engine_urls
    )


@pytest.mark.parametrize(
    ("body", "status", "code", "param"),
    [
        (b'{"model": "m", "messages": [', 400, "invalid_json", None),
        (b'["not", "an", "object"]', 400, "invalid_json", None),
        (b'{"messages": [{"role": "user", "content": "hi"}]}', 400, "missing_model", "model"),
        (
            b'{"model": "m", "stream": true, "stream_options": 3}',
            400,
            "invalid_value",
            "stream_options",
        ),
        (b"x" * (20 * 1024 * 1024), 413, "request_too_large", None),
        (b"[" * 100_000, 400, "invalid_json", None),
    ],
    ids=[
        "malformed-json",
        "not-an-object",
        "missing-model",
        "bad-stream-options",
        "20-MB-body",
        "deeply-nested",
    ],
)
def test_bad_bodies_are_refused_before_the_engine(
    endpoint_url, sim_cluster, body, status, code, param
):
    url, headers = endpoint_url
    before = engine_requests(sim_cluster)

    answer = httpx.post(url, content=body, headers={**headers, "content-type": "application/json"})

    assert answer.status_code == status
    error = answer.json()["error"]
    assert (error["code"], error["param"]) == (code, param)
    assert error["message"]
    assert engine_requests(sim_cluster) == before


def test_unknown_routes_and_wrong_methods_are_refused(endpoint_url, gateway):
    url, headers = endpoint_url
    assert httpx.get(url, headers=headers).status_code == 405
    unknown = httpx.post(url.replace("chat/completions", "admin/flush"), headers=headers)
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "unknown_route"
    assert httpx.get(f"{gateway.url}/nowhere").status_code == 404
