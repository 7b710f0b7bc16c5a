"""Load the benches share: one timed HTTP request, closed-loop clients and open-loop arrivals.

``send`` posts one JSON request and reads the answer to its end, timing the first event of a
stream (TTFT: the first ``data: {`` chunk) and the whole answer, and keeping the response's
``id`` (SGLang's request id, which the engines' per-request records carry too). A broken
connection answers status 0 and a request over its time limit is marked ``timed_out``, so a
bench counts them apart from HTTP errors. ``closed_loop`` runs clients that each send their next
request when the last is answered; ``open_loop`` sends at Poisson arrivals whatever the answers.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp

_RESPONSE_ID = re.compile(rb'"id"\s*:\s*"([^"]+)"')
_HEAD_BYTES = 16384  # enough of the answer to hold its first event and id


@dataclass
class Answer:
    status: int  # HTTP status; 0: the connection broke or the time limit passed
    latency: float  # seconds to the end of the answer (or to the failure)
    ttft: float | None = None  # seconds to the first streamed event; None: none came
    response_id: str | None = None
    timed_out: bool = False


async def send(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
    timeout: float | None = None,
) -> Answer:
    """POST ``body`` to ``url`` and read the answer to its end."""
    started = time.perf_counter()
    head, ttft = b"", None
    try:
        async with asyncio.timeout(timeout):
            async with session.post(url, json=body, headers=headers) as response:
                async for chunk in response.content.iter_any():
                    if len(head) < _HEAD_BYTES:
                        head += chunk
                    if ttft is None and b"data: {" in head:
                        ttft = time.perf_counter() - started
                status = response.status
    except TimeoutError:
        return Answer(0, time.perf_counter() - started, timed_out=True)
    except aiohttp.ClientError:
        return Answer(0, time.perf_counter() - started)
    found = _RESPONSE_ID.search(head)
    response_id = found.group(1).decode() if found else None
    return Answer(status, time.perf_counter() - started, ttft, response_id)


async def closed_loop(clients: int, seconds: float, client: Callable[[], Awaitable[None]]) -> float:
    """``clients`` loops each awaiting ``client()`` again until ``seconds`` have passed (the
    requests in flight then finish). Returns the wall time taken, in seconds."""
    deadline = time.perf_counter() + seconds

    async def loop() -> None:
        while time.perf_counter() < deadline:
            await client()

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(clients)))
    return time.perf_counter() - started


async def open_loop(
    rate: float, seconds: float, request: Callable[[], Coroutine[Any, Any, None]]
) -> None:
    """Start ``request()`` at Poisson arrivals of ``rate`` per second for ``seconds``, whatever
    the answers; returns when every one has finished."""
    tasks: list[asyncio.Task[None]] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        tasks.append(asyncio.create_task(request()))
        await asyncio.sleep(random.expovariate(rate))
    await asyncio.gather(*tasks)
