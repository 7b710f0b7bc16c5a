"""Plinth's own error answers: JSON in the API's error shape under /api/, plain pages elsewhere.

Django's handlers (``handler400``/``403``/``404``/``500`` in ``controlplane.urls``) and the input
hygiene middleware answer through :func:`error_answer`, so no error ever shows Django's debug page
or a traceback. The pages are rendered without the request: no context processors, no database,
so a 500 caused by the database still gets its page. The API's error shape is defined here, below
the API (``deployments.api.errors`` builds on it), so this layer never imports the API.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.http.multipartparser import MultiPartParserError
from django.template.loader import render_to_string

from controlplane.hygiene import displayable

API_PREFIX = "/api/"
# The database did not answer: down, restarting, or every pooled connection busy. The request
# was fine and will succeed later, so the answer is 503 with Retry-After, never a 500.
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)
DATABASE_RETRY_AFTER_SECONDS = 10
logger = logging.getLogger(__name__)
# When the database refuses a value that no earlier check caught (a backstop, logged).
UNSTORABLE_MESSAGE = "a value could not be stored: it is too long or not valid text"

_TITLES = {
    400: "Bad request",
    403: "Not allowed",
    404: "Not found",
    413: "Too large",
    422: "Not accepted",
    500: "Something went wrong",
    503: "Temporarily unavailable",
}


# The error shape's ``code`` for each status, when the failure names none of its own.
STATUS_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "rate_limited",
}


def error_body(
    code: str, message: str, fields: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The API's error shape: ``{"error": {"code", "message", "fields"}}``."""
    return {"error": {"code": code, "message": message, "fields": fields or []}}


def error_response(
    status: int,
    message: str,
    *,
    code: str | None = None,
    fields: list[dict[str, Any]] | None = None,
) -> HttpResponse:
    """The error shape as a plain Django response (for code paths outside ninja)."""
    body = error_body(code or STATUS_CODES.get(status, "error"), message, fields)
    return HttpResponse(json.dumps(body), status=status, content_type="application/json")


def is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def error_answer(
    request: HttpRequest,
    status: int,
    message: str,
    *,
    code: str | None = None,
    fields: list[dict[str, Any]] | None = None,
) -> HttpResponse:
    """The error in the caller's language: the API's JSON shape, or a console page."""
    message = displayable(message)
    if is_api(request):
        return error_response(status, message, code=code, fields=fields)
    template = f"{status}.html" if status in (400, 403, 404, 500, 503) else "400.html"
    context = {"title": _TITLES.get(status, "Error"), "message": message, "fields": fields or []}
    return HttpResponse(render_to_string(template, context), status=status)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if isinstance(exception, RequestDataTooBig):
        return error_answer(request, 413, "the request body is larger than the limit")
    if isinstance(exception, MultiPartParserError):
        return error_answer(request, 400, "the request body is not a well-formed multipart form")
    return error_answer(request, 400, "the request could not be understood")


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_answer(request, 403, "you are not allowed to do this")


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if is_api(request):
        return error_answer(request, 404, f"no API route at {request.path}; see /api/v1/docs")
    return error_answer(
        request, 404, "there is nothing here, or it belongs to another organization"
    )


def database_unavailable(request: HttpRequest, exception: BaseException) -> HttpResponse:
    """503 + Retry-After, in the API's shape or as a page; what failed stays in the log."""
    logger.warning("database unavailable for %s %s: %s", request.method, request.path, exception)
    response = error_answer(
        request,
        503,
        "Plinth cannot reach its database right now; retry in a few seconds",
        code="unavailable",
    )
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
    return response


def server_error(request: HttpRequest) -> HttpResponse:
    # Django calls this inside its `except`: an error raised in a middleware is still at hand.
    # (A view's reaches DatabaseUnavailableMiddleware, an API view's the API's handlers.)
    exception = sys.exception()
    if isinstance(exception, DATABASE_UNAVAILABLE):
        return database_unavailable(request, exception)
    # Django has logged the traceback; the caller learns nothing internal.
    return error_answer(
        request, 500, "something went wrong on our side; the error was logged", code="internal"
    )
