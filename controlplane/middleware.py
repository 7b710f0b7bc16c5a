"""Console request context: which organization the signed-in user is working in."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from controlplane.access import Actor
from controlplane.models import Membership

SESSION_ORG_KEY = "plinth_org_id"


class CurrentOrganizationMiddleware:
    """Sets ``request.actor`` (or None) from the session's chosen organization.

    A user who chose no organization, or one they no longer belong to, falls back to their
    first membership.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.actor = _actor(request)  # type: ignore[attr-defined]
        return self.get_response(request)


def _actor(request: HttpRequest) -> Actor | None:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return None
    memberships = Membership.objects.select_related("organization").filter(user=user)
    chosen = request.session.get(SESSION_ORG_KEY)
    membership = None
    if chosen:
        membership = memberships.filter(organization_id=chosen).first()
    if membership is None:
        membership = memberships.order_by("created_at").first()
    if membership is None:
        return None
    return Actor(organization=membership.organization, role=membership.role, user=user)
