"""Typed exceptions carrying the API's error body (``{"error": {code, message, fields}}``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class FieldError:
    """One input at fault: its dotted path (e.g. ``spec.parallelism.tp``) and how to fix it."""

    field: str
    code: str
    message: str
    fix: str | None = None


@dataclass
class PlinthError(Exception):
    """Any failure answered by the API (or reaching it). ``status`` is 0 when none answered."""

    message: str
    status: int = 0
    code: str = "error"
    fields: list[FieldError] = field(default_factory=list)
    body: Any = None

    def __str__(self) -> str:
        lines = [
            f"{self.message} ({self.code}, HTTP {self.status})" if self.status else self.message
        ]
        for fault in self.fields:
            fix = f"; fix: {fault.fix}" if fault.fix else ""
            lines.append(f"  {fault.field}: {fault.message}{fix}")
        return "\n".join(lines)


class ConnectionFailed(PlinthError):
    """The API could not be reached (after the retries)."""


class AuthenticationFailed(PlinthError):
    """401: no key, or a wrong, expired or revoked one."""


class PermissionDenied(PlinthError):
    """403: the key's role may not do this."""


class NotFound(PlinthError):
    """404: no such object in the key's organization."""


class Conflict(PlinthError):
    """409: e.g. ``revision_conflict``: someone saved a newer revision than the one edited."""


class ValidationFailed(PlinthError):
    """422: the input was refused; ``fields`` says where and how to fix it."""


class RateLimited(PlinthError):
    """429: too many requests (after the retries)."""


class ServerError(PlinthError):
    """5xx: the platform failed or is unavailable (after the retries)."""


_BY_STATUS: dict[int, type[PlinthError]] = {
    401: AuthenticationFailed,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    422: ValidationFailed,
    429: RateLimited,
}


def error_from_response(status: int, body: Any) -> PlinthError:
    """The exception for one error answer; a body not in the API's shape still gives one."""
    detail = body.get("error") if isinstance(body, dict) else None
    if not isinstance(detail, dict):
        detail = {"code": "http_error", "message": f"HTTP {status}"}
    fields = [
        FieldError(
            field=str(item.get("field", "")),
            code=str(item.get("code", "")),
            message=str(item.get("message", "")),
            fix=item.get("fix"),
        )
        for item in detail.get("fields") or []
        if isinstance(item, dict)
    ]
    kind = _BY_STATUS.get(status, ServerError if status >= 500 else PlinthError)
    return kind(
        message=str(detail.get("message", "")),
        status=status,
        code=str(detail.get("code", "error")),
        fields=fields,
        body=body,
    )
