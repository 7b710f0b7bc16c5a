"""The console's view guard: signed in, inside an organization, domain errors as HTTP pages.

``console_view`` wraps every console page so each view reads like "parse, call one service,
render": NotFound becomes a 404 (objects of another organization look missing), AccessDenied
a 403 page that says which role is needed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.access import AccessDenied, Actor, NotFound

View = Callable[..., HttpResponse]


def console_view(view: View) -> View:
    """Signed-in members only; ``request.actor`` is guaranteed set inside ``view``."""

    @login_required
    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if getattr(request, "actor", None) is None:
            return render(request, "console/no_organization.html", status=403)
        try:
            return view(request, *args, **kwargs)
        except NotFound as exc:
            raise Http404(str(exc)) from exc
        except AccessDenied as exc:
            return render(request, "console/forbidden.html", {"reason": str(exc)}, status=403)

    return wrapper


def actor_of(request: HttpRequest) -> Actor:
    actor: Actor = request.actor  # type: ignore[attr-defined]
    return actor
