"""A lean pooled HTTP/1.1 client for the one hop the gateway makes: to an endpoint's router.

General clients (aiohttp, httpx) spend most of the gateway's CPU per request on features this
hop never uses (cookies, redirects, proxies, multipart, decompression). This one speaks
just what a router answers: a request with a known body, a response with Content-Length or
chunked encoding (parsed by ``httptools``, the parser uvicorn uses), keep-alive connections
reused per host. ``https`` is spoken too, for a router reached across clusters through an
ingress or load balancer: certificates are verified against the system's trust store (an
operator's own CA by ``SSL_CERT_FILE``). Body chunks are handed on as they arrive; reading
pauses when the consumer falls more than ``_HIGH_WATER`` bytes behind. Closing a response
before its end closes its connection, which is how the router learns the client went away.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections import deque
from collections.abc import AsyncIterator
from functools import lru_cache
from urllib.parse import urlsplit

import httptools

_HIGH_WATER = 1024 * 1024
_MAX_IDLE_PER_HOST = 512


class UpstreamError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason  # "unreachable", "timeout" or "broken"


@lru_cache(maxsize=1024)
def split_url(url: str) -> tuple[str, int, bytes, bool]:
    """(host, port, path, whether TLS) of an http or https URL (a router inside the gateway's
    cluster is on plain HTTP; one in another cluster, behind its ingress, often on HTTPS)."""
    parts = urlsplit(url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise UpstreamError("unreachable")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    tls = parts.scheme == "https"
    return parts.hostname, parts.port or _DEFAULT_PORTS[parts.scheme], path.encode(), tls


_DEFAULT_PORTS = {"http": 80, "https": 443}


class Connection(asyncio.Protocol):
    def __init__(self, pool: Pool, host: str, port: int, tls: bool = False) -> None:
        self.pool, self.host, self.port, self.tls = pool, host, port, tls
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.error: UpstreamError | None = None
        self.received_any = False
        self._waiter: asyncio.Future[None] | None = None

    # ---- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._fail(UpstreamError("broken"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete:
            self._fail(UpstreamError("broken"))

    # ---- httptools callbacks ------------------------------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _HIGH_WATER and self.transport is not None:
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        # Asked now: once the message is over, the parser no longer knows.
        self.keep_alive = self.parser.should_keep_alive()
        self.complete = True
        self._wake()

    # ---- used by Response ---------------------------------------------------------------------
    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _fail(self, error: UpstreamError) -> None:
        self.error = error
        self._wake()

    async def wait(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        # A timer, not asyncio.wait_for: no extra task per wait on the hot path.
        timer = loop.call_later(timeout, self._fail, UpstreamError("timeout"))
        try:
            await self._waiter
        finally:
            timer.cancel()
            self._waiter = None

    def take(self) -> bytes:
        data = self.chunks.popleft() if len(self.chunks) == 1 else b"".join(self.chunks)
        if len(self.chunks) > 1:
            self.chunks.clear()
        was_paused = self.buffered > _HIGH_WATER
        self.buffered = 0
        if was_paused and self.transport is not None and not self.closed:
            self.transport.resume_reading()
        return data

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Response:
    def __init__(self, connection: Connection, read_timeout: float) -> None:
        self._connection = connection
        self._read_timeout = read_timeout
        self.status = connection.status
        self.raw_headers = connection.headers
        self._released = False

    @property
    def finished(self) -> bool:
        """Every byte of the body has been handed out (the chunk just taken was the last)."""
        connection = self._connection
        return connection.complete and not connection.chunks

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.raw_headers:
            if key == name:
                return value
        return None

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive; the connection goes back to the pool after the last."""
        connection = self._connection
        while True:
            if connection.chunks:
                yield connection.take()
            elif connection.complete:
                self._release()
                return
            elif connection.error is not None:
                self.close()
                raise connection.error
            else:
                await connection.wait(self._read_timeout)

    def _release(self) -> None:
        if not self._released:
            self._released = True
            self._connection.pool.release(self._connection)

    def close(self) -> None:
        """Abandon the response: its connection is closed, never reused."""
        if not self._released:
            self._released = True
            self._connection.close()


class Pool:
    def __init__(self, connect_timeout: float, read_timeout: float) -> None:
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._idle: dict[tuple[str, int, bool], list[Connection]] = {}
        self._tls: ssl.SSLContext | None = None  # made on first use: most pools never need it

    async def request(
        self, method: bytes, url: str, headers: list[tuple[bytes, bytes]], body: bytes | None
    ) -> Response:
        host, port, path, tls = split_url(url)
        head = _request_head(method, path, _host_header(host, port, tls), headers, body)
        connection = self._idle_connection(host, port, tls)
        if connection is not None:
            try:
                return await self._exchange(connection, head, body)
            except UpstreamError:
                # The router closed the idle connection as we reused it: nothing reached it.
                if connection.received_any:
                    raise
        connection = await self._connect(host, port, tls)
        return await self._exchange(connection, head, body)

    async def _exchange(self, connection: Connection, head: bytes, body: bytes | None) -> Response:
        assert connection.transport is not None
        connection.transport.write(head + body if body else head)
        try:
            while not connection.head_done:
                if connection.error is not None:
                    raise connection.error
                await connection.wait(self._read_timeout)
        except BaseException:
            connection.close()
            raise
        return Response(connection, self._read_timeout)

    def _idle_connection(self, host: str, port: int, tls: bool) -> Connection | None:
        idle = self._idle.get((host, port, tls))
        while idle:
            connection = idle.pop()
            if not connection.closed:
                return connection
        return None

    async def _connect(self, host: str, port: int, tls: bool) -> Connection:
        loop = asyncio.get_running_loop()
        context = self._tls_context() if tls else None
        try:
            _transport, connection = await asyncio.wait_for(
                loop.create_connection(
                    lambda: Connection(self, host, port, tls), host, port, ssl=context
                ),
                self._connect_timeout,
            )
        except TimeoutError as exc:
            raise UpstreamError("timeout") from exc
        except OSError as exc:  # ssl.SSLError (a certificate refused) is one
            raise UpstreamError("unreachable") from exc
        return connection

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def release(self, connection: Connection) -> None:
        if connection.closed or not connection.keep_alive:
            connection.close()
            return
        idle = self._idle.setdefault((connection.host, connection.port, connection.tls), [])
        if len(idle) >= _MAX_IDLE_PER_HOST:
            connection.close()
            return
        connection._reset()
        idle.append(connection)

    async def close(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                with contextlib.suppress(Exception):
                    connection.close()
        self._idle.clear()


@lru_cache(maxsize=1024)
def _host_header(host: str, port: int, tls: bool) -> str:
    """``Host``: the port only when it is not the scheme's own (an ingress routes by the name)."""
    return host if port == (443 if tls else 80) else f"{host}:{port}"


def _request_head(
    method: bytes, path: bytes, host: str, headers: list[tuple[bytes, bytes]], body: bytes | None
) -> bytes:
    lines = [method + b" " + path + b" HTTP/1.1", b"host: " + host.encode()]
    lines.extend(name + b": " + value for name, value in headers)
    if body is not None:
        lines.append(b"content-length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"
