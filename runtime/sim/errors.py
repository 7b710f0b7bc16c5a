"""Error responses shaped like SGLang's, and small typed readers of JSON request bodies.

OpenAI routes (and body validation failures everywhere) answer
``{"object": "error", "message", "type": "BadRequestError", "param", "code"}``; the native
``/generate`` answers ``{"error": {"message"}}`` for requests it understood but cannot serve; auth
failures are ``{"error": "Unauthorized"}``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web


class RequestError(Exception):
    """A request SGLang would refuse; ``native`` selects /generate's error shape."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        param: str | None = None,
        err_type: str = "BadRequestError",
        native: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param
        self.err_type = err_type
        self.native = native

    def response(self) -> web.Response:
        if self.native:
            return native_error(self.message, self.status)
        return openai_error(self.message, self.status, self.err_type, self.param)


def openai_error(
    message: str, status: int = 400, err_type: str = "BadRequestError", param: str | None = None
) -> web.Response:
    body = {"object": "error", "message": message, "type": err_type, "param": param, "code": status}
    return web.json_response(body, status=status)


def native_error(message: str, status: int = 400) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


def unauthorized() -> web.Response:
    return web.json_response({"error": "Unauthorized"}, status=401)


async def read_json_object(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as exc:
        raise RequestError(f"JSON decode error: {exc}") from exc
    if not isinstance(body, dict):
        raise RequestError("Input should be a valid dictionary or object to extract fields from")
    return body


def optional_int(body: dict[str, Any], name: str, minimum: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{name}: Input should be a valid integer", param=name)
    if minimum is not None and value < minimum:
        raise RequestError(f"{name} must be at least {minimum}, got {value}.", param=name)
    return value


def optional_float(
    body: dict[str, Any], name: str, low: float | None = None, high: float | None = None
) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RequestError(f"{name}: Input should be a valid number", param=name)
    if (low is not None and value < low) or (high is not None and value > high):
        raise RequestError(f"{name} must be between {low} and {high}, got {value}.", param=name)
    return float(value)


def optional_bool(body: dict[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"{name}: Input should be a valid boolean", param=name)
    return value


def string_list(body: dict[str, Any], name: str) -> tuple[str, ...]:
    """A ``stop``-like field: absent, one string, or a list of strings."""
    value = body.get(name)
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise RequestError(f"{name}: Input should be a valid string or list of strings", param=name)


def int_list(body: dict[str, Any], name: str) -> tuple[int, ...]:
    value = body.get(name)
    if value is None:
        return ()
    if isinstance(value, list) and all(_is_int(v) for v in value):
        return tuple(value)
    raise RequestError(f"{name}: Input should be a valid list of integers", param=name)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
