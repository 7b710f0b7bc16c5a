"""Template context shared by every console page."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from controlplane.models import Membership, Role


def console(request: HttpRequest) -> dict[str, Any]:
    actor = getattr(request, "actor", None)
    if actor is None:
        return {"actor": None, "memberships": [], "can_write": False, "can_admin": False}
    memberships = Membership.objects.select_related("organization").filter(user=request.user)
    # Viewers see no mutating controls; the services refuse them anyway.
    return {
        "actor": actor,
        "memberships": list(memberships),
        "can_write": actor.has_role(Role.DEVELOPER),
        "can_admin": actor.has_role(Role.ADMIN),
    }
