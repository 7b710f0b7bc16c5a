"""URL patterns of /api/v1: ninja's routes, each wrapped for what must happen around them.

Around every route: a body the API does not take (over the upload limit, not JSON) is refused
before anything reads it (``deployments.api.bodies``; characters nothing can store were refused
before routing, by ``controlplane.middleware.InputHygieneMiddleware``); a POST with an
``Idempotency-Key`` runs once; ninja's bare 405 gets the error shape. Unknown paths under /api/v1
answer 404 in the error shape too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path
from django.views.decorators.csrf import csrf_exempt

from controlplane.error_pages import error_response
from deployments.api import idempotency
from deployments.api.app import api
from deployments.api.auth import resolve_actor
from deployments.api.bodies import body_refusal
from deployments.api.errors import CsrfFailed

View = Callable[..., HttpResponse]


def _idempotent(request: HttpRequest, run: Callable[[], HttpResponse]) -> HttpResponse | None:
    key = request.headers.get(idempotency.HEADER)
    if request.method != "POST" or key is None:
        return None
    try:
        actor = resolve_actor(request)
    except CsrfFailed:
        return None  # the route's own auth answers 403
    if actor is None:
        return None  # the route's own auth answers 401
    return idempotency.run_once(actor, request, key, run)


def wrap(view: View) -> View:
    @functools.wraps(view)  # keeps csrf_exempt: ninja checks CSRF itself for sessions
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        refused = body_refusal(request)
        if refused is not None:
            return refused

        def run() -> HttpResponse:
            return view(request, *args, **kwargs)

        try:
            response = _idempotent(request, run)
            if response is None:
                response = run()
        except Http404:  # ninja's bare API root raises instead of answering
            return _unknown(request)
        if response.status_code == 405 and "json" not in response.get("Content-Type", ""):
            allowed = response.get("Allow", "")
            response = error_response(405, f"{request.method} is not allowed here; use {allowed}")
            response["Allow"] = allowed
        return response

    return wrapped


_DOCUMENTS = frozenset({"openapi-json", "openapi-view"})


def _read_only(view: View) -> View:
    """The OpenAPI document and the docs page answer GET only (ninja serves any method)."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            response = error_response(405, f"{request.method} is not allowed here; use GET")
            response["Allow"] = "GET, HEAD"
            return response
        return view(request, *args, **kwargs)

    return wrapped


@csrf_exempt
def _unknown(request: HttpRequest, rest: str = "") -> HttpResponse:
    return error_response(404, f"no API route at {request.path}; see /api/v1/docs")


def _wrapped_patterns() -> list[URLPattern | URLResolver]:
    patterns, _app_name, _namespace = api.urls
    out: list[URLPattern | URLResolver] = []
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            callback = pattern.callback
            if pattern.name in _DOCUMENTS:
                callback = _read_only(callback)
            pattern.callback = wrap(callback)
        out.append(pattern)
    out.append(path("<path:rest>", _unknown))
    return out


app_name = "api-v1"
urlpatterns = _wrapped_patterns()
