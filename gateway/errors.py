"""Errors the gateway answers itself, always in OpenAI's error shape.

``{"error": {"message", "type", "param", "code"}}``: the shape the ``openai`` client parses,
so its exceptions carry the message and code a user needs. A condition that clears by itself
(no ready replica yet, a rate limit) carries ``Retry-After``; one that does not (a stopped
endpoint) carries ``x-should-retry: false``, which the official clients obey instead of
retrying by status code.
"""

from __future__ import annotations

import json
import math


class GatewayError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str,
        type: str = "invalid_request_error",
        param: str | None = None,
        retry_after: float | None = None,
        retryable: bool | None = None,
        extra_headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> None:
        super().__init__(message)
        self.extra_headers = extra_headers
        self.status = status
        self.message = message
        self.code = code
        self.type = type
        self.param = param
        self.retry_after = retry_after
        self.retryable = retryable

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return json.dumps({"error": error}).encode()

    def headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(b"content-type", b"application/json")]
        if self.retry_after is not None:
            seconds = max(1, math.ceil(self.retry_after))
            headers.append((b"retry-after", str(seconds).encode()))
        if self.retryable is not None:
            headers.append((b"x-should-retry", b"true" if self.retryable else b"false"))
        if self.status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="plinth"'))
        return headers + list(self.extra_headers)


def unauthorized() -> GatewayError:
    return GatewayError(
        401,
        "missing or invalid API key: send 'Authorization: Bearer <inference key>'",
        code="invalid_api_key",
    )


def endpoint_not_found(slug: str) -> GatewayError:
    return GatewayError(404, f"no endpoint named {slug!r}", code="endpoint_not_found")


def rate_limited(message: str, retry_after: float) -> GatewayError:
    return GatewayError(
        429, message, code="rate_limit_exceeded", type="rate_limit_error", retry_after=retry_after
    )
