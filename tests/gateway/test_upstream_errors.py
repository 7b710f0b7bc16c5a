"""Every error status a router or engine can answer: 4xx relayed as they are (they are about the
caller's request), 5xx replaced by the gateway's own answer, never their bodies.

The upstream is a real HTTP server on loopback standing in for the router (the seam: making
the real router answer each status on demand is not possible). It answers the status named in
the request id the gateway passes on, with a body like the router's own 500, which names a
replica's address. The gateway is built in process from a given route table.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid

import httpx
from django.conf import settings

from controlplane.keys import generate_key
from gateway.app import Gateway
from gateway.config import GatewayConfig
from gateway.routes import Endpoint, InferenceKey, RouteTable
from tests.gateway.conftest import run_async

INTERNALS = "error sending request for url (http://10.0.3.7:30000/v1/chat/completions)"
_STATUS_IN_ID = re.compile(rb"x-request-id: status-(\d+)", re.IGNORECASE)
_LENGTH = re.compile(rb"content-length: (\d+)", re.IGNORECASE)


async def _answer_each_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = _LENGTH.search(head)
            if length:
                await reader.readexactly(int(length.group(1)))
            found = _STATUS_IN_ID.search(head)
            status = int(found.group(1)) if found else 200
            body = json.dumps(
                {"error": {"message": INTERNALS, "type": "server_error", "code": str(status)}}
            ).encode()
            writer.write(
                b"HTTP/1.1 %d Status\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (status, len(body), body)
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def _table(router_url: str, plaintext_key: tuple[str, str, str]) -> RouteTable:
    _, prefix, key_hash = plaintext_key
    org = str(uuid.uuid4())
    endpoint = Endpoint(str(uuid.uuid4()), "chat", org, "running", "running", 1, router_url)
    key = InferenceKey(str(uuid.uuid4()), prefix, key_hash, org, frozenset(), None, None, None)
    return RouteTable(endpoints={"chat": endpoint}, keys={prefix: key}, loaded_at=1.0)


def test_upstream_4xx_are_relayed_and_5xx_never_are() -> None:
    new_key = generate_key("inference")

    async def scenario() -> dict[int, httpx.Response]:
        server = await asyncio.start_server(_answer_each_request, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        table = _table(
            f"http://127.0.0.1:{port}", (new_key.plaintext, new_key.prefix, new_key.key_hash)
        )
        gateway = Gateway(GatewayConfig(redis_url=settings.REDIS_URL), lambda: table)
        await gateway.startup()
        answers = {}
        try:
            transport = httpx.ASGITransport(app=gateway)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                for status in range(400, 600):
                    answers[status] = await client.post(
                        "/endpoints/chat/v1/chat/completions",
                        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                        headers={
                            "Authorization": f"Bearer {new_key.plaintext}",
                            "X-Request-Id": f"status-{status}",
                        },
                    )
        finally:
            await gateway.shutdown()
            server.close()
            await server.wait_closed()
        return answers

    for status, response in run_async(scenario()).items():
        error = response.json()["error"]
        if status < 500:
            assert response.status_code == status and error["message"] == INTERNALS
            continue
        assert response.status_code in (502, 503), status
        assert INTERNALS not in response.text and "10.0.3.7" not in response.text, status
        assert set(error) == {"message", "type", "param", "code"}, status
        if status in (500, 502, 503, 504):
            assert response.status_code == 503 and error["code"] == "upstream_unavailable"
            assert int(response.headers["retry-after"]) >= 1
