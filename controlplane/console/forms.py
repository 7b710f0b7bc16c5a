"""What the organization's console pages share (and the API keys page,
``deployments.traffic.views.keys``): a POSTed form's fields, a refused request's error, and a list
page with its create form. A refused request re-renders the page with the message next to the
field it names (status 422), never a traceback."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.services import ServiceError


def posted(request: HttpRequest, *names: str) -> dict[str, str]:
    """The POSTed fields ``names``, stripped ("" when absent)."""
    return {name: request.POST.get(name, "").strip() for name in names}


def error_context(exc: ServiceError) -> dict[str, str]:
    """A refusal as the page shows it: the field it names and the message."""
    return {"field": exc.field or "", "message": exc.detail}


def form_page(
    request: HttpRequest, template: str, context: dict[str, Any], extra: dict[str, Any]
) -> HttpResponse:
    """A list page with its create form; ``extra`` carries a refused form and its error (422)."""
    page = {"form": {}, "error": {}, **context, **extra}
    return render(request, template, page, status=422 if page["error"] else 200)
