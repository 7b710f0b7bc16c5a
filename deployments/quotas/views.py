"""The instance admins' quota page: every organization's quotas against what its endpoints ask
for, and a form to set them. Staff only (``quotas.set_quota`` checks again); members see their
own organization's usage against its quotas on the Usage page."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from controlplane.guard import user_of
from controlplane.models import Organization
from controlplane.services import ServiceError
from deployments.quotas import services as quotas

PER_PAGE = 25
NUMBER_FIELDS = ("gpus", "endpoints", "replicas_per_endpoint", "quantization_gpu_hours")


def _number(form: Any, name: str) -> int | None:
    raw = (form.get(name) or "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise ServiceError(f"{name}: a whole number, or empty for no limit", field=name)
    return int(raw)


def _gpu_limits(raw: str) -> dict[str, int]:
    """``"H100-SXM=8, A100-80GB=4"`` as {type: count}; the service checks the types."""
    out: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in raw.replace("\n", ",").split(","))):
        name, sep, count = part.partition("=")
        if not sep or not count.strip().isdigit():
            raise ServiceError(
                f"gpus_by_type: write TYPE=COUNT pairs, e.g. H100-SXM=8 (not {part[:40]!r})",
                field="gpus_by_type",
            )
        out[name.strip()] = int(count.strip())
    return out


def limits_from_form(form: Any) -> dict[str, Any]:
    limits: dict[str, Any] = {name: _number(form, name) for name in NUMBER_FIELDS}
    limits["gpus_by_type"] = _gpu_limits(form.get("gpus_by_type") or "")
    return limits


def _organization(raw: str) -> Organization:
    try:
        organization = Organization.objects.filter(pk=uuid.UUID(raw)).first()
    except ValueError:
        organization = None
    if organization is None:
        raise Http404("no such organization")
    return organization


@login_required
@require_http_methods(["GET", "POST"])
def quota_admin(request: HttpRequest) -> HttpResponse:
    user = user_of(request)
    if not user.is_staff:
        reason = "quotas are set by instance admins (staff accounts) only"
        return render(request, "console/forbidden.html", {"reason": reason}, status=403)
    if request.method == "POST":
        organization = _organization(request.POST.get("organization", ""))
        try:
            quotas.set_quota(user, organization, limits_from_form(request.POST))
        except ServiceError as exc:
            messages.error(request, f"{organization.name}: {exc.message}")
        else:
            messages.success(request, f"quotas of {organization.name} saved")
        return redirect(request.get_full_path())
    search = request.GET.get("q", "").strip()[:100]
    organizations = Organization.objects.order_by("name", "pk")
    if search:
        organizations = organizations.filter(name__icontains=search)
    page = Paginator(organizations, PER_PAGE).get_page(request.GET.get("page"))
    rows = [
        {
            "organization": organization,
            "usage": quotas.usage(organization)["quotas"],
            "limits": quotas.limits_of(getattr(organization, "quota", None)),
        }
        for organization in page.object_list
    ]
    return render(request, "deployments/quotas.html", {"rows": rows, "page": page, "q": search})
