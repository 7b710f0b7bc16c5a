"""Console pages that are not about one domain: sign-in, home, organization switching."""

from __future__ import annotations

import uuid
from functools import cache
from pathlib import Path

from django.contrib.auth.decorators import login_required
from django.contrib.staticfiles import finders
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_GET, require_POST

from controlplane.guard import user_of
from controlplane.middleware import SESSION_ORG_KEY
from controlplane.models import Membership


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Where signing in lands: the endpoints, or for a person in no organization yet, their
    invitations (the endpoint list could only refuse them, 403)."""
    try:
        if getattr(request, "actor", None) is None:
            return redirect(reverse("invitation-list"))
        return redirect(reverse("endpoint-list"))
    except NoReverseMatch:
        return render(request, "controlplane/home.html")


@login_required
@require_POST
def switch_organization(request: HttpRequest) -> HttpResponse:
    try:
        org_id = str(uuid.UUID(request.POST.get("organization", "")))
    except ValueError:
        return redirect("home")
    if Membership.objects.filter(user=user_of(request), organization_id=org_id).exists():
        request.session[SESSION_ORG_KEY] = org_id
    return redirect("home")


def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


@cache
def _favicon_bytes() -> bytes | None:
    found = finders.find("favicon.ico")
    return Path(str(found)).read_bytes() if found else None


@require_GET
def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``: browsers and crawlers ask for it there whatever the page links."""
    icon = _favicon_bytes()
    if icon is None:
        raise Http404("no favicon")
    response = HttpResponse(icon, content_type="image/x-icon")
    patch_cache_control(response, public=True, max_age=86400)
    return response
