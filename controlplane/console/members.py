"""The members page: the organization's members and their roles, changing or removing one, and
(admins) inviting someone. Each POST is one ``controlplane.services`` or
``controlplane.invitations`` call."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods, require_POST

from controlplane import invitations, services
from controlplane.console.forms import error_context, form_page, posted
from controlplane.guard import actor_of, console_view
from controlplane.models import Membership, Role
from controlplane.services import ServiceError
from controlplane.sso_accounts import groups_decide_roles_in


def _members_page(request: HttpRequest, **extra: Any) -> HttpResponse:
    actor = actor_of(request)
    members = Membership.objects.filter(organization=actor.organization).select_related("user")
    pending = invitations.pending_for_organization(actor) if actor.has_role(Role.ADMIN) else []
    context = {
        "members": members,
        "roles": Role.choices,
        "invitations": pending,
        "sso_managed": groups_decide_roles_in(actor.organization),
        "sso_provider": settings.PLINTH_OIDC_PROVIDER_NAME,
    }
    return form_page(request, "controlplane/members.html", context, extra)


@require_http_methods(["GET", "POST"])
@console_view
def member_list(request: HttpRequest) -> HttpResponse:
    """Members, and (admins) inviting someone: they join when they accept, never before."""
    if request.method == "GET":
        return _members_page(request)
    form = posted(request, "username", "role")
    try:
        invitation = invitations.invite(
            actor_of(request), username=form["username"], role=form["role"]
        )
    except ServiceError as exc:
        return _members_page(request, form=form, error=error_context(exc))
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
