"""The console's view guard: signed in, inside an organization, domain errors as HTTP pages.

``console_view`` wraps every console page so each view reads like "parse, call one service,
render": NotFound becomes a 404 (objects of another organization look missing), AccessDenied
a 403 page that says which role is needed, and a value the database refuses a 400 page.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import DataError
from django.http import Http404, HttpRequest
from django.http.response import HttpResponseBase
from django.shortcuts import render
from django_htmx.middleware import HtmxDetails

from controlplane.access import AccessDenied, Actor, NotFound
from controlplane.error_pages import UNSTORABLE_MESSAGE, error_answer

View = Callable[..., HttpResponseBase]
logger = logging.getLogger(__name__)


def console_view(view: View) -> View:
    """Signed-in members only; ``request.actor`` is guaranteed set inside ``view``."""

    @login_required
    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if getattr(request, "actor", None) is None:
            return render(request, "console/no_organization.html", status=403)
        try:
            return view(request, *args, **kwargs)
        except NotFound as exc:
            raise Http404(str(exc)) from exc
        except AccessDenied as exc:
            return render(request, "console/forbidden.html", {"reason": str(exc)}, status=403)
        except DataError:
            # A value the database refused that no check caught first: the caller's input.
            logger.warning("database refused a value in %s %s", request.method, request.path)
            return error_answer(request, 400, UNSTORABLE_MESSAGE)

    return wrapper


class HtmxHttpRequest(HttpRequest):
    """A request as django-htmx's middleware leaves it: the annotation of views that read
    ``request.htmx`` (django-htmx's documented way to type it; never instantiated)."""

    htmx: HtmxDetails


def actor_of(request: HttpRequest) -> Actor:
    # CurrentOrganizationMiddleware sets ``actor``, which HttpRequest does not declare.
    actor: Actor = request.actor  # type: ignore[attr-defined]
    return actor


def user_of(request: HttpRequest) -> User:
    """The signed-in person of a page behind ``login_required``, typed for the services."""
    user = request.user
    if not user.is_authenticated:
        raise PermissionDenied  # login_required sent anyone else to sign in first
    return user
