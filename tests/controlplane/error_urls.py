"""Plinth's URL conf plus routes that fail on purpose, to see the real error handlers answer.

Only tests use it (``@pytest.mark.urls``): nothing in Plinth itself fails on demand, and these
routes must never exist in the real URL conf.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path

from controlplane.urls import handler400, handler403, handler404, handler500  # noqa: F401
from controlplane.urls import urlpatterns as plinth_patterns


def fail(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("REDIS_URL=redis://secret-host:6379/0 must never reach a page")


def refuse(request: HttpRequest) -> HttpResponse:
    raise PermissionDenied("no")


urlpatterns: list[URLPattern | URLResolver] = [
    path("fail/", fail),
    path("api/fail/", fail),
    path("refuse/", refuse),
    *plinth_patterns,
]
