"""The gateway's ASGI application: authenticate, scope, limit, forward, stream, meter.

Raw ASGI rather than a framework: the request path is a few dictionary lookups, a Redis call
only when a rate-limited key's lease runs out (``gateway.limits``), and the relay
(``gateway.upstream``), so that the gateway's own share of the latency stays well under a
millisecond. State (the route table) is loaded in the background by ``gateway.refresher``;
nothing here queries the database.

``app`` is what uvicorn serves (``python -m gateway``): it builds a :class:`Gateway` from
Django settings at lifespan start-up. Tests may build a :class:`Gateway` themselves.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, replace
from typing import Any

import redis.asyncio as aioredis

from controlplane import redis_clients
from gateway import observability as obs
from gateway.adapters import choose_model, models_list
from gateway.admission import Admission
from gateway.config import GatewayConfig
from gateway.errors import GatewayError, endpoint_not_found, rate_limited, unauthorized
from gateway.fleet import ClusterSplit, probe_targets
from gateway.health import RouterHealth
from gateway.holds import WAKE_TASK, Holds, not_ready
from gateway.http1 import Response
from gateway.inbound import (
    ClientGone,
    Prepared,
    Route,
    content_length,
    find_route,
    prepare,
    read_body,
    request_headers,
    request_id_of,
    resolve_target,
)
from gateway.limits import RateLimiter
from gateway.metering import Meter
from gateway.placement import Placements, pool_id
from gateway.refresher import LoadChanges, RouteRefresher
from gateway.routes import Endpoint, InferenceKey, RouteTable
from gateway.split import PIN_HEADER, SESSION_HEADER, Splitter, Steer, pin_of, session_of
from gateway.upstream import (
    NO_WORKER,
    NotDelivered,
    Relay,
    UpstreamBroke,
    new_pool,
    open_upstream,
    reached_no_engine,
    relay_body,
    response_headers,
    upstream_failed,
)
from gateway.usage_parsing import StreamFilter
from runtime.routing_key import context_tokens, routing_key

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

logger = logging.getLogger("plinth.gateway")
# Readiness: 503 until the route table has loaded once. Liveness (/livez): the process answers.
_HEALTH_PATHS = frozenset({"/health", "/healthz", "/readyz", "/livez"})
_JSON = [(b"content-type", b"application/json")]
# Finished requests are counted, metered and logged in batches this far apart (see settle).
_SETTLE_SECONDS = 0.05


async def send_wake_task(deployment_id: str) -> None:
    """Ask the control plane to wake an endpoint (by task name: no import of the tasks)."""
    from controlplane.celery import app as celery_app

    await asyncio.to_thread(celery_app.send_task, WAKE_TASK, args=[deployment_id])


@dataclass(frozen=True, slots=True)
class Pool:
    """One revision's replicas behind their router: where a request is forwarded."""

    router_url: str
    revision: int | None
    replicas: int  # ready, by the control plane's count
    placed: bool  # the gateway names the replica (``gateway.placement``)
    cluster: str = ""  # the cluster it runs on, for an endpoint on several (``gateway.fleet``)
    within: frozenset[int] | None = None  # slots it may be placed on (``gateway.admission``)


@dataclass(slots=True)
class Exchange(obs.AccessRecord):
    """One request's access record, plus what to meter once it is answered."""

    metered: tuple[InferenceKey, Endpoint, Relay] | None = None
    adapter: str = ""  # the LoRA adapter it called ("" the base model), metered per adapter
    # While a canary runs: which revision answered (counted per revision by the meter).
    split: tuple[str, int] | None = None  # (endpoint id, revision number)


class Gateway:
    def __init__(
        self,
        config: GatewayConfig,
        load: Callable[[], RouteTable],
        send_wake: Callable[[str], Awaitable[None]] = send_wake_task,
        close: Callable[[], None] | None = None,
        load_changes: LoadChanges | None = None,
    ) -> None:
        self.config = config
        self._load = load
        self._load_changes = load_changes
        self._close = close
        self._send_wake = send_wake
        self._unsettled: list[Exchange] = []
        self._settle_timer: asyncio.TimerHandle | None = None
        self.splitter = Splitter()

    async def startup(self) -> None:
        config = self.config
        self.redis = redis_clients.async_client(config.redis_url)
        # Subscriptions block for as long as nothing changes: no read timeout on those.
        self._pubsub_redis = redis_clients.async_subscriber(config.redis_url)
        self.limiter = RateLimiter(self.redis)
        self.placements = Placements(self.redis, down_seconds=config.slot_down_seconds)
        self.meter = Meter(self.redis, self.limiter)
        self.refresher = RouteRefresher(
            self._load,
            self._pubsub_redis,
            refresh_seconds=config.refresh_seconds,
            hold_refresh_seconds=config.hold_refresh_seconds,
            close=self._close,
            load_changes=self._load_changes,
        )
        self.holds = Holds(
            self.refresher,
            self._send_wake,
            hold_seconds=config.hold_seconds,
            queue_size=config.hold_queue,
        )
        self.pool = new_pool(config.upstream_connect_timeout, config.upstream_read_timeout)
        self.health = RouterHealth(
            lambda: probe_targets(self.refresher.table), probe_seconds=config.router_probe_seconds
        )
        self.clusters = ClusterSplit(self.health)
        self.admission = Admission(config.admission)
        try:
            await self.limiter.load()
        except aioredis.RedisError:
            logger.warning(
                "Redis is unavailable at start-up; rate limits fail open until it is back"
            )
        await self.refresher.start()
        self.health.start()
        self.meter.start()

    async def shutdown(self) -> None:
        self.settle()
        await self.refresher.stop()
        await self.health.stop()
        try:
            await self.meter.stop()
        except aioredis.RedisError:
            logger.error("usage counted in the last moments could not be sent to Redis")
        await self.pool.close()
        await self.redis.aclose()
        await self._pubsub_redis.aclose()

    # ---- one request ----------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = request_headers(scope)
        request_id = request_id_of(headers)
        record = Exchange(request_id, scope["method"], scope["path"], time.perf_counter())
        try:
            await self._serve(scope, receive, send, headers, record)
        except GatewayError as error:
            record.status, record.error = error.status, error.code
            await _send_error(send, error, request_id)
        except ClientGone:
            record.status, record.error = 499, "client_disconnected"
        finally:
            record.finish()
            obs.requests_counter(record.endpoint or "-", record.status).inc()
            self._settle_later(record)

    # ---- bookkeeping, after the answer --------------------------------------------------
    def _settle_later(self, exchange: Exchange) -> None:
        """Meter and log a finished request in the next batch, not on its own.

        Answers often arrive in bursts (an engine finishes a batch of requests in one step):
        reading usage, metering and logging each one before relaying the next would make the
        last of the burst wait for everyone's bookkeeping. Done every ``_SETTLE_SECONDS``."""
        self._unsettled.append(exchange)
        if self._settle_timer is None:
            loop = asyncio.get_running_loop()
            self._settle_timer = loop.call_later(_SETTLE_SECONDS, self.settle)

    def settle(self) -> None:
        """Book every finished request not booked yet (also called at shutdown)."""
        if self._settle_timer is not None:
            self._settle_timer.cancel()
            self._settle_timer = None
        unsettled, self._unsettled = self._unsettled, []
        for exchange in unsettled:
            try:
                if exchange.metered is not None:
                    self._meter(*exchange.metered, exchange)
                if exchange.split is not None:
                    self.meter.add_outcome(*exchange.split, exchange)
                exchange.emit()
            except Exception:  # one bad record must not lose the others'
                logger.exception("bookkeeping failed for request %s", exchange.request_id)
        obs.ACCESS_LOG.flush()  # the batch's lines in one write now, not at the log's timer

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        headers: dict[bytes, bytes],
        record: Exchange,
    ) -> None:
        host = headers.get(b"host", b"").decode("latin-1")
        target = resolve_target(scope["path"], host, self.config.inference_domain)
        if target is None:
            await self._answer_unaddressed(scope["path"], send, record)
            return
        slug, route_path = target
        route = find_route(route_path, scope["method"])
        key, endpoint = self._authorize(headers, slug, record)
        prepared = None
        if route.method == "POST":
            body = await read_body(receive, content_length(headers), self.config.max_body_bytes)
            prepared = prepare(route, body)
        elif endpoint.adapters and route.path == "/v1/models":
            record.status = 200  # its models are the route table's (``gateway.adapters``)
            await send({"type": "http.response.start", "status": 200, "headers": _JSON})
            await send({"type": "http.response.body", "body": models_list(endpoint, key)})
            return
        record.adapter, prepared = choose_model(endpoint, key, route, prepared)
        steer = Steer(headers.get(SESSION_HEADER), pin_of(headers.get(PIN_HEADER)))
        await self._forward(route, prepared, key, endpoint, receive, send, record, steer)

    def _authorize(
        self, headers: dict[bytes, bytes], slug: str, record: obs.AccessRecord
    ) -> tuple[InferenceKey, Endpoint]:
        table = self.refresher.table
        scheme, _, presented = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        key = table.authenticate(presented.strip()) if scheme.lower() == "bearer" else None
        if key is None:
            raise unauthorized()
        record.key_prefix = key.prefix
        endpoint = table.endpoints.get(slug)
        # Another organization's endpoint looks exactly like a missing one.
        if endpoint is None or endpoint.organization_id != key.organization_id:
            raise endpoint_not_found(slug)
        record.endpoint = endpoint.slug
        if not key.allows(endpoint):
            raise GatewayError(
                403, f"this API key may not call endpoint {slug!r}", code="endpoint_not_allowed"
            )
        return key, endpoint

    async def _admit(self, key: InferenceKey) -> None:
        try:
            verdict = await self.limiter.admit(key, time.time())
        except aioredis.RedisError:
            # Serving beats strict limits while Redis is away; the operator sees the warning.
            logger.warning("rate limit check skipped: Redis unavailable")
            return
        if not verdict.allowed:
            limit = (
                key.requests_per_minute if verdict.limit == "requests" else key.tokens_per_minute
            )
            raise rate_limited(
                f"rate limit reached for this key: {limit} {verdict.limit} per minute",
                verdict.retry_after,
            )

    async def _answer_unaddressed(self, path: str, send: Send, record: obs.AccessRecord) -> None:
        if path not in _HEALTH_PATHS:
            raise GatewayError(
                404, "unknown path: call /endpoints/<slug>/v1/...", code="unknown_route"
            )
        # Not ready until the route table has been loaded once: it would refuse every call.
        table = self.refresher.table
        record.status = 200 if table.loaded_at or path == "/livez" else 503
        body = {"status": "ok" if table.loaded_at else "loading", "endpoints": len(table.endpoints)}
        await send({"type": "http.response.start", "status": record.status, "headers": _JSON})
        await send({"type": "http.response.body", "body": json.dumps(body).encode()})

    async def _forward(
        self,
        route: Route,
        prepared: Prepared | None,
        key: InferenceKey,
        endpoint: Endpoint,
        receive: Receive,
        send: Send,
        record: Exchange,
        steer: Steer | None = None,
    ) -> None:
        """Admit, wait for a replica if need be, wait for a fair turn when the endpoint is
        overloaded (``gateway.admission``), relay; a client hang-up cancels any of it."""
        relay = Relay()
        handler = asyncio.current_task()
        watcher = asyncio.create_task(_watch_disconnect(receive, relay, handler))
        try:
            await self._admit(key)
            endpoint = await self._serving(endpoint)
            async with self.admission.slot(endpoint, key, route.metered) as within:
                pools = self._pick(endpoint, prepared, steer or Steer(), record)
                pools = [replace(pool, within=within) for pool in pools]
                await self._relay(route, prepared, endpoint, pools, send, record, relay, watcher)
        except asyncio.CancelledError:
            if not relay.client_gone or handler is None:
                raise
            handler.uncancel()
            # Clients may hang up as soon as they read [DONE]: that stream was answered whole.
            if not (relay.stream_filter is not None and relay.stream_filter.done):
                record.status, record.error = 499, "client_disconnected"
        finally:
            watcher.cancel()
            relay.abort()
        if route.metered and relay.status:
            record.metered = (key, endpoint, relay)

    def _pick(
        self, endpoint: Endpoint, prepared: Prepared | None, steer: Steer, record: Exchange
    ) -> list[Pool]:
        """The pools (router, revision) this request tries, in order: a canary's share goes to
        its own; the serving revision's, to its clusters in ``gateway.fleet``'s order."""
        canary = endpoint.canary
        if canary is not None:
            payload = prepared.payload if prepared is not None else None
            session = session_of(steer.session, payload) if canary.sticky else b""
            url, revision, to_canary = self.splitter.pick(
                endpoint, session, steer.pin, record.adapter
            )
            if revision is not None:
                record.split = (endpoint.id, revision)
            if to_canary:
                return [Pool(url, revision, canary.ready_replicas, canary.placed)]
        key = routing_key(prepared.payload) if prepared is not None else None
        return [
            Pool(r.router_url, endpoint.revision, r.ready_replicas, endpoint.placed, r.cluster)
            for r in self.clusters.order(endpoint, key)
        ] or [Pool(endpoint.router_url, endpoint.revision, 0, False)]

    async def _serving(self, endpoint: Endpoint) -> Endpoint:
        if endpoint.serving:
            return endpoint
        if not (endpoint.wakeable or self.holds.waking(endpoint)):
            raise not_ready(endpoint)
        return await self.holds.hold(endpoint)

    async def _relay(
        self,
        route: Route,
        prepared: Prepared | None,
        endpoint: Endpoint,
        pools: list[Pool],
        send: Send,
        record: obs.AccessRecord,
        relay: Relay,
        watcher: asyncio.Task[None],
    ) -> None:
        before = time.perf_counter()
        response, pool = await self._open_anywhere(
            route, prepared, endpoint, pools, record.request_id
        )
        relay.response = response
        answered = time.perf_counter()
        relay.status = record.status = response.status
        head = response_headers(response, record.request_id.encode())
        if pool.revision is not None:
            head.append((b"x-plinth-revision", str(pool.revision).encode()))
        if pool.cluster:
            head.append((b"x-plinth-cluster", pool.cluster.encode()))
        await send({"type": "http.response.start", "status": response.status, "headers": head})
        # The gateway's own share: everything before forwarding, plus relaying the head.
        obs.latency_histogram(endpoint.slug).observe(
            before - record.started + time.perf_counter() - answered
        )
        stream_filter = None
        if response.status == 200 and prepared is not None and prepared.stream:
            stream_filter = StreamFilter(
                native=not route.openai, strip_usage_chunk=prepared.strip_usage_chunk
            )
        try:
            await relay_body(response, send, relay, stream_filter, native=not route.openai)
        except UpstreamBroke:
            obs.UPSTREAM_ERRORS.labels(endpoint.slug, "upstream_broke").inc()
            record.error = "upstream_broke"
        watcher.cancel()  # the final send completes the response, which the watcher would see
        if not relay.completed:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _open_anywhere(
        self,
        route: Route,
        prepared: Prepared | None,
        endpoint: Endpoint,
        pools: list[Pool],
        request_id: str,
    ) -> tuple[Response, Pool]:
        """The first answer of ``pools`` (its clusters, in ``gateway.fleet``'s order): a request
        that reached no engine in one (``gateway.upstream.reached_no_engine``) goes to the next,
        and that router is down for new requests until ``gateway.health`` sees it back."""
        watched = len(pools) > 1  # one router alone has nowhere else to send
        for index, pool in enumerate(pools):
            try:
                response = await self._open(route, prepared, endpoint, pool, request_id)
            except GatewayError as error:
                if not watched:
                    raise
                if not reached_no_engine(error):
                    self.health.answered(pool.router_url, pool.cluster, error.status)
                    raise
                self.health.unreachable(pool.router_url, pool.cluster)
                if index == len(pools) - 1:
                    raise
                obs.CLUSTER_RETRIES.labels(endpoint.slug, pool.cluster or "-").inc()
                continue
            if watched:
                self.health.answered(pool.router_url, pool.cluster, response.status)
            return response, pool
        raise not_ready(endpoint)  # no pool at all: nothing serves it now

    async def _open(
        self,
        route: Route,
        prepared: Prepared | None,
        endpoint: Endpoint,
        pool: Pool,
        request_id: str,
    ) -> Response:
        body = prepared.body if prepared is not None else None
        url = pool.router_url + route.path
        key = routing_key(prepared.payload) if prepared is not None else None
        placed_key = key if pool.placed else None
        slot = self.placements.pick(pool_id(pool.router_url), pool.replicas, pool.within)
        if pool.placed:
            if key is None:
                # No prompt to keep a cache for: spread by the request id's hash (else smg's
                # fallback, the Authorization header, picks one replica) or among ``within``.
                key = request_id
            else:
                tokens = context_tokens(prepared.payload) if prepared is not None else 0
                slot = await self._slot(pool, key, tokens=tokens)
        send = functools.partial(
            open_upstream, self.pool, route.method, url, body, request_id, endpoint.upstream_auth
        )
        # A request that reached no engine (the router refused its slot, or could not connect
        # to the replica: gateway.upstream.NotDelivered) ran nothing: its slot is marked down
        # for every gateway process (gateway.placement), the key placed again among the other
        # slots and the request sent there at once. Each try leaves one more slot out; with no
        # slot left, it goes by its key's hash. A pool the gateway does not place is left to
        # its router's own retries.
        tries = pool.replicas + 1 if pool.placed else 1
        try:
            while True:
                try:
                    return await send(key, slot)
                except NotDelivered as miss:
                    obs.UPSTREAM_ERRORS.labels(endpoint.slug, miss.reason).inc()
                    tries -= 1
                    if tries < 1 or miss.reason == NO_WORKER:
                        raise upstream_failed(miss.status) from miss
                    slot = await self._moved(pool, placed_key, miss.slot)
        except GatewayError as error:
            obs.UPSTREAM_ERRORS.labels(endpoint.slug, error.code).inc()
            raise

    async def _slot(
        self, pool: Pool, key: str, down: int | None = None, tokens: int = 0
    ) -> int | None:
        """The replica slot of ``key`` in ``pool`` (``gateway.placement``), ``down`` marked down
        first; None when Redis cannot say or no slot is left: the router then places the
        request by its key's hash."""
        if pool.replicas < 1:
            return None
        try:
            return await self.placements.slot(
                pool_id(pool.router_url), key, pool.replicas, time.time(), down, tokens, pool.within
            )
        except aioredis.RedisError:
            logger.warning("placement skipped: Redis unavailable")
            return None

    async def _moved(self, pool: Pool, key: str | None, down: int | None) -> int | None:
        """The slot for a request whose try at ``down`` (None: by hash) reached no engine: its
        ``key``'s new one or, with no key, any slot up (of ``within``); None: none, or no Redis."""
        if key is not None:
            return await self._slot(pool, key, down)
        if pool.replicas < 1:
            return None
        try:
            return await self.placements.spare(
                pool_id(pool.router_url), pool.replicas, time.time(), down, pool.within
            )
        except aioredis.RedisError:
            logger.warning("placement skipped: Redis unavailable")
            return None

    def _meter(self, key: InferenceKey, endpoint: Endpoint, relay: Relay, record: Exchange) -> None:
        usage = relay.final_usage()
        if usage is not None:
            record.prompt_tokens = usage.prompt_tokens
            record.completion_tokens = usage.completion_tokens
            record.cached_tokens = usage.cached_tokens
            prompt, completion, cached = obs.token_counters(endpoint.slug)
            prompt.inc(usage.prompt_tokens)
            completion.inc(usage.completion_tokens)
            cached.inc(usage.cached_tokens)
        self.meter.add(key, endpoint, usage, record.finished_at or time.time(), record.adapter)


async def _watch_disconnect(
    receive: Receive, relay: Relay, handler: asyncio.Task[Any] | None
) -> None:
    """Cancel the handler (and so the upstream request) when the client hangs up."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            relay.client_gone = True
            relay.abort()
            if handler is not None:
                handler.cancel()
            return


async def _send_error(send: Send, error: GatewayError, request_id: str) -> None:
    headers = [*error.headers(), (b"x-request-id", request_id.encode())]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": error.body()})


class GatewayApp:
    """What uvicorn serves: builds the :class:`Gateway` at lifespan start-up."""

    def __init__(self) -> None:
        self.gateway: Gateway | None = None
        self._metrics_server: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            assert self.gateway is not None, "the lifespan did not run"
            await self.gateway(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self._start()
                except Exception as exc:
                    logger.exception("gateway start-up failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.gateway is not None:
                    await self.gateway.shutdown()
                if self._metrics_server is not None:
                    self._metrics_server.shutdown()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _start(self) -> None:
        import django

        django.setup()
        from gateway.loader import close_connections, load_changes, load_route_table

        config = GatewayConfig.from_environment()
        obs.configure_access_log()
        self._metrics_server = obs.start_metrics_server(config.metrics_host, config.metrics_port)
        self.gateway = Gateway(
            config, load_route_table, close=close_connections, load_changes=load_changes
        )
        await self.gateway.startup()
        # Django, the route table and the libraries are loaded for good: keep the collector
        # from walking them again and again (shorter pauses on the request path).
        gc.freeze()


app = GatewayApp()
