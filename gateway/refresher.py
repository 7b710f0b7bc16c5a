"""Keeps the route table fresh in the background: on change notifications and periodically.

Loads run in one worker thread (the Django ORM is blocking) and replace the table whole. A
notification on ``plinth:changes`` (``controlplane.notify``) marks the table dirty; bursts of
notifications coalesce into one reload. A full reload also runs every ``refresh_seconds``, so a
lost notification only delays, and every ``hold_refresh_seconds`` while requests are held for
an endpoint that is waking up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import redis.asyncio as aioredis

from gateway.routes import RouteTable

CHANNEL = "plinth:changes"  # controlplane.notify.CHANNEL; not imported to keep Django out
logger = logging.getLogger("plinth.gateway")


class RouteRefresher:
    def __init__(
        self,
        load: Callable[[], RouteTable],
        client: aioredis.Redis,
        *,
        refresh_seconds: float,
        hold_refresh_seconds: float,
        close: Callable[[], None] | None = None,
    ) -> None:
        self.table = RouteTable()
        self.holding = 0  # requests waiting for an endpoint to wake; shortens the interval
        self._load = load
        self._close = close  # releases the loading thread's resources (its DB connection)
        self._client = client
        self._refresh_seconds = refresh_seconds
        self._hold_refresh_seconds = hold_refresh_seconds
        self._dirty = asyncio.Event()
        self._reloaded = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="route-table")
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Load once (so the first requests see endpoints), then keep refreshing."""
        await self.reload()
        self._tasks = [
            asyncio.create_task(self._listen(), name="route-notifications"),
            asyncio.create_task(self._refresh_loop(), name="route-refresh"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._close is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def reload(self) -> bool:
        try:
            table = await asyncio.get_running_loop().run_in_executor(self._executor, self._load)
        except Exception:
            # Keep serving the last good table; the next interval tries again.
            logger.exception("route table reload failed; keeping the previous table")
            return False
        self.table = table
        # Wake everyone waiting for a change, then arm a fresh event for the next one.
        reloaded, self._reloaded = self._reloaded, asyncio.Event()
        reloaded.set()
        return True

    async def wait_reload(self, timeout: float) -> None:
        """Until the next reload finishes, or ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._reloaded.wait(), timeout)

    def mark_dirty(self) -> None:
        self._dirty.set()

    async def _refresh_loop(self) -> None:
        while True:
            interval = self._hold_refresh_seconds if self.holding else self._refresh_seconds
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), interval)
            self._dirty.clear()
            await self.reload()

    async def _listen(self) -> None:
        backoff = 0.5
        while True:
            try:
                async with self._client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    # Anything may have changed while we were not subscribed.
                    self.mark_dirty()
                    backoff = 0.5
                    async for _message in pubsub.listen():
                        self.mark_dirty()
            except (aioredis.RedisError, OSError):
                logger.warning("change notifications lost; resubscribing in %.1fs", backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
