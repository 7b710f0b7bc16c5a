"""Whether each cluster's router can take requests: active probes, plus what requests found.

An endpoint spread over clusters (``gateway.fleet``) must stop sending to a cluster whose router
is gone within seconds, long before the control plane notices the cluster is lost (its grace
period is tens of seconds) and rewrites the route table. Each gateway process keeps its own view,
as an Envoy outlier detector does; nothing is shared through Redis, so a gateway never trusts
another's stale verdict about a router it can reach itself.

- **Active**: every ``probe_seconds`` (``GATEWAY_ROUTER_PROBE_SECONDS``, 1.5 s) a GET of each
  router's ``/readiness``, which smg answers 200 while it has a healthy worker and 503 with none,
  with a ``PROBE_TIMEOUT_SECONDS`` limit. Only routers of endpoints on two clusters or more are
  probed: an endpoint with one router has nowhere else to send, so a thousand endpoints on one
  cluster cost no probes at all. A router is *down* after ``FAILED_PROBES`` failed probes in a
  row, and *up* again after ``GOOD_PROBES`` good ones in a row (one good answer from a router
  that flaps does not bring traffic back).
- **Passive**: a request that reached no engine there (the connection was refused or closed
  before an answer, or the router said it had no worker) puts the router down at once; so do
  ``FAILED_ANSWERS`` 5xx answers in a row (an engine's error on one request alone is not a
  cluster failure). Any other answer counts as good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gateway.http1 import Pool, UpstreamError
from gateway.observability import ROUTER_EJECTIONS

logger = logging.getLogger("plinth.gateway")

PROBE_SECONDS = 1.5
PROBE_TIMEOUT_SECONDS = 1.0
FAILED_PROBES = 2
GOOD_PROBES = 2
FAILED_ANSWERS = 3
_READINESS = "/readiness"


@dataclass(slots=True)
class _State:
    down_since: float | None = None  # monotonic; None while up
    failed_probes: int = 0
    good_probes: int = 0
    failed_answers: int = 0


class RouterHealth:
    """Each probed router's verdict; ``up`` is what the request path reads (a dict lookup)."""

    def __init__(
        self,
        targets: Callable[[], dict[str, str]],
        *,
        probe_seconds: float = PROBE_SECONDS,
        probe_timeout: float = PROBE_TIMEOUT_SECONDS,
    ) -> None:
        # router URL -> the cluster's name, for every router to probe now.
        self._targets = targets
        self._probe_seconds = probe_seconds
        self._pool = Pool(probe_timeout, probe_timeout)
        self._timeout = probe_timeout
        self._states: dict[str, _State] = {}
        self._task: asyncio.Task[None] | None = None

    # ---- the request path --------------------------------------------------------------
    def up(self, router_url: str) -> bool:
        state = self._states.get(router_url)
        return state is None or state.down_since is None

    def unreachable(self, router_url: str, cluster: str) -> None:
        """A request there reached no engine: down now, until the probes see it back."""
        self._down(router_url, cluster, "request")

    def answered(self, router_url: str, cluster: str, status: int) -> None:
        """A request there got ``status`` back from the router (5xx: the gateway's own 503)."""
        state = self._states.get(router_url)
        if status < 500:
            if state is not None:
                state.failed_answers = 0
            return
        state = self._states.setdefault(router_url, _State())
        state.failed_answers += 1
        if state.failed_answers >= FAILED_ANSWERS:
            self._down(router_url, cluster, "answers")

    def down_since(self, router_url: str) -> float | None:
        state = self._states.get(router_url)
        return state.down_since if state is not None else None

    # ---- probing -----------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._probe_loop(), name="router-probes")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._pool.close()

    async def probe_all(self) -> None:
        """One round: probe every router an endpoint on several clusters has, at once."""
        targets = self._targets()
        for gone in set(self._states) - set(targets):
            del self._states[gone]  # no longer routed to: forget it
        await asyncio.gather(*(self._probe(url, name) for url, name in targets.items()))

    async def _probe_loop(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.probe_all()
            except Exception:  # a bug in one round must not stop the next
                logger.exception("router probes failed")
            await asyncio.sleep(max(0.0, self._probe_seconds - (time.monotonic() - started)))

    async def _probe(self, router_url: str, cluster: str) -> None:
        good = await self._ready(router_url)
        state = self._states.setdefault(router_url, _State())
        if good:
            state.failed_probes = 0
            state.good_probes += 1
            if state.down_since is not None and state.good_probes >= GOOD_PROBES:
                state.down_since, state.failed_answers = None, 0
                logger.warning("router of cluster %r is back: %s", cluster, router_url)
            return
        state.good_probes = 0
        state.failed_probes += 1
        if state.failed_probes >= FAILED_PROBES:
            self._down(router_url, cluster, "probe")

    async def _ready(self, router_url: str) -> bool:
        try:
            async with asyncio.timeout(self._timeout):
                response = await self._pool.request(b"GET", router_url + _READINESS, [], None)
                status = response.status
                async for _ in response.chunks():
                    pass
        except (UpstreamError, OSError, TimeoutError):
            return False
        return status == 200

    def _down(self, router_url: str, cluster: str, reason: str) -> None:
        state = self._states.setdefault(router_url, _State())
        state.good_probes = 0
        if state.down_since is None:
            state.down_since = time.monotonic()
            ROUTER_EJECTIONS.labels(cluster or "-", reason).inc()
            logger.warning(
                "router of cluster %r is down (%s): no new requests go there: %s",
                cluster,
                reason,
                router_url,
            )
