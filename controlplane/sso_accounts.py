"""Single sign-on's writer: from a person the identity provider vouched for (their ID token
already verified by ``controlplane.sso``) to a Plinth account with the memberships their
groups grant.

The account is found by the provider's issuer and subject (``SsoIdentity``), made on first
sign-in (just in time), and its memberships in the organizations the operator's group map
names are set at every sign-in, so a group change takes effect at the next one. A person whose
groups grant nothing, and who belongs to no organization outside the map, is refused.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from controlplane import services
from controlplane.models import Invitation, InvitationStatus, Membership, Organization, SsoIdentity
from controlplane.sso_mapping import managed_organizations, roles_for

logger = logging.getLogger(__name__)


class SignInRefused(Exception):
    """The provider vouched for this person, but Plinth does not let them in; the message is
    shown to them as it is."""


@dataclass(frozen=True)
class VerifiedPerson:
    """What a verified ID token (and the provider's userinfo) says of the person."""

    issuer: str
    subject: str
    username: str
    email: str = ""
    groups: list[str] = field(default_factory=list)


def sign_in(person: VerifiedPerson) -> User:
    """The account ``person`` signs in as, made or brought up to date; SignInRefused when they
    may not. Memberships their groups no longer grant are removed even then."""
    with transaction.atomic():
        user = _account(person)
        roles = _roles_by_organization(person.groups)
        if user is None and not any(roles.values()) and not _invited(person.username):
            raise SignInRefused(_no_access(person))
        if user is None:
            user = _new_account(person)
        _remember(user, person)
        services.set_memberships_from_groups(user, roles, groups=person.groups)
        has_access = Membership.objects.filter(user=user).exists() or _invited(user.username)
    if not has_access:
        raise SignInRefused(_no_access(person))
    return user


def groups_decide_roles_in(organization: Organization) -> bool:
    """Whether sign-in sets this organization's memberships from the provider's groups (a role
    changed by hand there lasts until that member's next sign-in)."""
    named = managed_organizations(settings.PLINTH_OIDC_GROUP_ROLES)
    return bool(settings.SSO_ENABLED) and organization.slug in named


def _account(person: VerifiedPerson) -> User | None:
    identity = (
        SsoIdentity.objects.select_for_update()
        .select_related("user")
        .filter(issuer=person.issuer, subject=person.subject)
        .first()
    )
    if identity is not None:
        if not identity.user.is_active:
            raise SignInRefused("Your Plinth account is turned off. Ask an administrator.")
        return identity.user
    taken = get_user_model().objects.filter(username=person.username).exists()
    if taken:
        # Adopting it would hand whoever the provider calls by that name someone else's
        # account (a local one, or another provider's): an operator decides, not a claim.
        raise SignInRefused(
            f"The name {person.username!r} belongs to a Plinth account that does not sign in "
            f"through {settings.PLINTH_OIDC_PROVIDER_NAME}. Ask an administrator."
        )
    return None


def _new_account(person: VerifiedPerson) -> User:
    user = get_user_model().objects.create_user(username=person.username, email=person.email)
    user.set_unusable_password()  # signs in through the provider only
    user.save(update_fields=["password"])
    logger.info("single sign-on made the account %s", person.username)
    return user


def _remember(user: User, person: VerifiedPerson) -> None:
    SsoIdentity.objects.update_or_create(
        issuer=person.issuer,
        subject=person.subject,
        defaults={"user": user, "groups": person.groups, "last_sign_in_at": timezone.now()},
    )
    if person.email and user.email != person.email:
        user.email = person.email
        user.save(update_fields=["email"])


def _roles_by_organization(groups: list[str]) -> dict[Organization, str | None]:
    """Every organization the map names, with the role ``groups`` grant there (or None)."""
    group_map = settings.PLINTH_OIDC_GROUP_ROLES
    wanted = roles_for(groups, group_map)
    named = managed_organizations(group_map)
    organizations = {org.slug: org for org in Organization.objects.filter(slug__in=named)}
    for slug in sorted(named - organizations.keys()):
        logger.warning("PLINTH_OIDC_GROUP_ROLES names organization %r, which does not exist", slug)
    return {org: wanted.get(slug) for slug, org in organizations.items()}


def _invited(username: str) -> bool:
    return Invitation.objects.filter(
        username=username, status=InvitationStatus.PENDING, expires_at__gt=timezone.now()
    ).exists()


def _no_access(person: VerifiedPerson) -> str:
    groups = ", ".join(person.groups) or "none"
    return (
        f"You signed in as {person.username}, but none of your groups ({groups}) gives access "
        "to any organization in Plinth. Ask an administrator to add you to a group that does."
    )
