"""Prefill/decode disaggregation between simulated engines, over SGLang's bootstrap protocol.

Behind ``smg --pd-disaggregation`` each request goes to a prefill and a decode engine at once,
both carrying the same ``bootstrap_host``, ``bootstrap_port`` (the prefill engine's
``--disaggregation-bootstrap-port``) and ``bootstrap_room``. As in SGLang:

- the prefill engine computes the prompt and the first token only, then publishes the request's KV
  under its room on its bootstrap server (a second listener, on the bootstrap port);
- the decode engine asks the prefill's bootstrap server for the room (waiting until the prefill
  is done), lets the KV transfer pass (``kv_transfer.TransferLink``: NIC bandwidth and backend
  latency), then places the request straight into its running batch with the prompt's KV in its
  pool: it never prefills the prompt again.

What crosses the wire is the handoff's size, not tensors: the simulator has none.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp
from aiohttp import web

from runtime.sim.errors import RequestError

BOOTSTRAP_WAIT_S = 300.0  # real seconds a decode engine waits for its prefill before failing
MAX_UNCLAIMED = 10000  # published handoffs kept for decode engines that never ask


@dataclass(frozen=True)
class Bootstrap:
    """Where a request's KV comes from: the prefill's bootstrap server and the room."""

    host: str
    port: int
    room: int


@dataclass(frozen=True)
class KvHandoff:
    """What the prefill engine hands over for one room."""

    room: int
    prompt_tokens: int
    cached_tokens: int  # of the prompt, found in the prefill engine's prefix cache
    kv_bytes: float  # per tensor-parallel rank (each rank sends its shard over its own NIC)


def bootstrap_of(body: dict[str, Any]) -> Bootstrap | None:
    """The bootstrap fields the PD router adds to a request body, or None when absent."""
    host, port, room = (body.get(k) for k in ("bootstrap_host", "bootstrap_port", "bootstrap_room"))
    if host is None and room is None:
        return None
    if not isinstance(host, str) or not isinstance(room, int) or isinstance(room, bool):
        raise RequestError(
            "bootstrap_host must be a string and bootstrap_room an integer "
            "(one request per body under PD disaggregation)"
        )
    # No bootstrap_port: the receiving engine falls back to its own configured port, as SGLang.
    return Bootstrap(host, int(port) if isinstance(port, int) else 0, room)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class KvRegistry:
    """The prefill side: handoffs by room, and decode engines waiting for theirs."""

    def __init__(self) -> None:
        self._ready: OrderedDict[int, KvHandoff] = OrderedDict()
        self._waiters: dict[int, asyncio.Future[KvHandoff]] = {}

    @property
    def pending(self) -> int:
        """Handoffs published and not yet claimed (SGLang's prefill in-flight queue)."""
        return len(self._ready)

    def publish(self, handoff: KvHandoff) -> None:
        waiter = self._waiters.pop(handoff.room, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(handoff)
            return
        self._ready[handoff.room] = handoff
        while len(self._ready) > MAX_UNCLAIMED:
            self._ready.popitem(last=False)

    async def claim(self, room: int, timeout: float = BOOTSTRAP_WAIT_S) -> KvHandoff | None:
        ready = self._ready.pop(room, None)
        if ready is not None:
            return ready
        waiter = self._waiters.setdefault(room, asyncio.get_running_loop().create_future())
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            self._waiters.pop(room, None)
            return None


def bootstrap_app(registry: KvRegistry) -> web.Application:
    """The prefill engine's bootstrap server: ``GET /sim/kv/{room}`` answers once KV is ready."""

    async def claim(request: web.Request) -> web.Response:
        try:
            room = int(request.match_info["room"])
        except ValueError:
            return web.json_response({"error": "room must be an integer"}, status=400)
        handoff = await registry.claim(room)
        if handoff is None:
            return web.json_response({"error": f"no KV for room {room}"}, status=404)
        return web.json_response(asdict(handoff))

    app = web.Application()
    app.router.add_get("/sim/kv/{room}", claim)
    app.router.add_get("/health", lambda _: _ok())
    return app


async def _ok() -> web.Response:
    return web.Response(text="ok")


class BootstrapFailed(Exception):
    """The decode engine could not get its KV from the prefill engine."""


async def fetch_handoff(bootstrap: Bootstrap, default_port: int) -> KvHandoff:
    """The decode side: wait for the room's KV at the prefill's bootstrap server."""
    port = bootstrap.port or default_port
    url = f"http://{bootstrap.host}:{port}/sim/kv/{bootstrap.room}"
    timeout = aiohttp.ClientTimeout(total=BOOTSTRAP_WAIT_S + 10)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.get(url) as response,
        ):
            if response.status != 200:
                raise BootstrapFailed(f"{url}: HTTP {response.status}")
            body = await response.json()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise BootstrapFailed(f"{url}: {exc}") from exc
    return KvHandoff(
        room=int(body["room"]),
        prompt_tokens=int(body["prompt_tokens"]),
        cached_tokens=int(body["cached_tokens"]),
        kv_bytes=float(body["kv_bytes"]),
    )
