"""Which revision's router a request goes to while a canary runs beside the serving revision.

Two ways, both without I/O or randomness:

- **Weighted** (the default): a per-endpoint counter spreads the canary's share evenly over the
  requests, request *n* going to the canary when ``floor((n+1)·w/100)`` passes
  ``floor(n·w/100)``. Every hundred requests hold exactly ``w`` canary requests per gateway
  process, and canary requests are never bunched.
- **Sticky** (``CanaryRoute.sticky``): the request's conversation is hashed to a point in
  0-99 and goes to the canary when that point is below the weight, so every request of one
  conversation reaches one revision and that revision's prefix cache stays warm. A
  conversation is named by, in order: the ``X-Plinth-Session`` header; the OpenAI ``user``
  field; the first message (chat) or the prompt's first 256 characters (completions), which a
  conversation repeats on every turn. A request with none of these is split by weight.

A canary whose pool is not ready takes nothing; all goes to the serving revision. Nor does a
canary take a request for a LoRA adapter its revision does not serve (one the serving revision
serves, ``gateway.adapters`` having refused the others): that goes to the serving revision,
which can answer it, rather than to the canary's engines, which would refuse it; the canary's
share is then of the requests it can answer.

A caller may **pin** a request to one of the two revisions with ``X-Plinth-Revision: N`` (the
playground's side-by-side mode does, to compare them on one prompt). A pin naming neither revision,
or a canary that is not serving (or not the request's adapter), is ignored and the request is
split as usual; the answer's own ``X-Plinth-Revision`` always says which revision served it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.routes import CanaryRoute, Endpoint

SESSION_HEADER = b"x-plinth-session"
PIN_HEADER = b"x-plinth-revision"
_PROMPT_PREFIX = 256


@dataclass(frozen=True)
class Steer:
    """What a request says about where it should go: its conversation and a revision pin."""

    session: bytes | None = None
    pin: int | None = None


def pin_of(header: bytes | None) -> int | None:
    """The revision number an ``X-Plinth-Revision`` header pins; None when absent or not one."""
    if not header or not header.isdigit() or len(header) > 9:
        return None
    return int(header)


def session_of(header: bytes | None, payload: dict[str, Any] | None) -> bytes:
    """The conversation a request belongs to, as bytes to hash; b"" when it names none."""
    if header:
        return header
    if not payload:
        return b""
    user = payload.get("user")
    if isinstance(user, str) and user:
        return b"user:" + user.encode()
    messages = payload.get("messages")
    if isinstance(messages, list) and messages:
        return b"first:" + orjson.dumps(messages[0])
    prompt = payload.get("prompt") or payload.get("text")
    if isinstance(prompt, str) and prompt:
        return b"prompt:" + prompt[:_PROMPT_PREFIX].encode()
    return b""


def sticky_point(session: bytes) -> int:
    """A conversation's stable point in 0-99 (the same in every gateway process)."""
    return zlib.crc32(session) % 100


class Splitter:
    """Per-endpoint counters of the weighted split (one per gateway process)."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}

    def to_canary(self, endpoint: Endpoint, canary: CanaryRoute, session: bytes) -> bool:
        if canary.sticky and session:
            return sticky_point(session) < canary.weight
        n = self._counts.get(endpoint.id, 0)
        self._counts[endpoint.id] = (n + 1) % 100
        return (n + 1) * canary.weight // 100 > n * canary.weight // 100

    def pick(
        self, endpoint: Endpoint, session: bytes = b"", pin: int | None = None, adapter: str = ""
    ) -> tuple[str, int | None, bool]:
        """(router URL, revision number, whether it is the canary) for one request calling
        ``adapter`` ("" the base model)."""
        canary = endpoint.canary
        if canary is not None and canary.serving and canary.serves(adapter):
            if pin is not None and pin in (canary.revision, endpoint.revision):
                if pin == canary.revision:
                    return canary.router_url, canary.revision, True
                return endpoint.router_url, endpoint.revision, False
            if self.to_canary(endpoint, canary, session):
                return canary.router_url, canary.revision, True
        return endpoint.router_url, endpoint.revision, False
