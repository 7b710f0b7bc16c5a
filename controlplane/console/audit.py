"""The audit log page: the organization's changes, filtered by action, actor and target."""

from __future__ import annotations

from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from controlplane import audit
from controlplane.guard import actor_of, console_view
from controlplane.models import AuditEvent


@require_GET
@console_view
def audit_log(request: HttpRequest) -> HttpResponse:
    actor = actor_of(request)
    filters = {k: request.GET.get(k, "").strip()[:100] for k in ("action", "actor", "target")}
    # The API's read (admins only, like GET /api/v1/audit): the page shows every member's changes.
    events = audit.events_for(
        actor, action=filters["action"] or None, actor_label=filters["actor"] or None
    )
    if filters["target"]:
        events = events.filter(target_type__icontains=filters["target"])
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    actions = (
        AuditEvent.objects.filter(organization=actor.organization)
        .order_by("action")
        .values_list("action", flat=True)
        .distinct()
    )
    context = {"page": page, "filters": filters, "actions": list(actions)}
    return render(request, "controlplane/audit.html", context)
