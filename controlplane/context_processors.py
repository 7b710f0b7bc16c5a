"""Template context shared by every console page."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from controlplane.models import Membership


def console(request: HttpRequest) -> dict[str, Any]:
    actor = getattr(request, "actor", None)
    if actor is None:
        return {"actor": None, "memberships": []}
    memberships = Membership.objects.select_related("organization").filter(user=request.user)
    return {"actor": actor, "memberships": list(memberships)}
