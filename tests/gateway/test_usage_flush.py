"""The usage flush: Redis counters into UsageRecord exactly once, even across failed flushes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis
from django.conf import settings
from hypothesis import given
from hypothesis import strategies as st

from controlplane.models import ApiKey
from deployments.endpoints.models import Deployment
from deployments.traffic.models import UsageFlushBatch, UsageRecord
from deployments.traffic.redis_fields import as_count, as_time, as_uuid
from deployments.traffic.usage import (
    LAST_REQUEST_HASH,
    LOCK_KEY,
    MINUTES_SET,
    PROCESSING_PREFIX,
    flush_usage,
)
from gateway.limits import RateLimiter
from gateway.metering import Meter, Usage, minute_of, usage_hash
from gateway.routes import Endpoint, InferenceKey
from tests.gateway.conftest import (
    create_endpoint,
    inference_key,
    redis_client,
    run_async,
    subprocess_env,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def counted(cast):
    """Count usage the way the gateway does (its Meter, real Redis) for one key and endpoint."""
    client = redis_client()
    for name in client.scan_iter(match="plinth:usage:*"):
        client.delete(name)
    endpoint_row = create_endpoint(cast, "billing")
    plaintext = inference_key(cast)
    key_row = ApiKey.objects.get(prefix="_".join(plaintext.split("_")[:2]))
    key = InferenceKey(str(key_row.pk), key_row.prefix, "", "", frozenset(), None, None, None)
    endpoint = Endpoint(str(endpoint_row.pk), "billing", "", "active", "running", 1, "http://x")

    def count(usage: Usage | None, now: float) -> None:
        async def record() -> None:
            client = aioredis.Redis.from_url(settings.REDIS_URL)
            meter = Meter(client, RateLimiter(client))
            meter.add(key, endpoint, usage, now)
            await meter.flush()
            await client.aclose()

        run_async(record())

    return count, endpoint_row


def rows() -> list[tuple[int, int, int, int]]:
    return [
        (r.requests, r.prompt_tokens, r.cached_tokens, r.completion_tokens)
        for r in UsageRecord.objects.order_by("minute")
    ]


def test_closed_minutes_are_flushed_once_and_the_current_one_waits(counted):
    count, _ = counted
    now = time.time()
    count(Usage(10, 5, 2), now - 120)
    count(Usage(1, 1, 0), now - 120)
    count(Usage(7, 3, 0), now)

    first = flush_usage()
    again = flush_usage()

    assert (first.minutes, first.requests) == (1, 2)
    assert again.minutes == 0
    assert rows() == [(2, 11, 2, 6)]
    record = UsageRecord.objects.get()
    assert record.minute == datetime.fromtimestamp(minute_of(now - 120), tz=UTC)
    assert record.deployment_slug == "billing"


def test_the_current_minute_flushed_twice_adds_up(counted):
    count, _ = counted
    now = time.time()
    count(Usage(3, 2, 0), now)
    flush_usage(include_current=True)
    count(Usage(4, 1, 1), now)
    flush_usage(include_current=True)

    assert rows() == [(2, 7, 1, 3)]


def test_a_flush_that_died_midway_is_finished_by_the_next_one(counted):
    count, _ = counted
    client = redis_client()
    minute = minute_of(time.time() - 120)
    count(Usage(5, 5, 0), minute + 1)
    # What a flush leaves behind when it dies after claiming a minute, before the database.
    client.rename(usage_hash(minute), f"{PROCESSING_PREFIX}{minute}:crashed")
    client.srem(MINUTES_SET, minute)

    flush_usage()

    assert rows() == [(1, 5, 0, 5)]
    assert not list(client.scan_iter(match=f"{PROCESSING_PREFIX}*"))


def test_last_request_time_moves_forward_only(counted):
    count, endpoint = counted
    now = time.time()
    count(None, now)
    flush_usage()
    count(None, now - 300)  # an older time arriving late must not win
    flush_usage()

    endpoint.refresh_from_db()
    assert endpoint.last_request_at == datetime.fromtimestamp(int(now), tz=UTC)
    assert Deployment.objects.filter(last_request_at__isnull=False).count() == 1


def test_fields_no_gateway_wrote_are_skipped_and_the_batch_still_goes(counted):
    count, endpoint = counted
    client = redis_client()
    now = time.time()
    minute = minute_of(now - 120)
    count(Usage(10, 5, 2), minute + 1)
    client.hset(usage_hash(minute), mapping={
        "k1000|e1|batched|requests": 1,  # ids that are not ids (a test's, a hand-made one)
        f"{uuid.uuid4()}|{endpoint.pk}|billing|requests": "many",  # not a count
        "no separators": 1,
    })  # fmt: skip
    client.hset(LAST_REQUEST_HASH, mapping={"e1": int(now), str(uuid.uuid4()): "soon"})

    first = flush_usage()

    assert (first.minutes, first.requests, first.malformed) == (1, 1, 3)
    assert rows() == [(1, 10, 2, 5)]  # the gateway's count went in beside them
    assert not list(client.scan_iter(match=f"{PROCESSING_PREFIX}*"))  # nothing left to fail on
    endpoint.refresh_from_db()
    assert endpoint.last_request_at == datetime.fromtimestamp(int(minute + 1), tz=UTC)


@given(st.one_of(st.binary(max_size=40), st.text(max_size=40)))
def test_a_redis_field_that_does_not_parse_is_none_never_an_error(value: bytes | str) -> None:
    for read in (as_uuid, as_count, as_time):
        read(value)  # returns or answers None: never raises
    count = as_count(value)
    assert count is None or count >= 0
    assert as_time(value) is None or count is not None


def flush_killed_after(step: int) -> int:
    """A flush in a process of its own, SIGKILLed after its ``step``-th step; its exit code."""
    return subprocess.run(
        [sys.executable, "-m", "tests.gateway.crashing_flush", str(step)],
        env=subprocess_env(),
        capture_output=True,
        timeout=60,
    ).returncode


@pytest.mark.django_db(transaction=True)  # the killed flush is another process
def test_a_flush_killed_after_any_step_adds_every_count_exactly_once(counted):
    count, _ = counted
    client = redis_client()
    earlier = time.time() - 180

    def count_two_minutes() -> None:
        count(Usage(10, 5, 2), earlier)
        count(Usage(3, 1, 0), earlier + 60)

    step = 1
    while True:
        UsageRecord.objects.all().delete()
        UsageFlushBatch.objects.all().delete()
        for name in client.scan_iter(match="plinth:usage:*"):
            client.delete(name)
        count_two_minutes()

        killed = flush_killed_after(step)
        client.delete(LOCK_KEY)  # stands in for the dead flush's lock expiring
        flush_usage()  # the next flush beat runs

        assert rows() == [(1, 10, 2, 5), (1, 3, 0, 1)], f"killed after step {step}"
        assert not list(client.scan_iter(match=f"{PROCESSING_PREFIX}*")), step
        # Only this test's two minutes: a gateway elsewhere on the same Redis may be counting
        # the current minute, which no flush claims yet.
        ours = {minute_of(earlier), minute_of(earlier + 60)}
        assert not [m for m in ours if client.exists(usage_hash(m))], step
        assert not ours & {int(m) for m in client.smembers(MINUTES_SET)}, step
        if killed == 0:
            break  # the flush finished before this step: every step has been a crash point
        assert killed == -signal.SIGKILL, step
        step += 1
    assert step > 10  # the claim, two batches and the last-request times: many steps
