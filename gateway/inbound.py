"""What a client asked for: which endpoint and route, and a checked body. Who is asking (the
bearer key) is ``gateway.app``'s to check, against the route table's keys.

Addressing is ``/endpoints/<slug>/<route>`` on any host, or ``<route>`` on
``<slug>.<INFERENCE_DOMAIN>`` when a wildcard domain is configured. Bodies are read with a size
bound (refused from Content-Length before reading, and counted while reading) and checked as
far as the gateway must understand them: JSON, an object, a ``model`` on OpenAI routes, and the
``stream`` flags. Everything else is the engine's to judge.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import GatewayError

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


@dataclass(frozen=True, slots=True)
class Route:
    path: str  # upstream path on the router
    method: str
    openai: bool  # OpenAI-shaped body and usage; False for SGLang's native /generate
    metered: bool  # carries token usage worth counting


ROUTES = {
    "/v1/chat/completions": Route("/v1/chat/completions", "POST", openai=True, metered=True),
    "/v1/completions": Route("/v1/completions", "POST", openai=True, metered=True),
    "/v1/embeddings": Route("/v1/embeddings", "POST", openai=True, metered=True),
    "/v1/models": Route("/v1/models", "GET", openai=True, metered=False),
    "/generate": Route("/generate", "POST", openai=False, metered=True),
}
# Streams that can report usage at their end when asked with stream_options.include_usage.
_USAGE_OPTION_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions"})
_PATH_PREFIX = "/endpoints/"
_INCLUDE_USAGE = b',"stream_options":{"include_usage":true}}'


def resolve_target(path: str, host: str, inference_domain: str) -> tuple[str, str] | None:
    """(slug, route path) for a request, or None when it addresses no endpoint."""
    if path.startswith(_PATH_PREFIX):
        slug, sep, rest = path[len(_PATH_PREFIX) :].partition("/")
        return (slug, "/" + rest) if slug and sep else None
    if inference_domain and host:
        name = host.rsplit(":", 1)[0].lower() if not host.startswith("[") else ""
        suffix = "." + inference_domain
        if name.endswith(suffix) and "." not in name[: -len(suffix)]:
            return name[: -len(suffix)], path
    return None


def find_route(route_path: str, method: str) -> Route:
    route = ROUTES.get(route_path.rstrip("/") or "/")
    if route is None:
        raise GatewayError(
            404,
            f"unknown route {route_path!r}; use one of {', '.join(sorted(ROUTES))}",
            code="unknown_route",
        )
    if method != route.method:
        raise GatewayError(
            405, f"{route_path} accepts {route.method} only", code="method_not_allowed"
        )
    return route


async def read_body(receive: Receive, content_length: int | None, limit: int) -> bytes:
    if content_length is not None and content_length > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(limit: int) -> GatewayError:
    return GatewayError(
        413, f"request body is larger than {limit // (1024 * 1024)} MiB", code="request_too_large"
    )


class ClientGone(Exception):
    """The client hung up before the gateway answered."""


@dataclass(slots=True)
class Prepared:
    body: bytes  # what goes upstream
    stream: bool
    strip_usage_chunk: bool  # the gateway added include_usage; remove its chunk again
    # The parsed body, for what else reads it (a sticky canary split's conversation key).
    payload: dict[str, Any] | None = None


def prepare(route: Route, body: bytes) -> Prepared:
    """Check a POST body and, for streams, ask upstream to report usage at the end."""
    try:
        payload = orjson.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise GatewayError(
            400, f"request body is not valid JSON: {exc}", code="invalid_json"
        ) from exc
    except RecursionError as exc:
        raise GatewayError(400, "request body is nested too deeply", code="invalid_json") from exc
    if not isinstance(payload, dict):
        raise GatewayError(400, "request body must be a JSON object", code="invalid_json")
    if route.openai and not (isinstance(payload.get("model"), str) and payload["model"]):
        raise GatewayError(
            400, "you must provide a model parameter", code="missing_model", param="model"
        )
    stream = payload.get("stream") is True
    if not stream or route.path not in _USAGE_OPTION_ROUTES:
        return Prepared(body=body, stream=stream, strip_usage_chunk=False, payload=payload)
    options = payload.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise GatewayError(
            400, "stream_options must be an object", code="invalid_value", param="stream_options"
        )
    if options and options.get("include_usage") is True:
        return Prepared(body=body, stream=True, strip_usage_chunk=False, payload=payload)
    if "stream_options" not in payload:
        # Added before the object's closing brace: the client's bytes stay as they were.
        end = body.rstrip().rfind(b"}")
        return Prepared(
            body=body[:end] + _INCLUDE_USAGE, stream=True, strip_usage_chunk=True, payload=payload
        )
    payload["stream_options"] = {**(options or {}), "include_usage": True}
    return Prepared(
        body=orjson.dumps(payload), stream=True, strip_usage_chunk=True, payload=payload
    )


def request_headers(scope: MutableMapping[str, Any]) -> dict[bytes, bytes]:
    # ASGI servers give lower-cased names; the few the gateway reads appear once.
    return dict(scope["headers"])


def request_id_of(headers: dict[bytes, bytes]) -> str:
    """The caller's id if it is a sane token (it is echoed, logged, sent on), else a new one.

    New ids need to be unique, not unguessable: ``getrandbits`` avoids uuid4's system call."""
    given = headers.get(b"x-request-id", b"")[:128].decode("latin-1")
    if given and given.isascii() and given.isprintable():
        return given
    return f"{random.getrandbits(128):032x}"


def content_length(headers: dict[bytes, bytes]) -> int | None:
    raw = headers.get(b"content-length")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError as exc:
        raise GatewayError(400, "Content-Length is not a number", code="invalid_request") from exc
