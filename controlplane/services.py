"""The only writers of platform-wide state: organizations, members, API keys and secrets.

Each function runs in one transaction, checks the actor's role, scopes to the actor's
organization, and records one AuditEvent. Side effects (change notifications) are sent only
after commit.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError
from django.utils import timezone
from django.utils.text import slugify

from controlplane import audit, crypto, key_scope, keys, notify
from controlplane.access import (
    ROLE_RANK,
    AccessDenied,
    Actor,
    NotFound,
    require_role,
    system_actor,
)
from controlplane.models import (
    MAX_KEY_WEIGHT,
    ApiKey,
    ApiKeyKind,
    KeyPriority,
    Membership,
    Organization,
    Role,
    Secret,
)


class ServiceError(Exception):
    """A request the domain refuses; ``field`` names the input at fault when there is one."""

    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        if code is not None:
            self.code = code

    @property
    def detail(self) -> str:
        """The message as shown next to its field: without a leading ``"<field>: "``."""
        return self.message.removeprefix(f"{self.field}: ") if self.field else self.message


class Conflict(ServiceError):
    code = "conflict"


# Last-used times are written at most this often per key, so authentication stays read-mostly.
LAST_USED_RESOLUTION = timedelta(seconds=60)
TEMPORARY_KEY_LIFETIME = timedelta(hours=1)


# --- organizations and members -------------------------------------------------------------


def _unique_org_slug(name: str) -> str:
    base = slugify(name)[:40] or "org"
    slug, n = base, 1
    while Organization.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


@transaction.atomic
def create_organization(*, name: str, owner: User) -> Organization:
    name = name.strip()
    if not name:
        raise ServiceError("organization name must not be empty", field="name")
    org = Organization.objects.create(name=name[:100], slug=_unique_org_slug(name))
    Membership.objects.create(organization=org, user=owner, role=Role.OWNER)
    actor = Actor(organization=org, role=Role.OWNER, user=owner)
    audit.record(actor, "organization.create", org, after={"name": org.name, "slug": org.slug})
    return org


def _membership(actor: Actor, membership_id: int) -> Membership:
    try:
        return Membership.objects.select_related("user").get(
            pk=membership_id, organization=actor.organization
        )
    except Membership.DoesNotExist as exc:
        raise NotFound("member not found") from exc


def _check_can_grant(actor: Actor, role: str) -> None:
    if role not in Role.values:
        raise ServiceError(
            f"unknown role {role!r}; use one of {', '.join(Role.values)}", field="role"
        )
    # Only owners make owners; admins manage everyone below them.
    require_role(actor, Role.OWNER if role == Role.OWNER else Role.ADMIN)


@transaction.atomic
def add_member(actor: Actor, *, username: str, role: str) -> Membership:
    """Make an existing user a member at once: for bootstrapping and tests only.

    Front ends (console, API) invite instead (``controlplane.invitations``): joining needs the
    person's consent, and this function's "no user named" answer would reveal who exists.
    """
    _check_can_grant(actor, role)
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise ServiceError(f"no user named {username!r}", field="username")
    membership, created = Membership.objects.get_or_create(
        organization=actor.organization, user=user, defaults={"role": role}
    )
    if not created:
        raise Conflict(f"{username} is already a member", field="username")
    audit.record(actor, "member.add", membership, after={"user": username, "role": role})
    return membership


@transaction.atomic
def change_member_role(actor: Actor, *, membership_id: int, role: str) -> Membership:
    _check_can_grant(actor, role)
    membership = _membership(actor, membership_id)
    if membership.role == Role.OWNER:
        require_role(actor, Role.OWNER)
        _ensure_another_owner(membership)
    before = {"role": membership.role}
    membership.role = role
    membership.save(update_fields=["role"])
    audit.record(actor, "member.change_role", membership, before=before, after={"role": role})
    _revoke_management_keys(actor, membership, above=role)
    return membership


@transaction.atomic
def remove_member(actor: Actor, *, membership_id: int) -> None:
    membership = _membership(actor, membership_id)
    require_role(actor, Role.OWNER if membership.role == Role.OWNER else Role.ADMIN)
    if membership.role == Role.OWNER:
        _ensure_another_owner(membership)
    audit.record(
        actor,
        "member.remove",
        membership,
        before={"user": membership.user.get_username(), "role": membership.role},
    )
    _revoke_management_keys(actor, membership, above=None)
    membership.delete()


def _revoke_management_keys(actor: Actor, membership: Membership, *, above: str | None) -> None:
    """A management key must not outlast its creator's access: revoke those of a removed member
    (``above=None``), or those acting with a role above a demoted member's new one. Inference
    keys stay: they are the organization's application credentials."""
    keys = ApiKey.objects.filter(
        organization=membership.organization,
        created_by=membership.user,
        kind=ApiKeyKind.MANAGEMENT,
        revoked_at=None,
    )
    for key in keys:
        if above is not None and ROLE_RANK[Role(key.role)] <= ROLE_RANK[Role(above)]:
            continue
        before = _key_snapshot(key)
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit.record(actor, "api_key.revoke", key, before=before, after=_key_snapshot(key))
        notify.publish_on_commit("api_key", str(key.pk))


def _ensure_another_owner(membership: Membership) -> None:
    others = Membership.objects.filter(
        organization_id=membership.organization_id, role=Role.OWNER
    ).exclude(pk=membership.pk)
    if not others.exists():
        raise Conflict("an organization must keep at least one owner", field="role")


@transaction.atomic
def set_memberships_from_groups(
    user: User, roles: Mapping[Organization, str | None], *, groups: list[str]
) -> None:
    """Single sign-on: make ``user``'s memberships in these organizations what their identity
    provider's groups say (a role, or None for no membership), recorded as the system's doing.

    In an organization the group map names, the groups decide alone: an invited member there
    is changed or removed like any other, and the last owner too (the provider, not Plinth,
    says who owns it). A removed or demoted member's management keys go as they do when an
    admin removes or demotes them."""
    held = {
        m.organization_id: m
        for m in Membership.objects.filter(user=user, organization__in=list(roles))
    }
    for org, role in roles.items():
        membership, actor = held.get(org.pk), system_actor(org)
        why = {"user": user.get_username(), "via": "sso", "groups": groups}
        if membership is None and role is not None:
            membership = Membership.objects.create(organization=org, user=user, role=role)
            audit.record(actor, "member.add", membership, after={**why, "role": role})
        elif membership is not None and role is None:
            audit.record(
                actor, "member.remove", membership, before={**why, "role": membership.role}
            )
            _revoke_management_keys(actor, membership, above=None)
            membership.delete()
        elif membership is not None and role is not None and membership.role != role:
            before = {"role": membership.role}
            membership.role = role
            membership.save(update_fields=["role"])
            audit.record(
                actor, "member.change_role", membership, before=before, after={**why, "role": role}
            )
            _revoke_management_keys(actor, membership, above=role)


def actor_for_user(user: User, organization_id: uuid.UUID | str) -> Actor:
    """The actor for a signed-in user in one of their organizations (NotFound otherwise)."""
    membership = (
        Membership.objects.select_related("organization")
        .filter(user=user, organization_id=organization_id)
        .first()
    )
    if membership is None:
        raise NotFound("organization not found")
    return Actor(organization=membership.organization, role=membership.role, user=user)


# --- API keys --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreatedKey:
    api_key: ApiKey
    plaintext: str  # shown once, never stored


def _key_snapshot(key: ApiKey) -> dict[str, Any]:
    return {
        "name": key.name,
        "kind": key.kind,
        "role": key.role,
        "prefix": key.prefix,
        "allowed_deployment_ids": [str(i) for i in key.allowed_deployment_ids],
        "allowed_adapters": list(key.allowed_adapters),
        "expires_at": key.expires_at.isoformat() if key.expires_at else None,
        "requests_per_minute": key.requests_per_minute,
        "tokens_per_minute": key.tokens_per_minute,
        "priority": key.priority,
        "weight": key.weight,
        "revoked": key.revoked_at is not None,
    }


@transaction.atomic
def create_api_key(
    actor: Actor,
    *,
    name: str,
    kind: str,
    role: str = Role.DEVELOPER,
    allowed_deployment_ids: list[uuid.UUID] | None = None,
    allowed_adapters: list[str] | None = None,
    expires_at: datetime | None = None,
    requests_per_minute: int | None = None,
    tokens_per_minute: int | None = None,
    priority: str = KeyPriority.STANDARD,
    weight: int = 1,
    temporary: bool = False,
) -> CreatedKey:
    """The one way a key is made: an inference key's endpoints must be the organization's
    (asked of the domain through ``key_scope``), so no front-end checks a scope itself."""
    name = name.strip()
    if not name:
        raise ServiceError("key name must not be empty", field="name")
    if kind not in ApiKeyKind.values:
        raise ServiceError("kind must be 'management' or 'inference'", field="kind")
    if kind == ApiKeyKind.MANAGEMENT:
        # A management key acts with its role: only admins may mint them, never above their own.
        require_role(actor, Role.ADMIN)
        if role not in Role.values or role == Role.OWNER:
            raise ServiceError(
                "a management key's role is admin, developer or viewer", field="role"
            )
        if not actor.has_role(role):
            raise AccessDenied(role, actor.role)
        if allowed_deployment_ids:
            raise ServiceError(
                "only inference keys can be limited to endpoints", field="allowed_deployment_ids"
            )
        if allowed_adapters:
            raise ServiceError(
                "only inference keys can be limited to adapters", field="allowed_adapters"
            )
    else:
        require_role(actor, Role.DEVELOPER)
        role = Role.DEVELOPER
        if key_scope.unknown_endpoints(actor, list(allowed_deployment_ids or [])):
            raise ServiceError(
                "allowed_deployment_ids names endpoints that do not exist in this organization",
                field="allowed_deployment_ids",
            )
    if expires_at is not None and expires_at <= timezone.now():
        raise ServiceError("expiry must be in the future", field="expires_at")
    if temporary:
        expires_at = min(
            expires_at or timezone.now() + TEMPORARY_KEY_LIFETIME,
            timezone.now() + TEMPORARY_KEY_LIFETIME,
        )
    _check_limits(requests_per_minute, tokens_per_minute)
    _check_share(kind, priority, weight)
    try:
        adapters = key_scope.clean_adapters(allowed_adapters or [])
    except ValueError as exc:
        raise ServiceError(str(exc), field="allowed_adapters") from exc
    material = keys.generate_key(kind)
    key = ApiKey.objects.create(
        organization=actor.organization,
        name=name[:100],
        kind=kind,
        role=role,
        prefix=material.prefix,
        key_hash=material.key_hash,
        allowed_deployment_ids=list(allowed_deployment_ids or []),
        allowed_adapters=adapters,
        requests_per_minute=requests_per_minute,
        tokens_per_minute=tokens_per_minute,
        priority=priority,
        weight=weight,
        created_by=actor.user if actor.user is not None else None,
        expires_at=expires_at,
        is_temporary=temporary,
    )
    audit.record(actor, "api_key.create", key, after=_key_snapshot(key))
    notify.publish_on_commit("api_key", str(key.pk))
    return CreatedKey(api_key=key, plaintext=material.plaintext)


def _check_limits(requests_per_minute: int | None, tokens_per_minute: int | None) -> None:
    for value, field in (
        (requests_per_minute, "requests_per_minute"),
        (tokens_per_minute, "tokens_per_minute"),
    ):
        if value is not None and value <= 0:
            raise ServiceError(f"{field} must be positive", field=field)


def _check_share(kind: str, priority: str, weight: int) -> None:
    """An inference key's class and weight under overload (``gateway.admission``)."""
    if priority not in KeyPriority.values:
        raise ServiceError(
            f"priority must be one of {', '.join(KeyPriority.values)}", field="priority"
        )
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_KEY_WEIGHT:
        raise ServiceError(
            f"weight must be a whole number from 1 to {MAX_KEY_WEIGHT}", field="weight"
        )
    if kind != ApiKeyKind.INFERENCE and (priority != KeyPriority.STANDARD or weight != 1):
        # Management keys never pass the gateway: a class on one would be a promise kept nowhere.
        raise ServiceError("only inference keys have a priority and a weight", field="priority")


class Unchanged(Enum):
    """A limit left out of a partial change (``None`` lifts a limit, so it cannot say this)."""

    KEEP = "keep"


KEEP = Unchanged.KEEP


@transaction.atomic
def set_api_key_limits(
    actor: Actor,
    *,
    key_id: uuid.UUID | str,
    requests_per_minute: int | Unchanged | None = KEEP,
    tokens_per_minute: int | Unchanged | None = KEEP,
    priority: str | Unchanged = KEEP,
    weight: int | Unchanged = KEEP,
) -> ApiKey:
    """Set (or, with None, lift) an active inference key's per-minute limits, and set its
    priority class and weight under overload; one left out (``KEEP``) stays as it is. The
    gateway reloads the key on the change notification, so the change applies within seconds."""
    key = get_api_key(actor, key_id, for_update=True)
    require_role(actor, Role.ADMIN if key.kind == ApiKeyKind.MANAGEMENT else Role.DEVELOPER)
    if key.kind != ApiKeyKind.INFERENCE:
        raise ServiceError("only inference keys have rate limits", field="requests_per_minute")
    if not key.is_active:
        # Its limits would limit nothing: a revoked or expired key is refused at the gateway.
        state = "revoked" if key.revoked_at is not None else "expired"
        raise Conflict(f"key {key.name} is {state}; its limits cannot change", code=f"key_{state}")
    if requests_per_minute is KEEP:
        requests_per_minute = key.requests_per_minute
    if tokens_per_minute is KEEP:
        tokens_per_minute = key.tokens_per_minute
    if priority is KEEP:
        priority = key.priority
    if weight is KEEP:
        weight = key.weight
    _check_limits(requests_per_minute, tokens_per_minute)
    _check_share(key.kind, priority, weight)
    before = _key_snapshot(key)
    key.requests_per_minute = requests_per_minute
    key.tokens_per_minute = tokens_per_minute
    key.priority, key.weight = priority, weight
    key.save(update_fields=["requests_per_minute", "tokens_per_minute", "priority", "weight"])
    audit.record(actor, "api_key.limits", key, before=before, after=_key_snapshot(key))
    notify.publish_on_commit("api_key", str(key.pk))
    return key


def get_api_key(actor: Actor, key_id: uuid.UUID | str, *, for_update: bool = False) -> ApiKey:
    """The organization's key ``key_id`` (row-locked with ``for_update``); NotFound otherwise."""
    rows = ApiKey.objects.select_for_update() if for_update else ApiKey.objects
    try:
        return rows.get(pk=key_id, organization=actor.organization)
    except (ApiKey.DoesNotExist, ValueError) as exc:
        raise NotFound("API key not found") from exc


@transaction.atomic
def revoke_api_key(actor: Actor, *, key_id: uuid.UUID | str) -> ApiKey:
    key = get_api_key(actor, key_id)
    require_role(actor, Role.ADMIN if key.kind == ApiKeyKind.MANAGEMENT else Role.DEVELOPER)
    if key.revoked_at is not None:
        return key
    before = _key_snapshot(key)
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    audit.record(actor, "api_key.revoke", key, before=before, after=_key_snapshot(key))
    notify.publish_on_commit("api_key", str(key.pk))
    return key


def authenticate_key(plaintext: str, *, kind: str) -> ApiKey | None:
    """The active key of this kind matching ``plaintext``, or None. Constant-time compare."""
    prefix = keys.split_prefix(plaintext)
    if prefix is None:
        return None
    key = ApiKey.objects.select_related("organization").filter(prefix=prefix, kind=kind).first()
    if key is None:
        # Spend the same hashing work as a hit, so timing does not reveal which prefixes exist.
        keys.hashes_match(plaintext, "0" * 64)
        return None
    if not keys.hashes_match(plaintext, key.key_hash) or not key.is_active:
        return None
    _touch_last_used(key)
    return key


def _touch_last_used(key: ApiKey) -> None:
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now


def record_keys_used(used: Mapping[str, datetime]) -> int:
    """The gateway saw these keys at these times (system): move ``last_used_at`` forward.

    As for keys the API authenticates, a key's row is written at most once per
    ``LAST_USED_RESOLUTION``, and never back to an older time (a leftover batch from a retried
    flush). Unknown or deleted keys are skipped. Returns the number of rows written.
    """
    wanted = {}
    for key_id, when in used.items():
        with contextlib.suppress(ValueError):
            wanted[uuid.UUID(key_id)] = when
    stored = dict(ApiKey.objects.filter(pk__in=wanted).values_list("pk", "last_used_at"))
    written = 0
    for pk, when in wanted.items():
        if pk not in stored:
            continue  # deleted since the gateway saw it
        last = stored[pk]
        if last is not None and when - last <= LAST_USED_RESOLUTION:
            continue  # written recently enough, or already later
        written += (
            ApiKey.objects.filter(pk=pk).exclude(last_used_at__gte=when).update(last_used_at=when)
        )
    return written


def actor_for_key(key: ApiKey) -> Actor:
    return Actor(organization=key.organization, role=key.role, api_key=key)


# --- secrets ---------------------------------------------------------------------------------


@transaction.atomic
def set_secret(actor: Actor, *, name: str, value: str, description: str = "") -> Secret:
    """Create or replace a secret. The value is encrypted; nothing returns it to a caller."""
    require_role(actor, Role.ADMIN)
    max_length = 64  # Secret.name's column
    if not name or slugify(name) != name or len(name) > max_length:
        raise ServiceError(
            f"secret name must be 1-{max_length} lowercase letters, digits and hyphens",
            field="name",
        )
    if not value:
        raise ServiceError("secret value must not be empty", field="value")
    secret = (
        Secret.objects.select_for_update()
        .filter(organization=actor.organization, name=name)
        .first()
    )
    action = "secret.update" if secret else "secret.create"
    if secret is None:
        secret = Secret(organization=actor.organization, name=name, created_by=_user(actor))
    secret.description = description[:200]
    secret.ciphertext = crypto.encrypt(value)
    secret.updated_at = timezone.now()
    try:
        with transaction.atomic():
            secret.save()
    except IntegrityError as exc:
        raise Conflict(f"a secret named {name!r} was just created", field="name") from exc
    # The audit trail says that the value changed, never what it is.
    audit.record(
        actor,
        action,
        secret,
        after={"name": name, "description": secret.description, "value": "(write-only)"},
    )
    return secret


def get_secret(actor: Actor, secret_id: uuid.UUID | str) -> Secret:
    try:
        return Secret.objects.get(pk=secret_id, organization=actor.organization)
    except (Secret.DoesNotExist, ValueError) as exc:
        raise NotFound("secret not found") from exc


@transaction.atomic
def delete_secret(actor: Actor, *, secret_id: uuid.UUID | str) -> None:
    require_role(actor, Role.ADMIN)
    secret = get_secret(actor, secret_id)
    audit.record(actor, "secret.delete", secret, before={"name": secret.name})
    try:
        with transaction.atomic():
            secret.delete()
    except ProtectedError as exc:
        # A cluster's kubeconfig (the domain layer holds the reference, protected).
        raise Conflict(
            f"secret {secret.name!r} is in use (a cluster's kubeconfig); remove that first",
            field="secret_id",
        ) from exc


def reveal_secret(secret: Secret) -> str:
    """Plaintext for the platform's own use (drivers); never for a response or a log line."""
    return crypto.decrypt(secret.ciphertext)


def _user(actor: Actor) -> User | None:
    return actor.user if actor.user is not None else None


# --- installation bootstrap ----------------------------------------------------------------


@dataclass(frozen=True)
class Bootstrap:
    organization: Organization
    username: str
    password: str | None  # set only when the admin was created by this call


@transaction.atomic
def bootstrap_installation(*, username: str, org_name: str, password: str) -> Bootstrap:
    """First run: an admin user (staff, superuser) and their organization. Idempotent."""
    user_model = get_user_model()
    user = user_model.objects.filter(username=username).first()
    created_password: str | None = None
    if user is None:
        user = user_model.objects.create_superuser(username=username, email="", password=password)
        created_password = password
    membership = Membership.objects.filter(user=user).select_related("organization").first()
    org = membership.organization if membership else create_organization(name=org_name, owner=user)
    return Bootstrap(organization=org, username=username, password=created_password)
