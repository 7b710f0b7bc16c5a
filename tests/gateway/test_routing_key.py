"""The gateway names each request's shareable prompt prefix for the router
(``runtime.routing_key``) and, placing by count (``routing.placement: by_count``, the default),
the replica it goes to: every request of a tenant reaches the one engine that holds its system
prompt's cache."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest

from controlplane.crypto import engine_api_key
from runtime.launch import cache_aware_args, smg_policy
from runtime.sim.launcher import SimCluster
from runtime.spec import PLINTH_ROUTING
from tests.gateway.conftest import (
    TIME_SCALE,
    create_endpoint,
    inference_key,
    mark_serving,
    wait_routable,
)
from tests.runtime.sim.scrape import metric_sum

pytestmark = pytest.mark.django_db(transaction=True)
REQUESTS = "sglang:num_requests_total"
SYSTEM = "You are the assistant of the Example Lighthouse's keeper. Answer briefly. " * 40


def test_a_tenants_requests_through_the_gateway_reach_one_engine(cast, gateway, tmp_path) -> None:
    endpoint = create_endpoint(cast, "keyed")
    knobs = replace(PLINTH_ROUTING, placement="by_count")
    policy, args = smg_policy("cache_aware", knobs), cache_aware_args(knobs)
    with SimCluster(
        engines=2,
        policy=policy,
        router_args=args,
        time_scale=TIME_SCALE,
        log_dir=tmp_path,
        api_key=engine_api_key(str(endpoint.pk)),
    ) as sim:
        mark_serving(endpoint, sim.url)
        key = inference_key(cast)
        wait_routable(gateway, "keyed", key)
        before = [metric_sum(url, REQUESTS) for url in sim.engine_urls]
        for i in range(8):
            # Each question differs; the system prompt (the shareable prefix) does not.
            messages = [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"Q{i}?"},
            ]
            answer = httpx.post(
                f"{gateway.base_url('keyed')}/chat/completions",
                json={"model": "sim/llama-test", "messages": messages, "max_tokens": 2},
                headers={"Authorization": f"Bearer {key}"},
                timeout=30,
            )
            assert answer.status_code == 200, answer.text
        grew = [
            metric_sum(url, REQUESTS) - b for url, b in zip(sim.engine_urls, before, strict=True)
        ]
        # One ready replica: one slot; smg would spread requests naming none by load or hash.
        assert sorted(grew) == [0, 8], grew
