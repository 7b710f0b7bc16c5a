"""What the gateway batches off the request path: usage counters and access-log lines."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import time

import redis.asyncio as aioredis
from django.conf import settings

from gateway.limits import RateLimiter
from gateway.metering import Meter, Usage, usage_hash
from gateway.observability import AccessLog
from gateway.routes import Endpoint, InferenceKey
from tests.gateway.conftest import redis_client, run_async

ENDPOINT = Endpoint("e1", "batched", "o1", "active", "running", 1, "http://x")


def key(tokens_per_minute: int) -> InferenceKey:
    return InferenceKey(f"k{tokens_per_minute}", "pli_x", "", "o1", frozenset(), None,
                        tokens_per_minute, None)  # fmt: skip


def counted(minute_hash: str, key_id: str) -> int:
    return int(redis_client().hget(minute_hash, f"{key_id}|e1|batched|requests") or 0)


def test_a_charge_that_matters_to_a_limit_goes_out_at_once_and_small_ones_wait_their_turn():
    now = time.time()
    minute = usage_hash(int(now // 60) * 60)
    big, small = key(1_000), key(10**9)  # 500 tokens: half of one limit, nothing of the other
    redis_client().delete(minute)

    async def scenario() -> tuple[int, int, int, int]:
        client = aioredis.Redis.from_url(settings.REDIS_URL)
        limiter = RateLimiter(client)
        await limiter.load()
        # A regular flush only after a minute: anything sent sooner went as urgent.
        meter = Meter(client, limiter, flush_seconds=60, charge_seconds=0.05)
        meter.start()
        meter.add(small, ENDPOINT, Usage(400, 100), now)
        await asyncio.sleep(0.5)
        small_early = counted(minute, small.id)
        meter.add(big, ENDPOINT, Usage(400, 100), now)
        deadline = time.monotonic() + 5
        while not counted(minute, big.id) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        big_sent, small_with_it = counted(minute, big.id), counted(minute, small.id)
        await meter.stop()  # sends what is left
        small_at_stop = counted(minute, small.id)
        await client.aclose()
        return small_early, big_sent, small_with_it, small_at_stop

    try:
        small_early, big_sent, small_with_it, small_at_stop = run_async(scenario())
    finally:  # its keys are not real keys: no later flush should find their counts
        redis_client().delete(minute)

    assert small_early == 0  # held: 500 tokens are nothing against a billion a minute
    assert big_sent == 1  # sent within the charge interval: it could change a verdict
    assert small_with_it == 1  # the held count went out in the same batch
    assert small_at_stop == 1  # and was not counted twice


class CountingStream(io.StringIO):
    writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def test_access_log_lines_of_a_burst_are_written_together_and_nothing_is_lost():
    stream = CountingStream()
    log = AccessLog(flush_seconds=0.05)
    log.stream = stream

    async def burst() -> int:
        for i in range(20):
            log.write(f'{{"n": {i}}}')
        written_before_timer = stream.writes
        await asyncio.sleep(0.2)
        return written_before_timer

    assert run_async(burst()) == 0
    assert stream.writes == 1
    assert stream.getvalue().splitlines() == [f'{{"n": {i}}}' for i in range(20)]

    # Outside an event loop there is nothing to flush later from: written at once. (A thread of
    # its own: browser tests leave Playwright's loop running in the main thread.)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(log.write, '{"outside": "a loop"}').result()
    assert stream.getvalue().endswith('{"outside": "a loop"}\n')
