"""Who calls the API: a management key (``Authorization: Bearer plm_...``) or a console session.

A key acts in its own organization with its own role. A session acts in the organization chosen
in the console (``request.actor``, set by ``CurrentOrganizationMiddleware``) and must pass the
CSRF check on methods that change state, because a browser sends its cookie to any site's form.

A few routes are about the person, not an organization (their own invitations): those take the
signed-in user's session only (``SignedInUser``); an organization's key is refused there.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from ninja.errors import HttpError
from ninja.security import APIKeyCookie, HttpBearer

from controlplane import services
from controlplane.access import Actor
from controlplane.models import ApiKeyKind
from deployments.api.errors import CsrfFailed

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
_RESOLVED = "_plinth_api_actor"


def _never_called(request: HttpRequest) -> HttpResponse:
    # process_view only reads a view's csrf flags; it neither calls the view nor get_response.
    raise AssertionError("the CSRF check calls no view")


def _csrf_ok(request: HttpRequest) -> bool:
    # Ninja views are csrf_exempt at the middleware level; the session path checks here instead.
    middleware = CsrfViewMiddleware(_never_called)
    return middleware.process_view(request, _never_called, (), {}) is None


def actor_of(request: HttpRequest) -> Actor:
    """The Actor that ``KeyOrSession`` authenticated, typed: the one place ``request.auth`` is
    read for it. django-ninja sets ``auth`` at run time, so ``HttpRequest`` does not declare it."""
    actor = getattr(request, "auth", None)
    if not isinstance(actor, Actor):
        raise TypeError("this route is not behind KeyOrSession")  # a wiring mistake: 500
    return actor


def user_of(request: HttpRequest) -> User:
    """The signed-in person that ``SignedInUser`` authenticated (routes about oneself)."""
    user = getattr(request, "auth", None)
    if not isinstance(user, User):
        raise TypeError("this route is not behind SignedInUser")  # a wiring mistake: 500
    return user


def resolve_actor(request: HttpRequest) -> Actor | None:
    """The caller's Actor, or None when unauthenticated. Cached on the request.

    Raises CsrfFailed for a session request that changes state without a valid token.
    """
    if hasattr(request, _RESOLVED):
        resolved: Actor | None = getattr(request, _RESOLVED)
        return resolved
    actor: Actor | None = None
    header = request.headers.get("Authorization", "")
    if header:
        scheme, _, token = header.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            key = services.authenticate_key(token.strip(), kind=ApiKeyKind.MANAGEMENT)
            actor = services.actor_for_key(key) if key is not None else None
    else:
        actor = getattr(request, "actor", None)
        if actor is not None and request.method not in _SAFE_METHODS and not _csrf_ok(request):
            raise CsrfFailed
    setattr(request, _RESOLVED, actor)
    return actor


class KeyOrSession(HttpBearer):
    """Documented in OpenAPI as bearer auth; also accepts the console's session cookie."""

    def __call__(self, request: HttpRequest) -> Any:
        return resolve_actor(request)

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        return resolve_actor(request)  # pragma: no cover - __call__ handles every request


class SignedInUser(APIKeyCookie):
    """The console session of a person (``request.auth`` is the user), in no organization.

    Documented in OpenAPI as the session cookie. A management key acts for an organization, so
    it cannot stand in for a person's consent: such calls get 403 saying so.
    """

    param_name = settings.SESSION_COOKIE_NAME

    def __call__(self, request: HttpRequest) -> Any:
        if request.headers.get("Authorization"):
            raise HttpError(
                403,
                "this route acts for a person: use your own signed-in console session; a "
                "management key acts for an organization",
            )
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        if request.method not in _SAFE_METHODS and not _csrf_ok(request):
            raise CsrfFailed
        return user

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        return self(request)  # pragma: no cover - __call__ handles every request
