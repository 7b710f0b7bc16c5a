"""The operator's map from identity-provider groups to organizations and roles, for single
sign-on (``PLINTH_OIDC_GROUP_ROLES``), and what a person's groups grant under it.

Framework-free on purpose: settings.py parses the map at start-up, so a malformed one stops
Plinth with a message naming the variable instead of failing at someone's sign-in.

The map is a JSON object from a group's name to one grant (``"acme:admin"``, an organization's
slug and a role) or a list of them. JSON, not a comma list, because group names are often
LDAP DNs or paths that hold commas, equals signs and slashes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# Lowest first; the same names and order as controlplane.models.Role and access.ROLE_RANK (a
# test keeps them equal: settings cannot import the models).
ROLES = ("viewer", "developer", "admin", "owner")


class GroupMapError(ValueError):
    """The map is not what the operator meant to write; the message says where."""


@dataclass(frozen=True)
class Grant:
    organization_slug: str
    role: str


GroupMap = dict[str, tuple[Grant, ...]]


def parse_group_map(text: str) -> GroupMap:
    """``{"group": "org-slug:role" | ["org-slug:role", ...]}`` as grants by group."""
    if not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GroupMapError(f"is not JSON ({exc.msg} at character {exc.pos})") from exc
    if not isinstance(raw, dict):
        raise GroupMapError('must be a JSON object like {"acme-admins": "acme:admin"}')
    return {str(group): _grants(str(group), value) for group, value in raw.items()}


def _grants(group: str, value: object) -> tuple[Grant, ...]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise GroupMapError(f"group {group!r} grants nothing (an empty list)")
    return tuple(_grant(group, item) for item in items)


def _grant(group: str, item: object) -> Grant:
    slug, _, role = str(item).partition(":") if isinstance(item, str) else ("", "", "")
    if not slug or not role:
        raise GroupMapError(f'group {group!r}: {item!r} is not "organization-slug:role"')
    if role not in ROLES:
        known = ", ".join(ROLES)
        raise GroupMapError(f"group {group!r}: unknown role {role!r}; use one of {known}")
    return Grant(organization_slug=slug.strip(), role=role)


def managed_organizations(group_map: GroupMap) -> frozenset[str]:
    """The organizations whose memberships the identity provider's groups decide."""
    return frozenset(grant.organization_slug for grants in group_map.values() for grant in grants)


def roles_for(groups: list[str], group_map: GroupMap) -> dict[str, str]:
    """The role a person with ``groups`` gets in each organization: the highest any of their
    groups grants there. Organizations none of their groups names are absent."""
    roles: dict[str, str] = {}
    for group in groups:
        for grant in group_map.get(group, ()):
            held = roles.get(grant.organization_slug)
            if held is None or ROLES.index(grant.role) > ROLES.index(held):
                roles[grant.organization_slug] = grant.role
    return roles
