"""Inference keys' "last used": requests through the real gateway move the key's time forward
(via the meter's Redis hash and the beat flush), at most once a minute and never backwards."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
import redis.asyncio as aioredis
from django.conf import settings
from django.test import Client

from controlplane import services as platform
from controlplane.models import ApiKey
from deployments.traffic.key_activity import (
    KEY_LAST_USED_HASH,
    PROCESSING_PREFIX,
    flush_key_last_used,
)
from gateway import metering
from gateway.limits import RateLimiter
from gateway.metering import Meter
from gateway.routes import Endpoint, InferenceKey
from tests.gateway.conftest import (
    create_endpoint,
    inference_key,
    mark_serving,
    redis_client,
    run_async,
    wait_routable,
)
from tests.waiting import wait_until

BODY = {"model": "sim/llama-test", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def _key_row(plaintext: str) -> ApiKey:
    return ApiKey.objects.get(prefix="_".join(plaintext.split("_")[:2]))


@pytest.fixture
def clean_hash() -> None:
    client = redis_client()
    client.delete(KEY_LAST_USED_HASH)
    for name in client.scan_iter(match=f"{PROCESSING_PREFIX}*"):
        client.delete(name)


def test_the_gateway_and_the_flush_share_the_hash_name() -> None:
    # Two processes, one contract: the name is repeated on purpose, so it is pinned here.
    assert metering.KEY_LAST_USED_HASH == KEY_LAST_USED_HASH


@pytest.mark.django_db(transaction=True)
def test_a_key_used_through_the_gateway_shows_when(
    cast, sim_cluster, gateway, clean_hash: None
) -> None:
    mark_serving(create_endpoint(cast, "used"), sim_cluster.url)
    key = inference_key(cast)
    wait_routable(gateway, "used", key)
    before = datetime.now(tz=UTC).replace(microsecond=0)
    for _ in range(3):
        answer = httpx.post(
            f"{gateway.base_url('used')}/chat/completions",
            json=BODY,
            headers={"Authorization": f"Bearer {key}"},
        )
        assert answer.status_code == 200
    # The gateway meters just after answering and sends its batch within a second.
    wait_until(lambda: flush_key_last_used() or _key_row(key).last_used_at, "last used", 10)
    used = _key_row(key).last_used_at
    assert used is not None and used >= before
    client = Client()
    client.force_login(cast.alice)
    row = client.get("/keys/").content.decode().split(f'data-key="{_key_row(key).prefix}"')[1]
    assert "never" not in row.split("</tr>")[0]


def _count(key_id: str, now: float) -> None:
    """One request counted by the gateway's Meter and sent to Redis, as the gateway does."""
    key = InferenceKey(key_id, "pli_x", "", "", frozenset(), None, None, None)
    endpoint = Endpoint(key_id, "e", "", "active", "running", 1, "http://x")

    async def record() -> None:
        client = aioredis.Redis.from_url(settings.REDIS_URL)
        meter = Meter(client, RateLimiter(client))
        meter.add(key, endpoint, None, now)
        await meter.flush()
        await client.aclose()

    run_async(record())


@pytest.mark.django_db
def test_last_used_moves_forward_at_most_once_a_minute(cast, clean_hash: None) -> None:
    created = platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")
    key_id = str(created.api_key.pk)
    now = time.time()

    _count(key_id, now - 300)
    assert flush_key_last_used() == 1
    first = ApiKey.objects.get(pk=key_id).last_used_at
    assert first == datetime.fromtimestamp(int(now - 300), tz=UTC)

    _count(key_id, now - 280)  # within the minute: no write
    assert flush_key_last_used() == 0
    _count(key_id, now - 900)  # older (a retried batch): never backwards
    assert flush_key_last_used() == 0
    assert ApiKey.objects.get(pk=key_id).last_used_at == first

    _count(key_id, now)
    assert flush_key_last_used() == 1
    assert ApiKey.objects.get(pk=key_id).last_used_at - first >= timedelta(seconds=299)


@pytest.mark.django_db
def test_unknown_and_deleted_keys_are_skipped(cast, clean_hash: None) -> None:
    created = platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")
    gone = str(created.api_key.pk)
    created.api_key.delete()
    junk = {"junk": 1, str(uuid.uuid4()): "later"}  # no key, and no time
    redis_client().hset(KEY_LAST_USED_HASH, mapping={gone: int(time.time()), **junk})
    assert flush_key_last_used() == 0
    assert not list(redis_client().scan_iter(match=f"{PROCESSING_PREFIX}*"))
