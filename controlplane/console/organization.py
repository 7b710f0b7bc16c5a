"""Console pages of the organization's own state: members and roles, secrets, the audit log
(API keys have their own module, ``deployments.traffic.views.keys``, which shares the form helpers
here).

Each POST is one ``controlplane.services`` (or ``controlplane.invitations``) call; a refused
request re-renders the page with the message next to the field it names (status 422), never a
traceback.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from controlplane import audit, invitations, services
from controlplane.access import require_role
from controlplane.guard import actor_of, console_view
from controlplane.models import AuditEvent, Membership, Role, Secret
from controlplane.services import ServiceError


def _form(request: HttpRequest, *names: str) -> dict[str, str]:
    return {name: request.POST.get(name, "").strip() for name in names}


def _error(exc: ServiceError) -> dict[str, str]:
    return {"field": exc.field or "", "message": exc.detail}


def _form_page(
    request: HttpRequest, template: str, context: dict[str, Any], extra: dict[str, Any]
) -> HttpResponse:
    """A list page with its create form; ``extra`` carries a refused form and its error (422)."""
    page = {"form": {}, "error": {}, **context, **extra}
    return render(request, template, page, status=422 if page["error"] else 200)


# --- members -------------------------------------------------------------------------------


def _members_page(request: HttpRequest, **extra: Any) -> HttpResponse:
    actor = actor_of(request)
    members = Membership.objects.filter(organization=actor.organization).select_related("user")
    pending = invitations.pending_for_organization(actor) if actor.has_role(Role.ADMIN) else []
    context = {"members": members, "roles": Role.choices, "invitations": pending}
    return _form_page(request, "controlplane/members.html", context, extra)


@require_http_methods(["GET", "POST"])
@console_view
def member_list(request: HttpRequest) -> HttpResponse:
    """Members, and (admins) inviting someone: they join when they accept, never before."""
    if request.method == "GET":
        return _members_page(request)
    form = _form(request, "username", "role")
    try:
        invitation = invitations.invite(
            actor_of(request), username=form["username"], role=form["role"]
        )
    except ServiceError as exc:
        return _members_page(request, form=form, error=_error(exc))
    # The same words whether or not the name exists: nothing here tells who has an account.
    messages.success(
        request,
        f"Invitation for {invitation.username} as {invitation.role} created. They join when "
        f"they sign in and accept it (it expires in {invitations.INVITATION_LIFETIME.days} days).",
    )
    return redirect("member-list")


@require_POST
@console_view
def member_change(request: HttpRequest, membership_id: int) -> HttpResponse:
    actor = actor_of(request)
    try:
        if request.POST.get("action") == "remove":
            services.remove_member(actor, membership_id=membership_id)
        else:
            services.change_member_role(
                actor, membership_id=membership_id, role=request.POST.get("role", "")
            )
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("member-list")


# --- secrets -------------------------------------------------------------------------------


def _secrets_page(request: HttpRequest, **extra: Any) -> HttpResponse:
    actor = actor_of(request)
    # As in the API: secret names and descriptions are for developers and up.
    require_role(actor, Role.DEVELOPER)
    secrets = Secret.objects.filter(organization=actor.organization).only(
        "id", "name", "description", "updated_at"
    )
    return _form_page(request, "controlplane/secrets.html", {"secrets": secrets}, extra)


@require_http_methods(["GET", "POST"])
@console_view
def secret_list(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return _secrets_page(request)
    form = _form(request, "name", "description")
    try:
        services.set_secret(
            actor_of(request),
            name=form["name"],
            value=request.POST.get("value", ""),
            description=form["description"],
        )
    except ServiceError as exc:
        return _secrets_page(request, form=form, error=_error(exc))
    messages.success(request, f"Secret {form['name']} saved.")
    return redirect("secret-list")


@require_POST
@console_view
def secret_delete(request: HttpRequest, secret_id: str) -> HttpResponse:
    services.delete_secret(actor_of(request), secret_id=secret_id)
    return redirect("secret-list")


# --- audit log -----------------------------------------------------------------------------


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
