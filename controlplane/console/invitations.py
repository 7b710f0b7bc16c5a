"""Console pages of invitations: an admin revokes one of the organization's; the signed-in
person sees the invitations addressed to them and accepts or declines each.

The person's own page needs no organization (someone invited to their first one has none), so
it is guarded by sign-in only, and everything on it is scoped to the user's own name.
"""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from controlplane import invitations
from controlplane.access import NotFound
from controlplane.guard import actor_of, console_view, user_of
from controlplane.middleware import SESSION_ORG_KEY
from controlplane.services import ServiceError


@require_POST
@console_view
def invitation_revoke(request: HttpRequest, invitation_id: uuid.UUID) -> HttpResponse:
    invitation = invitations.revoke_invitation(actor_of(request), invitation_id=invitation_id)
    messages.success(request, f"Invitation for {invitation.username} revoked.")
    return redirect("member-list")


@require_GET
@login_required
def my_invitations(request: HttpRequest) -> HttpResponse:
    pending = invitations.pending_for_user(user_of(request))
    return render(request, "controlplane/invitations.html", {"invitations": pending})


@require_POST
@login_required
def invitation_respond(request: HttpRequest, invitation_id: uuid.UUID) -> HttpResponse:
    """Accept (join, and switch the console to that organization) or decline."""
    user = user_of(request)
    try:
        if request.POST.get("action") == "accept":
            membership = invitations.accept_invitation(user, invitation_id=invitation_id)
            request.session[SESSION_ORG_KEY] = str(membership.organization_id)
            org = membership.organization.name
            messages.success(request, f"You joined {org} as {membership.role}.")
            return redirect("home")
        invitation = invitations.decline_invitation(user, invitation_id=invitation_id)
        messages.success(request, f"Invitation to {invitation.organization.name} declined.")
    except NotFound as exc:
        raise Http404(str(exc)) from exc
    except ServiceError as exc:
        messages.error(request, exc.message)
    return redirect("invitation-list")
