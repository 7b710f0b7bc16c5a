"""Request ids, host addressing, the structured access log and Prometheus metrics."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.gateway.conftest import (
    INFERENCE_DOMAIN,
    create_endpoint,
    inference_key,
    mark_serving,
    wait_routable,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
BODY = {"model": "sim/llama-test", "prompt": "hello", "max_tokens": 3, "ignore_eos": True}


@pytest.fixture
def key(cast, sim_cluster, gateway):
    mark_serving(create_endpoint(cast, "observed"), sim_cluster.url)
    plaintext = inference_key(cast)
    wait_routable(gateway, "observed", plaintext)
    return plaintext


def test_the_request_id_is_echoed_or_made_and_the_access_log_never_holds_the_key(gateway, key):
    headers = {"Authorization": f"Bearer {key}", "x-request-id": "trace-me-42"}
    answer = httpx.post(f"{gateway.base_url('observed')}/completions", json=BODY, headers=headers)
    assert answer.status_code == 200
    assert answer.headers["x-request-id"] == "trace-me-42"
    assert "x-smg-routed-worker-id" not in answer.headers  # replica addresses stay inside

    def logged() -> dict[str, object] | None:
        for line in gateway.log_text().splitlines():
            if line.startswith("{") and '"trace-me-42"' in line:
                return json.loads(line)
        return None

    line = wait_until(logged, "the access log line", 5)
    assert line["endpoint"] == "observed"
    assert line["key_prefix"] == key[:16]
    assert line["status"] == 200
    assert (line["prompt_tokens"], line["completion_tokens"]) == (
        answer.json()["usage"]["prompt_tokens"],
        3,
    )
    assert key not in gateway.log_text()

    made = httpx.get(f"{gateway.base_url('observed')}/models", headers={"Authorization": "x"})
    assert len(made.headers["x-request-id"]) == 32


def test_a_wildcard_host_addresses_the_endpoint_like_its_path(gateway, key):
    answer = httpx.post(
        f"{gateway.url}/v1/completions",
        json=BODY,
        headers={"Authorization": f"Bearer {key}", "Host": f"observed.{INFERENCE_DOMAIN}"},
    )
    assert answer.status_code == 200
    assert answer.json()["usage"]["completion_tokens"] == 3


def test_metrics_are_served_on_their_own_port(gateway, key):
    headers = {"Authorization": f"Bearer {key}"}
    httpx.post(f"{gateway.base_url('observed')}/completions", json=BODY, headers=headers)
    httpx.post(f"{gateway.base_url('observed')}/completions", content=b"{", headers=headers)

    text = httpx.get(f"{gateway.metrics_url}/metrics").text
    assert 'plinth_gateway_requests_total{endpoint="observed",status="200"}' in text
    assert 'plinth_gateway_requests_total{endpoint="observed",status="400"}' in text
    assert 'plinth_gateway_tokens_total{endpoint="observed",kind="completion"}' in text
    assert "plinth_gateway_added_latency_seconds_bucket" in text
    assert "\nplinth_gateway_route_table_age_seconds " in text
    assert httpx.get(f"{gateway.url}/metrics").status_code == 404  # not on the public port
