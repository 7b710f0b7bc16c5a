"""Who is acting, and what their role lets them do.

An :class:`Actor` is a signed-in member or a management API key, always within one
organization. Every service takes one, checks the role it needs with :func:`require_role`,
and scopes every query to ``actor.organization``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from controlplane.models import Role

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from controlplane.models import ApiKey, Organization

ROLE_RANK = {Role.VIEWER: 0, Role.DEVELOPER: 1, Role.ADMIN: 2, Role.OWNER: 3}


class AccessDenied(Exception):
    """The actor's role is below what the operation needs."""

    def __init__(self, needed: str, role: str) -> None:
        super().__init__(f"this action needs the {needed} role; you are {role}")
        self.needed = needed
        self.role = role


class NotFound(Exception):
    """The object does not exist in the actor's organization (objects of others look missing)."""


@dataclass(frozen=True)
class Actor:
    organization: Organization
    role: str
    user: User | None = None
    api_key: ApiKey | None = None

    @property
    def label(self) -> str:
        if self.api_key is not None:
            return f"key:{self.api_key.prefix}"
        if self.user is not None:
            return f"user:{self.user.get_username()}"
        return "system"

    def has_role(self, minimum: str) -> bool:
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(minimum)]


def require_role(actor: Actor, minimum: str) -> None:
    if not actor.has_role(minimum):
        raise AccessDenied(minimum, actor.role)


def system_actor(organization: Organization) -> Actor:
    """The platform itself (reconcile, autoscaler): recorded as ``system`` in the audit log."""
    return Actor(organization=organization, role=Role.OWNER)
