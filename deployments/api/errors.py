"""One error shape for every failure of /api/v1, and the handlers that produce it.

``{"error": {"code": "...", "message": "...", "fields": [{"field", "code", "message", "fix"}]}}``
whatever went wrong: schema validation (422), a refused change (422), a conflict (409), missing
or foreign objects (404), roles (403), credentials (401), body size (413), rate (429). Nothing
internal (tracebacks, SQL, secret values) ever reaches a response. The shape itself
(``error_body``, ``error_response``) lives in ``controlplane.error_pages``, which answers outside
the API too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

from django.core.exceptions import RequestDataTooBig
from django.db import DataError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from pydantic_core import ErrorDetails

from controlplane.access import AccessDenied, NotFound
from controlplane.error_pages import (
    DATABASE_UNAVAILABLE,
    STATUS_CODES,
    UNSTORABLE_MESSAGE,
    database_unavailable,
    error_body,
)
from controlplane.services import Conflict, ServiceError
from deployments.specs import SpecInvalid, issue_dict
from runtime.issues import Issue
from runtime.validate import issue_from_error

logger = logging.getLogger(__name__)

# A handler as written here: it also takes the API, which builds the response. ``Any`` because
# each handler takes its own exception class.
Handler = Callable[[HttpRequest, Any, NinjaAPI], HttpResponse]

UNAUTHENTICATED = (
    "send 'Authorization: Bearer <management key>' (create one in the console or with "
    "`manage.py plinth_create_key`), or sign in to the console"
)


class CsrfFailed(Exception):
    """A console-session request that changes state came without a valid CSRF token."""


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
    errors = cast(list[ErrorDetails], exc.errors)  # ninja types them as plain dicts
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
        # A refusal may say what to do (a quota: scale others down, or ask an admin).
        fix = getattr(exc, "fix", None)
        fields = [{"field": exc.field, "code": exc.code, "message": exc.detail, "fix": fix}]
    else:
        fields = []
    return api.create_response(request, error_body(exc.code, message, fields), status=status)


def _http_error(request: HttpRequest, exc: HttpError, api: NinjaAPI) -> HttpResponse:
    status = exc.status_code
    message = UNAUTHENTICATED if isinstance(exc, AuthenticationError) else str(exc)
    if status == 400 and "parse request body" in message:
        message = "the request body is not valid JSON"
    response = api.create_response(
        request, error_body(STATUS_CODES.get(status, "error"), message), status=status
    )
    return response  # ninja sets Retry-After on 429 itself


def _simple(status: int, message: str | None = None) -> Handler:
    def handler(request: HttpRequest, exc: Exception, api: NinjaAPI) -> HttpResponse:
        body = error_body(STATUS_CODES[status], message or str(exc) or "not found")
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
    handlers: dict[type[Exception], Handler] = {
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
        api.add_exception_handler(exc_class, _bound(handler, api))


def _bound(handler: Handler, api: NinjaAPI) -> Callable[[HttpRequest, Any], HttpResponse]:
    # Any: ninja types the exception as "E or type[E]"; it passes the instance raised.
    def bound(request: HttpRequest, exc: Any) -> HttpResponse:
        return handler(request, exc, api)

    return bound
