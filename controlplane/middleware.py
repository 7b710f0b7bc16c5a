"""Middleware of the control plane: input hygiene before anything else, trailing-slash
redirects that keep a POST a POST, and the console's current organization."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponsePermanentRedirect, JsonResponse
from django.http.response import HttpResponseBase
from django.middleware.common import CommonMiddleware
from django.utils.http import escape_leading_slashes

from controlplane.access import Actor
from controlplane.error_pages import (
    DATABASE_UNAVAILABLE,
    database_unavailable,
    error_answer,
    is_api,
)
from controlplane.hygiene import request_refusal
from controlplane.models import Membership

SESSION_ORG_KEY = "plinth_org_id"

Middleware = Callable[[HttpRequest], HttpResponse]


class LivenessMiddleware:
    """Answers ``GET /healthz`` before anything checks the Host header: the kubelet probes a pod by
    its address, which is never in ``ALLOWED_HOSTS`` in production, so a probe that reached
    Django's host check would get 400 and the pod would never become ready."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.path == "/healthz" and request.method in ("GET", "HEAD"):
            return JsonResponse({"status": "ok"})
        return self.get_response(request)


class InputHygieneMiddleware:
    """Refuses a request carrying a character no part of Plinth can store (NUL, a lone
    surrogate) in its path, query string, form fields, JSON body or headers: 422 in the API's
    error shape naming the field, a 400 page in the console. First in the chain, so no view,
    sign-in form or database query ever sees such a value."""

    def __init__(self, get_response: Middleware) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        refusal = request_refusal(request, forms=not is_api(request))
        if refusal is None:
            return self.get_response(request)
        field = {
            "field": refusal.field,
            "code": refusal.code,
            "message": refusal.message,
            "fix": refusal.fix,
        }
        status = 422 if is_api(request) else 400
        return error_answer(request, status, refusal.summary, code="invalid", fields=[field])


class DatabaseUnavailableMiddleware:
    """A view that finds the database down (or every pooled connection busy) answers 503 with
    Retry-After rather than 500. Django hands a view's exception to ``process_exception``
    whichever thread it ran in; errors raised in middleware reach ``error_pages.server_error``
    and the API's views their own handlers, which answer the same."""

    def __init__(self, get_response: Middleware) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, DATABASE_UNAVAILABLE):
            return database_unavailable(request, exception)
        return None


class PermanentRedirectKeepingMethod(HttpResponsePermanentRedirect):
    """308: the client repeats the same method with the same body at the new address."""

    status_code = 308


class SlashRedirectMiddleware(CommonMiddleware):
    """Django's CommonMiddleware, but a POST (or PUT, PATCH, DELETE) to a path missing its
    trailing slash is redirected with 308, which keeps the method and body.

    Django answers such a request with a 301, which clients follow with a GET (the form's
    data silently lost), and in DEBUG raises RuntimeError instead (a 500).
    """

    def get_full_path_with_slash(self, request: HttpRequest) -> str:
        return self._slashed(request)

    # override: django-stubs narrow Django's answer here to a 301; this one may be a 308 too.
    def process_request(self, request: HttpRequest) -> HttpResponseBase | None:  # type: ignore[override]
        return self._keep_method(request, super().process_request(request))

    def process_response(
        self, request: HttpRequest, response: HttpResponseBase
    ) -> HttpResponseBase:
        kept = self._keep_method(request, super().process_response(request, response))
        return response if kept is None else kept

    @staticmethod
    def _slashed(request: HttpRequest) -> str:
        return escape_leading_slashes(request.get_full_path(force_append_slash=True))

    def _keep_method(
        self, request: HttpRequest, response: HttpResponseBase | None
    ) -> HttpResponseBase | None:
        if (
            response is None
            or response.status_code != 301
            or request.method in ("GET", "HEAD")
            or response.get("Location") != self._slashed(request)
        ):
            return response
        return PermanentRedirectKeepingMethod(response["Location"])


class CurrentOrganizationMiddleware:
    """Sets ``request.actor`` (or None) from the session's chosen organization.

    A user who chose no organization, or one they no longer belong to, falls back to their
    first membership.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # An attribute of Plinth's on the request (read through controlplane.guard.actor_of).
        request.actor = _actor(request)  # type: ignore[attr-defined]
        return self.get_response(request)


def _actor(request: HttpRequest) -> Actor | None:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    memberships = Membership.objects.select_related("organization").filter(user=user)
    chosen = request.session.get(SESSION_ORG_KEY)
    membership = None
    if chosen:
        membership = memberships.filter(organization_id=chosen).first()
    if membership is None:
        membership = memberships.order_by("created_at").first()
    if membership is None:
        return None
    return Actor(organization=membership.organization, role=membership.role, user=user)
