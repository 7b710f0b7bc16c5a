"""One error shape for every failure of /api/v1, and the handlers that produce it.

``{"error": {"code": "...", "message": "...", "fields": [{"field", "code", "message", "fix"}]}}``
whatever went wrong: schema validation (422), a refused change (422), a conflict (409), missing
or foreign objects (404), roles (403), credentials (401), body size (413), rate (429). Nothing
internal (tracebacks, SQL, secret values) ever reaches a response.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from pydantic_core import ErrorDetails

from controlplane.access import AccessDenied, NotFound
from controlplane.services import Conflict, ServiceError
from deployments.specs import SpecInvalid, issue_dict
from runtime.validate import issue_from_error

logger = logging.getLogger(__name__)

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    422: "invalid",
    429: "rate_limited",
}
UNAUTHENTICATED = (
    "send 'Authorization: Bearer <management key>' (create one in the console or with "
    "`manage.py plinth_create_key`), or sign in to the console"
)


class CsrfFailed(Exception):
    """A console-session request that changes state came without a valid CSRF token."""


def error_body(
    code: str, message: str, fields: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "fields": fields or []}}


def error_response(
    status: int,
    message: str,
    *,
    code: str | None = None,
    fields: list[dict[str, Any]] | None = None,
) -> HttpResponse:
    """The error shape as a plain Django response (for code paths outside ninja)."""
    body = error_body(code or _STATUS_CODES.get(status, "error"), message, fields)
    return HttpResponse(json.dumps(body), status=status, content_type="application/json")


def _field_error(err: ErrorDetails) -> dict[str, Any]:
    """A ninja/pydantic error as a field error; settings errors get runtime's codes and fixes."""
    loc = list(err["loc"])
    source = loc.pop(0) if loc else "body"
    if source == "body" and loc and loc[0] == "payload":
        loc.pop(0)  # every body parameter is called "payload": not part of the field path
    if loc and loc[0] == "spec":
        relative = ErrorDetails(**{**err, "loc": tuple(loc[1:])})
        return issue_dict(issue_from_error(relative))
    issue = issue_from_error(ErrorDetails(**{**err, "loc": tuple(loc)}))
    field = issue.field if loc else source
    message = issue.message if loc else f"{source}: {err['msg']}"
    fix = None if issue.code == "unknown_field" else issue.fix
    if issue.code == "unknown_field":
        fix = "remove it"
    return {"field": field, "code": issue.code, "message": message, "fix": fix}


def _validation(request: HttpRequest, exc: ValidationError, api: NinjaAPI) -> HttpResponse:
    fields = [_field_error(err) for err in exc.errors]  # type: ignore[arg-type]
    first = fields[0]["message"] if fields else "invalid request"
    more = f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
    return api.create_response(request, error_body("invalid", first + more, fields), status=422)


def _service_error(request: HttpRequest, exc: ServiceError, api: NinjaAPI) -> HttpResponse:
    status = 409 if isinstance(exc, Conflict) else 422
    if isinstance(exc, SpecInvalid):
        fields = exc.issues
    elif exc.field:
        fields = [{"field": exc.field, "code": exc.code, "message": exc.message, "fix": None}]
    else:
        fields = []
    return api.create_response(request, error_body(exc.code, exc.message, fields), status=status)


def _http_error(request: HttpRequest, exc: HttpError, api: NinjaAPI) -> HttpResponse:
    status = exc.status_code
    message = UNAUTHENTICATED if isinstance(exc, AuthenticationError) else str(exc)
    if status == 400 and "parse request body" in message:
        message = "the request body is not valid JSON"
    response = api.create_response(
        request, error_body(_STATUS_CODES.get(status, "error"), message), status=status
    )
    return response  # ninja sets Retry-After on 429 itself


def _simple(status: int, message: str | None = None):  # type: ignore[no-untyped-def]
    def handler(request: HttpRequest, exc: Exception, api: NinjaAPI) -> HttpResponse:
        body = error_body(_STATUS_CODES[status], message or str(exc) or "not found")
        return api.create_response(request, body, status=status)

    return handler


def _unexpected(request: HttpRequest, exc: Exception, api: NinjaAPI) -> HttpResponse:
    # Logged with the traceback for operators; the caller gets no internals.
    logger.exception("unexpected error in %s %s", request.method, request.path)
    body = error_body("internal", "something went wrong on our side; the error was logged")
    return api.create_response(request, body, status=500)


def install(api: NinjaAPI) -> None:
    """Register every handler on ``api`` (ninja picks the most specific exception class)."""
    handlers: dict[type[Exception], Any] = {
        ValidationError: _validation,
        ServiceError: _service_error,
        HttpError: _http_error,
        NotFound: _simple(404),
        Http404: _simple(404, "not found"),
        AccessDenied: _simple(403),
        CsrfFailed: _simple(403, "CSRF check failed: send the X-CSRFToken header"),
        RequestDataTooBig: _simple(413, "the request body is larger than 1 MiB"),
        Exception: _unexpected,
    }
    for exc_class, handler in handlers.items():
        api.add_exception_handler(exc_class, lambda r, e, h=handler: h(r, e, api))
