"""The gateway presents each endpoint's engine key to its router: the router (and behind it the
engines) refuse every caller without it, so reaching them around the gateway gets nothing."""

from __future__ import annotations

import httpx
import pytest

from controlplane.crypto import engine_api_key
from runtime.sim.launcher import SimCluster
from tests.gateway.conftest import (
    TIME_SCALE,
    create_endpoint,
    inference_key,
    mark_serving,
    wait_routable,
)

pytestmark = pytest.mark.django_db(transaction=True)
BODY = {"model": "sim/llama-test", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_calls_through_the_gateway_carry_the_endpoints_key(cast, gateway, tmp_path) -> None:
    endpoint = create_endpoint(cast, "fenced")
    engine_key = engine_api_key(str(endpoint.pk))
    with SimCluster(engines=1, time_scale=TIME_SCALE, log_dir=tmp_path, api_key=engine_key) as sim:
        # Around the gateway: the router and its engine refuse a caller without the key.
        assert httpx.post(f"{sim.url}/v1/chat/completions", json=BODY).status_code == 401
        [engine_url] = sim.engine_urls
        assert httpx.post(f"{engine_url}/v1/chat/completions", json=BODY).status_code == 401
        mark_serving(endpoint, sim.url)
        key = inference_key(cast)
        wait_routable(gateway, "fenced", key)  # /models answers through the router: keyed
        answer = httpx.post(
            f"{gateway.base_url('fenced')}/chat/completions",
            json=BODY,
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
    # Each endpoint has a key of its own.
    assert engine_api_key(str(create_endpoint(cast, "other").pk)) != engine_key
