"""Console pages that are not about one domain: sign-in, home, organization switching."""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_POST

from controlplane.middleware import SESSION_ORG_KEY
from controlplane.models import Membership


@login_required
def home(request: HttpRequest) -> HttpResponse:
    try:
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
    if Membership.objects.filter(user=request.user, organization_id=org_id).exists():
        request.session[SESSION_ORG_KEY] = org_id
    return redirect("home")


def healthz(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})
