"""Scale from zero: wake an idle endpoint and hold its requests until a replica is ready.

The first request for a scaled-to-zero endpoint asks the control plane to wake it (a Celery
task sent by name, so the gateway does not import the tasks) and every request for it waits,
up to ``hold_seconds``, for the route table to show a ready replica (the refresher reads the
held endpoints alone again every ``hold_refresh_seconds``). At most ``hold_queue`` requests
wait per endpoint; past either bound the answer is 429 with Retry-After; one that waited the
whole hold also names the start phase the endpoint's replica waits on (``X-Plinth-Start-Phase``,
from the replica facts reconcile keeps: ``deployments.starts``), or ``resume`` where the wake
brings back a warm pool's released replica. The wake-up
is asked again every ``WAKE_RESEND_SECONDS`` while requests wait, in case a message was lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from deployments import status as statuses
from gateway.errors import GatewayError, endpoint_not_found, rate_limited
from gateway.observability import HELD
from gateway.refresher import RouteRefresher
from gateway.routes import Endpoint

WAKE_TASK = "deployments.wake_deployment"
WAKE_RESEND_SECONDS = 15.0
# What a client is told to wait when the hold runs out: a cold start takes a while.
RETRY_AFTER_SECONDS = 10.0
START_PHASE_HEADER = b"x-plinth-start-phase"
logger = logging.getLogger("plinth.gateway")


def not_ready(endpoint: Endpoint) -> GatewayError:
    if endpoint.desired_state == "stopped":
        # Not a 503: a stop lasts until someone starts the endpoint, so retrying is pointless.
        # 409 (the endpoint's state refuses the request), and x-should-retry: false because
        # the openai client would otherwise retry a 409.
        message = f"endpoint {endpoint.slug!r} is stopped; start it to send requests"
        return GatewayError(409, message, code="endpoint_stopped", retryable=False)
    return GatewayError(
        503,
        f"endpoint {endpoint.slug!r} has no ready replica (status: {endpoint.status})",
        code="no_ready_replica",
        type="service_unavailable",
        retry_after=RETRY_AFTER_SECONDS,
    )


def still_starting(endpoint: Endpoint) -> GatewayError:
    """429 for a hold that ran out, naming the start phase its replica waits on (in the
    message and in ``X-Plinth-Start-Phase``) so a caller can tell a download from a warm-up."""
    phase = endpoint.start_phase or "scheduled"
    error = rate_limited(
        f"endpoint {endpoint.slug!r} is waking up from zero (waiting on: {phase}); retry shortly",
        RETRY_AFTER_SECONDS,
    )
    error.extra_headers = ((START_PHASE_HEADER, phase.encode()),)
    return error


class Holds:
    def __init__(
        self,
        refresher: RouteRefresher,
        send_wake: Callable[[str], Awaitable[None]],
        *,
        hold_seconds: float,
        queue_size: int,
    ) -> None:
        self._refresher = refresher
        self._send_wake = send_wake
        self._hold_seconds = hold_seconds
        self._queue_size = queue_size
        self._waiting: dict[str, int] = {}
        self._woken_at: dict[str, float] = {}

    def waking(self, endpoint: Endpoint) -> bool:
        """Requests are already held for it (so later ones join them, whatever its status)."""
        return self._waiting.get(endpoint.id, 0) > 0

    async def hold(self, endpoint: Endpoint) -> Endpoint:
        """The endpoint once it serves; GatewayError when it will not within the hold."""
        if self._waiting.get(endpoint.id, 0) >= self._queue_size:
            raise rate_limited(
                f"too many requests are waiting for endpoint {endpoint.slug!r} to wake up",
                RETRY_AFTER_SECONDS,
            )
        self._enter(endpoint)
        try:
            return await self._wait_serving(endpoint, time.monotonic() + self._hold_seconds)
        finally:
            self._leave(endpoint)

    async def _wait_serving(self, endpoint: Endpoint, deadline: float) -> Endpoint:
        while True:
            current = self._refresher.table.endpoints.get(endpoint.slug)
            if current is None or current.id != endpoint.id:
                raise endpoint_not_found(endpoint.slug)
            if current.serving:
                return current
            if current.desired_state != "running" or current.status == statuses.FAILED:
                raise not_ready(current)
            await self._maybe_wake(current)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise still_starting(current)
            await self._refresher.wait_reload(min(remaining, 1.0))

    async def _maybe_wake(self, endpoint: Endpoint) -> None:
        now = time.monotonic()
        if now - self._woken_at.get(endpoint.id, -1e9) < WAKE_RESEND_SECONDS:
            return
        self._woken_at[endpoint.id] = now
        try:
            await self._send_wake(endpoint.id)
        except Exception:
            # The resend (and the autoscaler) retry; holding the request is still right.
            logger.exception("could not ask the control plane to wake %s", endpoint.slug)

    def _enter(self, endpoint: Endpoint) -> None:
        self._waiting[endpoint.id] = self._waiting.get(endpoint.id, 0) + 1
        self._refresher.hold(endpoint.id)
        HELD.labels(endpoint.slug).inc()

    def _leave(self, endpoint: Endpoint) -> None:
        left = self._waiting.get(endpoint.id, 1) - 1
        if left:
            self._waiting[endpoint.id] = left
        else:
            self._waiting.pop(endpoint.id, None)
            self._woken_at.pop(endpoint.id, None)
        self._refresher.release(endpoint.id)
        HELD.labels(endpoint.slug).dec()
