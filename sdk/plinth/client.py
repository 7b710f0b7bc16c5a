"""Sync and async clients of the Plinth API: :class:`Plinth` and :class:`AsyncPlinth`.

Every resource method (:mod:`plinth.resources`, :mod:`plinth.optimizer`) is written once and
returns what its client's ``_call`` returns: the parsed model for :class:`Plinth`, an awaitable
of it for :class:`AsyncPlinth`. What differs between the two (sending, paging, waiting,
following logs) lives in the two client classes; how a request is built, read and retried is
:mod:`plinth.transport`'s.

``client.optimize(...)`` asks the optimizer (a dry run: it creates nothing) for ranked
settings; ``fit_candidate`` fits a pick to an existing endpoint before it is saved as a revision.
The names users import from here (the resources, ``fit_candidate``, ``Call``, ...) stay
importable from here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel

from plinth import config, models
from plinth.errors import ConnectionFailed, PlinthError
from plinth.optimizer import (
    KEPT_GROUPS,
    KEPT_MODEL_FIELDS,
    Objective,
    Optimizer,
    OptimizerMismatch,
    fit_candidate,
    optimizer_message,
)
from plinth.quantize import Quantization
from plinth.resources import (
    Adapters,
    Audit,
    Benchmarks,
    Canaries,
    Clusters,
    Costs,
    Endpoints,
    Gates,
    Keys,
    Logs,
    Resource,
    Revisions,
    Secrets,
    Usage,
)
from plinth.transport import (
    API,
    DEFAULT_PAGE,
    MAX_RETRY_AFTER_S,
    RETRY_STATUSES,
    UNCHANGED,
    Call,
    Page,
    parse,
    request,
    retry_delay,
    should_retry,
)

__all__ = [
    "API",
    "DEFAULT_PAGE",
    "KEPT_GROUPS",
    "KEPT_MODEL_FIELDS",
    "MAX_RETRY_AFTER_S",
    "RETRY_STATUSES",
    "UNCHANGED",
    "Adapters",
    "AsyncPlinth",
    "Audit",
    "Benchmarks",
    "Call",
    "Canaries",
    "Clusters",
    "Endpoints",
    "Gates",
    "Keys",
    "Logs",
    "Objective",
    "Optimizer",
    "OptimizerMismatch",
    "Plinth",
    "Resource",
    "Revisions",
    "Secrets",
    "Usage",
    "fit_candidate",
    "optimizer_message",
]

M = TypeVar("M", bound=BaseModel)


def _credentials(url: str | None, key: str | None) -> config.Credentials:
    found = config.load(url, key)
    if found is None:
        raise PlinthError(
            f"no Plinth URL and key: pass them, set {config.URL_ENV} and {config.KEY_ENV}, "
            "or run `plinth login`",
            code="not_configured",
        )
    return found


def _client_kwargs(
    url: str | None, key: str | None, timeout: float, transport: Any
) -> dict[str, Any]:
    """The httpx client's settings, alike for both clients: the URL and key given or found (see
    :func:`plinth.config.load`), the timeout and the transport."""
    creds = _credentials(url, key)
    return {
        "base_url": creds.url,
        "timeout": timeout,
        "transport": transport,
        "headers": {"Authorization": f"Bearer {creds.key}", "User-Agent": "plinth-client"},
    }


class _Base:
    def __init__(self) -> None:
        self.endpoints = Endpoints(self)
        self.revisions = Revisions(self)
        self.adapters = Adapters(self)
        self.canaries = Canaries(self)
        self.benchmarks = Benchmarks(self)
        self.optimize = Optimizer(self)
        self.gates = Gates(self)
        self.keys = Keys(self)
        self.usage = Usage(self)
        self.costs = Costs(self)
        self.logs = Logs(self)
        self.secrets = Secrets(self)
        self.clusters = Clusters(self)
        self.audit = Audit(self)
        self.quantization = Quantization(self)


def _settled(endpoint: Any) -> bool:
    return bool(endpoint.settled) or endpoint.status == "failed"


class Plinth(_Base):
    """The synchronous client. ``Plinth()`` reads ``PLINTH_URL``/``PLINTH_API_KEY`` or the
    file ``plinth login`` wrote."""

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        timeout: float = 30,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__()
        settings = _client_kwargs(url, key, timeout, transport)
        self.url: str = settings["base_url"]
        self.retries = retries
        self._http = httpx.Client(**settings)

    def __enter__(self) -> Plinth:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, call: Call) -> Any:
        for attempt in range(self.retries + 1):
            response, error = None, None
            try:
                response = self._http.request(
                    call.method, call.path, params=call.params, json=call.json, headers=call.headers
                )
            except httpx.HTTPError as exc:
                error = exc
            if attempt < self.retries and should_retry(call, response, error):
                time.sleep(retry_delay(attempt, response))
                continue
            if error is not None:
                raise ConnectionFailed(
                    f"cannot reach {self.url}: {error}", code="unreachable"
                ) from error
            assert response is not None
            return parse(call, response)
        raise AssertionError("unreachable")

    def _pages(self, path: str, params: dict[str, Any], model: type[M], size: int) -> Iterator[M]:
        offset = 0
        while True:
            page = self._call(
                request(
                    "GET",
                    path,
                    params={**params, "limit": size, "offset": offset},
                    model=Page,
                )
            )
            yield from (model.model_validate(item) for item in page.items)
            offset += size
            if page.next is None:
                return

    def _wait(self, get: Callable[[], Any], timeout: float, interval: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            endpoint = get()
            if _settled(endpoint):
                return endpoint
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{endpoint.slug} is still {endpoint.status} after {timeout}s")
            time.sleep(interval)

    def _follow(
        self,
        logs: Logs,
        endpoint: str,
        follow: bool,
        replica: str | None,
        tail: int | None,
        interval: float,
    ) -> Iterator[models.LogLineOut]:
        answer = logs.read(endpoint, replica=replica, tail=tail)
        while True:
            yield from answer.lines
            if not (follow or answer.more):
                return
            if not answer.more:
                time.sleep(interval)
            answer = logs.read(
                endpoint, replica=answer.replica or replica, after=answer.cursor or None
            )


class AsyncPlinth(_Base):
    """The asyncio client: the same resources, each method awaited (``list`` and log lines
    are async iterators)."""

    # The resources are the sync client's classes, whose methods here return awaitables of
    # their annotated types. Python's typing cannot say "the same methods, awaited" without
    # writing every signature twice, so they are Any to a type checker rather than wrong.
    endpoints: Any
    revisions: Any
    adapters: Any
    optimize: Any
    keys: Any
    usage: Any
    costs: Any
    logs: Any
    secrets: Any
    clusters: Any
    audit: Any

    def __init__(
        self,
        url: str | None = None,
        key: str | None = None,
        *,
        timeout: float = 30,
        retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__()
        settings = _client_kwargs(url, key, timeout, transport)
        self.url: str = settings["base_url"]
        self.retries = retries
        self._http = httpx.AsyncClient(**settings)

    async def __aenter__(self) -> AsyncPlinth:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, call: Call) -> Any:
        for attempt in range(self.retries + 1):
            response, error = None, None
            try:
                response = await self._http.request(
                    call.method, call.path, params=call.params, json=call.json, headers=call.headers
                )
            except httpx.HTTPError as exc:
                error = exc
            if attempt < self.retries and should_retry(call, response, error):
                await asyncio.sleep(retry_delay(attempt, response))
                continue
            if error is not None:
                raise ConnectionFailed(
                    f"cannot reach {self.url}: {error}", code="unreachable"
                ) from error
            assert response is not None
            return parse(call, response)
        raise AssertionError("unreachable")

    async def _pages(
        self, path: str, params: dict[str, Any], model: type[M], size: int
    ) -> AsyncIterator[M]:
        offset = 0
        while True:
            page = await self._call(
                request(
                    "GET",
                    path,
                    params={**params, "limit": size, "offset": offset},
                    model=Page,
                )
            )
            for item in page.items:
                yield model.model_validate(item)
            offset += size
            if page.next is None:
                return

    async def _wait(self, get: Callable[[], Any], timeout: float, interval: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            endpoint = await get()
            if _settled(endpoint):
                return endpoint
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{endpoint.slug} is still {endpoint.status} after {timeout}s")
            await asyncio.sleep(interval)

    async def _follow(
        self,
        logs: Any,  # Logs, whose methods return awaitables here
        endpoint: str,
        follow: bool,
        replica: str | None,
        tail: int | None,
        interval: float,
    ) -> AsyncIterator[models.LogLineOut]:
        answer = await logs.read(endpoint, replica=replica, tail=tail)
        while True:
            for line in answer.lines:
                yield line
            if not (follow or answer.more):
                return
            if not answer.more:
                await asyncio.sleep(interval)
            answer = await logs.read(
                endpoint, replica=answer.replica or replica, after=answer.cursor or None
            )
