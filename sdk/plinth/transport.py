"""How the clients talk to the Plinth API: one request (:class:`Call`), its answer read into a
model or an error, and when a failed request is sent again.

Retries: GETs, and POSTs with an ``Idempotency-Key`` (the same key on every try, so the server
answers a repeated POST with the first answer instead of acting twice), are retried on network
failures, 429 and 502/503/504 with backoff (``Retry-After`` honoured). PATCH and DELETE are
retried only when the request never reached the server.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from pydantic import BaseModel

from plinth.errors import error_from_response

API = "/api/v1"
# A keyword left out of a partial change (``None`` there means "no limit", so it cannot).
UNCHANGED: Any = object()
RETRY_STATUSES = frozenset({429, 502, 503, 504})
MAX_RETRY_AFTER_S = 30.0
DEFAULT_PAGE = 100


@dataclass(frozen=True)
class Call:
    """One API request and how to read its answer (``model``: None for no body)."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    model: Any = None  # a model class, list[model], or None
    retry_safe: bool = True  # may be sent again after the server may have seen it
    headers: dict[str, str] = field(default_factory=dict)


def clean(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` without the ones left unset (``None``)."""
    return {k: v for k, v in params.items() if v is not None}


def request(method: str, path: str, **kwargs: Any) -> Call:
    """A :class:`Call`: a POST carries a fresh ``Idempotency-Key``, a PATCH or DELETE is not
    sent again once the server may have seen it, and unset query parameters are left out."""
    if method == "POST":
        kwargs.setdefault("headers", {})["Idempotency-Key"] = uuid.uuid4().hex
    elif method in ("PATCH", "DELETE"):
        kwargs.setdefault("retry_safe", False)
    if kwargs.get("params") is not None:
        kwargs["params"] = clean(kwargs["params"])
    return Call(method, path, **kwargs)


def parse(call: Call, response: httpx.Response) -> Any:
    """The answer as ``call.model``; an error answer raised as its typed exception."""
    if response.status_code >= 400:
        try:
            body = response.json()
        except ValueError:
            body = None
        raise error_from_response(response.status_code, body)
    if call.model is None or response.status_code == 204:
        return None
    data = response.json()
    origin = getattr(call.model, "__origin__", None)
    if origin is list:
        (item,) = call.model.__args__
        return [item.model_validate(row) for row in data]
    return call.model.model_validate(data)


def retry_delay(attempt: int, response: httpx.Response | None) -> float:
    """Seconds to wait before try ``attempt + 1``: the server's ``Retry-After``, else backoff."""
    header = response.headers.get("Retry-After") if response is not None else None
    if header and header.isdigit():
        return min(float(header), MAX_RETRY_AFTER_S)
    return min(0.25 * 2.0**attempt, 5.0) * (0.5 + random.random() / 2)  # jitter


def should_retry(call: Call, response: httpx.Response | None, exc: Exception | None) -> bool:
    """Whether a try that failed (``exc``) or was answered (``response``) is sent again."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return True  # never reached the server: any method is safe to send again
    if not call.retry_safe:
        return False
    if exc is not None:
        return isinstance(exc, httpx.TransportError)
    return response is not None and response.status_code in RETRY_STATUSES


class Page(BaseModel):
    """One page of a list route: its rows, the total and the next page's URL."""

    items: list[dict[str, Any]]
    count: int
    next: str | None = None
