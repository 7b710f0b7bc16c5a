"""Per-key requests-per-minute and tokens-per-minute limits: 429 with Retry-After, then recovery."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.gateway.conftest import (
    create_endpoint,
    inference_key,
    mark_serving,
    wait_routable,
)
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
MODEL = "sim/llama-test"


@pytest.fixture
def limited(cast, sim_cluster, gateway):
    mark_serving(create_endpoint(cast, "metered"), sim_cluster.url)

    def key_url(**limits: int) -> tuple[str, dict[str, str]]:
        key = inference_key(cast, **limits)
        wait_routable(gateway, "metered", key)
        return gateway.base_url("metered"), {"Authorization": f"Bearer {key}"}

    return key_url


def test_requests_per_minute_answers_429_with_retry_after_and_recovers(limited):
    base, headers = limited(requests_per_minute=60)
    with httpx.Client(base_url=base, headers=headers) as client:
        answers = []
        # 60 a minute may burst 60 at once; the bucket refills one a second, so going on
        # quickly must meet a refusal well before 120.
        for _ in range(120):
            answers.append(client.get("/models"))
            if answers[-1].status_code == 429:
                break
        refused = answers[-1]
        assert refused.status_code == 429
        assert len(answers) > 59  # the burst of 60, less the request wait_routable spent
        assert refused.json()["error"]["code"] == "rate_limit_exceeded"
        assert refused.json()["error"]["type"] == "rate_limit_error"
        retry_after = int(refused.headers["retry-after"])
        assert retry_after >= 1

        time.sleep(retry_after)
        assert client.get("/models").status_code == 200


def test_tokens_per_minute_refuses_once_spent_and_recovers(limited):
    base, headers = limited(tokens_per_minute=600)
    body = {"model": MODEL, "prompt": "a long story", "max_tokens": 620, "ignore_eos": True}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        first = client.post("/completions", json=body)
        assert first.status_code == 200
        assert first.json()["usage"]["total_tokens"] > 600

        # The charge reaches Redis with the gateway's next counter flush, a moment later.
        refused = wait_until(
            lambda: (
                (r := client.post("/completions", json={**body, "max_tokens": 1})).status_code
                == 429
                and r
            ),
            "the token limit to apply",
            5,
        )
        assert "tokens per minute" in refused.json()["error"]["message"]
        retry_after = int(refused.headers["retry-after"])

        time.sleep(retry_after)
        # Retry-After is an estimate: requests admitted just before the refusal may still be
        # charged after it. The key recovers soon after, without being reset.
        wait_until(
            lambda: client.post("/completions", json={**body, "max_tokens": 1}).status_code == 200,
            "the token limit to recover",
            5,
        )
