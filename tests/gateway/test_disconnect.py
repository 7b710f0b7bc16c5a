"""A client that hangs up mid-stream makes the engine abort the request, not finish it."""

from __future__ import annotations

import httpx
import pytest

from tests.gateway.conftest import (
    create_endpoint,
    inference_key,
    mark_serving,
    wait_routable,
)
from tests.runtime.sim.scrape import metric_sum
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def engines_sum(cluster, name: str) -> float:
    return sum(metric_sum(url, name) for url in cluster.engine_urls)


def test_client_disconnect_mid_stream_aborts_the_upstream_request(cast, sim_cluster, gateway):
    mark_serving(create_endpoint(cast, "long"), sim_cluster.url)
    key = inference_key(cast)
    wait_routable(gateway, "long", key)
    aborted_before = engines_sum(sim_cluster, "sglang:num_aborted_requests_total")
    body = {
        "model": "sim/llama-test",
        "messages": [{"role": "user", "content": "Write a very long essay"}],
        "max_tokens": 60000,
        "ignore_eos": True,
        "stream": True,
    }

    with (
        httpx.Client(timeout=30) as client,
        client.stream(
            "POST",
            f"{gateway.base_url('long')}/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {key}"},
        ) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()
        received = [line for line, _ in zip(lines, range(10), strict=False) if line]
        assert received and received[0].startswith("data: ")
        assert engines_sum(sim_cluster, "sglang:num_running_reqs") == 1
    # Leaving the block closed the connection long before 60,000 tokens were generated.

    wait_until(
        lambda: engines_sum(sim_cluster, "sglang:num_running_reqs") == 0,
        "the engine to stop generating",
        20,
    )
    assert engines_sum(sim_cluster, "sglang:num_aborted_requests_total") == aborted_before + 1
    assert engines_sum(sim_cluster, "sglang:generation_tokens_total") < 60000
