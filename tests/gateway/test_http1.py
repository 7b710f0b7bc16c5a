"""The gateway's upstream HTTP/1.1 client against small real servers on loopback."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path

import pytest

from gateway.http1 import Pool, UpstreamError
from tests.gateway.conftest import run_async


async def serve(handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1/x"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


async def collect(pool: Pool, url: str, body: bytes | None = b"{}") -> tuple[int, bytes]:
    response = await pool.request(b"POST", url, [(b"content-type", b"application/json")], body)
    return response.status, b"".join([chunk async for chunk in response.chunks()])


def test_chunked_answers_are_decoded_and_the_connection_is_reused():
    connections = 0

    async def handler(reader, writer):
        nonlocal connections
        connections += 1
        for _ in range(2):
            await read_request(reader)
            writer.write(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
            )
            await writer.drain()
        writer.close()

    async def scenario():
        server, url = await serve(handler)
        pool = Pool(2, 5)
        first = await collect(pool, url)
        second = await collect(pool, url)
        await pool.close()
        server.close()
        return first, second

    first, second = run_async(scenario())
    assert first == second == (200, b"hello world")
    assert connections == 1


def test_an_idle_connection_the_server_closed_is_replaced_transparently():
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()  # keep-alive announced, then closed: the next reuse must not fail

    async def scenario():
        server, url = await serve(handler)
        pool = Pool(2, 5)
        results = [await collect(pool, url) for _ in range(3)]
        await pool.close()
        server.close()
        return results

    assert run_async(scenario()) == [(200, b"ok")] * 3


def test_a_silent_router_times_out_and_a_closed_port_is_unreachable():
    async def handler(reader, writer):
        await read_request(reader)
        await asyncio.sleep(5)

    async def scenario():
        server, url = await serve(handler)
        pool = Pool(1, 0.2)
        with pytest.raises(UpstreamError) as slow:
            await collect(pool, url)
        server.close()
        await server.wait_closed()
        with pytest.raises(UpstreamError) as closed:
            await collect(Pool(1, 1), url)
        return slow.value.reason, closed.value.reason

    assert run_async(scenario()) == ("timeout", "unreachable")


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for ``localhost`` (and its key), made by the openssl command."""
    cert, key = directory / "router.pem", directory / "router.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_an_https_router_is_reached_when_its_certificate_is_trusted_and_refused_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A router across clusters sits behind an HTTPS ingress: the pool speaks TLS to it, with
    the name it asked for in ``Host``, and verifies its certificate: trusted through
    ``SSL_CERT_FILE`` (an operator's own CA), it answers; not trusted, it is unreachable."""
    cert, key = self_signed(tmp_path)
    seen: list[bytes] = []

    async def handler(reader, writer):
        seen.append(await read_request(reader))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        writer.close()

    async def scenario(trusted: bool) -> tuple[int, bytes] | str:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        try:
            return await collect(Pool(2, 5), f"https://localhost:{port}/v1/x")
        except UpstreamError as exc:
            return exc.reason
        finally:
            server.close()

    assert run_async(scenario(trusted=False)) == "unreachable"
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    assert run_async(scenario(trusted=True)) == (200, b"ok")
    assert seen[-1].split(b"\r\n")[1].lower().startswith(b"host: localhost:")
