"""Keeps the route table fresh in the background: on change notifications and periodically.

Loads run in one worker thread (the Django ORM is blocking). A notification on
``plinth:changes:<db>`` (``controlplane.notify``, ``{"kind": "deployment"|"api_key", "id": ...}``)
names what changed: only those endpoints and keys are read again and swapped into a copy of the
table, so one endpoint's change costs the same at 10 endpoints as at 1,000. Bursts coalesce into
one load of every id named meanwhile. A notification this process cannot read, and every
(re)subscription (anything may have changed while unsubscribed), reloads the table whole; so
does the periodic refresh every ``refresh_seconds``, the safety net that makes a lost
notification only a delay. While requests are held for endpoints waking up from zero, those
endpoints alone are read again every ``hold_refresh_seconds`` (one query, whatever the size of
the table), so a held request goes through as soon as a replica is ready even if the
notification saying so is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor

import redis.asyncio as aioredis

from controlplane import redis_clients
from gateway.observability import ROUTE_TABLE_CLOCK
from gateway.routes import RouteChanges, RouteTable

logger = logging.getLogger("plinth.gateway")
# The kinds of change notification that name one route (controlplane.notify's publishers).
_KINDS = ("deployment", "api_key")
LoadChanges = Callable[[Collection[str], Collection[str]], RouteChanges]


class RouteRefresher:
    def __init__(
        self,
        load: Callable[[], RouteTable],
        client: aioredis.Redis,
        *,
        refresh_seconds: float,
        hold_refresh_seconds: float,
        close: Callable[[], None] | None = None,
        load_changes: LoadChanges | None = None,
    ) -> None:
        self.table = RouteTable()
        # Endpoint id -> requests held for it to wake: those endpoints are read every
        # ``hold_refresh_seconds`` until the last of their requests leaves.
        self._held: dict[str, int] = {}
        self._load = load
        self._close = close  # releases the loading thread's resources (its DB connection)
        self._client = client
        self._refresh_seconds = refresh_seconds
        self._hold_refresh_seconds = hold_refresh_seconds
        # None: every notification reloads the whole table (a loader that reads no single route).
        self._load_changes = load_changes
        self._dirty = asyncio.Event()
        self._full = True  # the next load reads the whole table
        self._changed: dict[str, set[str]] = {kind: set() for kind in _KINDS}
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
        ROUTE_TABLE_CLOCK.loaded()  # plinth_gateway_route_table_age_seconds
        self._announce()
        return True

    async def apply_changes(self, deployment_ids: set[str], key_ids: set[str]) -> bool:
        """Read these endpoints' and keys' routes again and swap them into the table."""
        assert self._load_changes is not None
        load = self._load_changes
        try:
            changes = await asyncio.get_running_loop().run_in_executor(
                self._executor, load, deployment_ids, key_ids
            )
        except Exception:
            logger.exception("route update failed; reloading the whole table next")
            self._full = True
            self._dirty.set()
            return False
        self.table = self.table.with_changes(changes)
        self._announce()
        return True

    def _announce(self) -> None:
        # Wake everyone waiting for a change, then arm a fresh event for the next one.
        reloaded, self._reloaded = self._reloaded, asyncio.Event()
        reloaded.set()

    async def wait_reload(self, timeout: float) -> None:
        """Until the next reload finishes, or ``timeout`` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._reloaded.wait(), timeout)

    @property
    def holding(self) -> int:
        """Requests held, all endpoints together."""
        return sum(self._held.values())

    def hold(self, endpoint_id: str) -> None:
        """A request waits for ``endpoint_id`` to wake: read it often until it is released."""
        self._held[endpoint_id] = self._held.get(endpoint_id, 0) + 1
        self._dirty.set()  # the loop may be sleeping out the long interval: wait less

    def release(self, endpoint_id: str) -> None:
        left = self._held.get(endpoint_id, 1) - 1
        if left > 0:
            self._held[endpoint_id] = left
        else:
            self._held.pop(endpoint_id, None)

    def mark_dirty(self) -> None:
        """Reload the whole table soon."""
        self._full = True
        self._dirty.set()

    def mark_changed(self, message: bytes | str) -> None:
        """A change notification: the route it names is read again soon (the whole table when
        it names none this process knows how to read alone)."""
        try:
            body = json.loads(message)
            kind, object_id = body["kind"], str(body["id"])
        except (ValueError, TypeError, KeyError):
            kind, object_id = "", ""
        if self._load_changes is None or kind not in self._changed or not object_id:
            self.mark_dirty()
            return
        self._changed[kind].add(object_id)
        self._dirty.set()

    async def _refresh_loop(self) -> None:
        last_full = last_held = time.monotonic()
        while True:
            due = last_full + self._refresh_seconds
            if self._held:
                due = min(due, last_held + self._hold_refresh_seconds)
            remaining = due - time.monotonic()
            if remaining > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._dirty.wait(), remaining)
            self._dirty.clear()
            now = time.monotonic()
            held_due = bool(self._held) and now >= last_held + self._hold_refresh_seconds
            # A loader that reads no single route reads the whole table for held endpoints.
            whole_for_held = held_due and self._load_changes is None
            if self._full or now >= last_full + self._refresh_seconds or whole_for_held:
                self._full = False
                self._take_changed()  # the whole table reads them too
                last_full = last_held = time.monotonic()
                await self.reload()
                continue
            deployments, keys = self._take_changed()
            if held_due:
                deployments |= set(self._held)
                last_held = now
            if deployments or keys:
                await self.apply_changes(deployments, keys)

    def _take_changed(self) -> tuple[set[str], set[str]]:
        deployments, keys = self._changed["deployment"], self._changed["api_key"]
        self._changed = {kind: set() for kind in _KINDS}
        return deployments, keys

    async def _listen(self) -> None:
        backoff = 0.5
        while True:
            try:
                async with self._client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(redis_clients.changes_channel(self._client))
                    # Anything may have changed while we were not subscribed.
                    self.mark_dirty()
                    backoff = 0.5
                    async for message in pubsub.listen():
                        self.mark_changed(message.get("data", b""))
            except (aioredis.RedisError, OSError):
                logger.warning("change notifications lost; resubscribing in %.1fs", backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10.0)
