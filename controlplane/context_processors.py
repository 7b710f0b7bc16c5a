"""Template context shared by every console page."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from controlplane import invitations
from controlplane.models import Membership, Role


def console(request: HttpRequest) -> dict[str, Any]:
    actor = getattr(request, "actor", None)
    pending = _pending_invitations(request)
    if actor is None or not request.user.is_authenticated:
        return {
            "actor": None,
            "memberships": [],
            "can_write": False,
            "can_admin": False,
            "pending_invitations": pending,
        }
    memberships = Membership.objects.select_related("organization").filter(user=request.user)
    # Viewers see no mutating controls; the services refuse them anyway.
    return {
        "actor": actor,
        "memberships": list(memberships),
        "can_write": actor.has_role(Role.DEVELOPER),
        "can_admin": actor.has_role(Role.ADMIN),
        "pending_invitations": pending,
    }


def _pending_invitations(request: HttpRequest) -> Any:
    """How many invitations await the signed-in user (counted only if a page shows it)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return 0
    return SimpleLazyObject(lambda: invitations.pending_for_user(user).count())
