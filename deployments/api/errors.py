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
from django.db import DataError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from pydantic_core import ErrorDetails

from controlplane.access import AccessDenied, NotFound
from controlplane.error_pages import (
    DATABASE_UNAVAILABLE,
    UNSTORABLE_MESSAGE,
    database_unavailable,
)
from controlplane.services import Conflict, ServiceError
from deployments.specs import SpecInvalid, issue_dict
from runtime.issues import Issue
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


def _spec_issue(err: ErrorDetails) -> Issue | None:
    """The error as a RuntimeSpec issue (path relative to the spec), or None if outside it."""
    loc = _body_path(err)
    if not loc or loc[0] != "spec" or (len(loc) == 1 and err["type"] == "extra_forbidden"):
        return None  # outside the spec, or a "spec" field where the body takes none
    return issue_from_error(ErrorDetails(**{**err, "loc": tuple(loc[1:])}))


def _body_path(err: ErrorDetails) -> list[Any]:
    loc = list(err["loc"])[1:]  # the first element is the source: body, query, path
    if tuple(err["loc"][:1]) == ("body",) and loc[:1] == ["payload"]:
        loc.pop(0)  # every body parameter is called "payload": not part of the field path
    return loc


def _field_error(err: ErrorDetails) -> dict[str, Any]:
    """A ninja/pydantic error outside the spec as a field error with runtime's codes."""
    loc = _body_path(err)
    issue = issue_from_error(ErrorDetails(**{**err, "loc": tuple(loc)}))
    field = issue.field if loc else str(err["loc"][0] if err["loc"] else "body")
    fix = "remove it" if issue.code == "unknown_field" else issue.fix
    return {"field": field, "code": issue.code, "message": issue.message, "fix": fix}


def _validation(request: HttpRequest, exc: ValidationError, api: NinjaAPI) -> HttpResponse:
    errors: list[ErrorDetails] = exc.errors  # type: ignore[assignment]
    spec_issues = [_spec_issue(err) for err in errors]
    if errors and all(spec_issues):
        # Settings that do not parse are the same class as settings that break a rule.
        return _service_error(request, SpecInvalid([i for i in spec_issues if i]), api)
    fields = [
        issue_dict(issue) if issue else _field_error(err)
        for err, issue in zip(errors, spec_issues, strict=True)
    ]
    first = f"{fields[0]['field']}: {fields[0]['message']}" if fields else "invalid request"
    more = f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
    return api.create_response(request, error_body("invalid", first + more, fields), status=422)


def _service_error(request: HttpRequest, exc: ServiceError, api: NinjaAPI) -> HttpResponse:
    status = 409 if isinstance(exc, Conflict) else 422
    message = exc.message
    if isinstance(exc, SpecInvalid):
        fields = exc.issues
    elif exc.field:
        fields = [{"field": exc.field, "code": exc.code, "message": exc.detail, "fix": None}]
    else:
        fields = []
    return api.create_response(request, error_body(exc.code, message, fields), status=status)


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


def _unstorable(request: HttpRequest, exc: DataError, api: NinjaAPI) -> HttpResponse:
    # A value the database refused that no check caught first: the caller's input, not a 500.
    logger.warning("database refused a value in %s %s: %s", request.method, request.path, exc)
    body = error_body("invalid", UNSTORABLE_MESSAGE)
    return api.create_response(request, body, status=422)


def _database_unavailable(request: HttpRequest, exc: Exception, api: NinjaAPI) -> HttpResponse:
    return database_unavailable(request, exc)  # 503 + Retry-After: the request was fine


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
        DataError: _unstorable,
        Exception: _unexpected,
    }
    handlers.update(dict.fromkeys(DATABASE_UNAVAILABLE, _database_unavailable))
    for exc_class, handler in handlers.items():
        api.add_exception_handler(exc_class, lambda r, e, h=handler: h(r, e, api))
