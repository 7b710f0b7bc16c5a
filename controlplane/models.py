"""Platform-wide records: organizations, memberships and invitations, API keys, secrets,
single sign-on identities and the audit log.

Nothing here is written directly by views or the API: ``controlplane.services`` (with
``controlplane.invitations`` and ``controlplane.sso_accounts``) is the only writer, and each of
its functions records an :class:`AuditEvent`.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    DEVELOPER = "developer", "Developer"
    VIEWER = "viewer", "Viewer"


class Organization(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=50, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="memberships"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.DEVELOPER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "user"], name="unique_membership")
        ]
        ordering = ["organization__name", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} ({self.role})"


class InvitationStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    ACCEPTED = "accepted", "Accepted"
    DECLINED = "declined", "Declined"
    REVOKED = "revoked", "Revoked"
    EXPIRED = "expired", "Expired"


class Invitation(models.Model):
    """An offer of membership to whoever signs in as ``username``; nobody joins until they accept.

    It is addressed by name and never resolved to a user when made, so inviting answers the same
    whether or not the name exists (nothing outside the organization can be enumerated).
    ``invited_by``/``invited_by_key`` say who granted the role; acceptance checks they still may.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="invitations"
    )
    username = models.CharField(max_length=150)
    role = models.CharField(max_length=16, choices=Role.choices)
    status = models.CharField(
        max_length=16, choices=InvitationStatus.choices, default=InvitationStatus.PENDING
    )
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    invited_by_key = models.ForeignKey(
        "ApiKey", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    responded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "username"],
                condition=models.Q(status="pending"),
                name="one_pending_invitation_per_name",
            )
        ]
        indexes = [models.Index(fields=["username", "status"])]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.username} to {self.organization} ({self.role})"

    @property
    def is_open(self) -> bool:
        return self.status == InvitationStatus.PENDING and self.expires_at > timezone.now()


class ApiKeyKind(models.TextChoices):
    MANAGEMENT = "management", "Management"
    INFERENCE = "inference", "Inference"


class KeyPriority(models.TextChoices):
    """An inference key's class when its endpoint is overloaded (``gateway.admission``): a
    higher class is admitted before any lower one, and the lowest is shed first."""

    CRITICAL = "critical", "Critical"
    STANDARD = "standard", "Standard"
    BATCH = "batch", "Batch"


# A LoRA adapter's name as an inference key's scope names it (SGLang's names are short).
MAX_ADAPTER_NAME = 128
# An inference key's share of admissions against other keys of its class (weighted fair queuing).
MAX_KEY_WEIGHT = 1000


class ApiKey(models.Model):
    """A bearer key. Only its public prefix and a SHA-256 of the whole key are stored."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=ApiKeyKind.choices)
    # Management keys act with this role; inference keys ignore it.
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.DEVELOPER)
    prefix = models.CharField(max_length=24, unique=True)
    key_hash = models.CharField(max_length=64)
    # Empty means every endpoint of the organization (inference keys only).
    allowed_deployment_ids = ArrayField(models.UUIDField(), default=list, blank=True)
    # Empty means the base model and every adapter (inference keys only); else only the LoRA
    # adapters named here, on whichever endpoint serves them, and not the base model itself.
    allowed_adapters = ArrayField(
        models.CharField(max_length=MAX_ADAPTER_NAME), default=list, blank=True
    )
    requests_per_minute = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_minute = models.PositiveIntegerField(null=True, blank=True)
    # Under overload (inference keys only): the key's class, and its weight within the class.
    priority = models.CharField(
        max_length=16, choices=KeyPriority.choices, default=KeyPriority.STANDARD
    )
    weight = models.PositiveIntegerField(default=1)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Temporary keys (the console playground) expire quickly and are hidden from key lists.
    is_temporary = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["organization", "kind"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()

    def allows_deployment(self, deployment_id: uuid.UUID) -> bool:
        return not self.allowed_deployment_ids or deployment_id in self.allowed_deployment_ids


class Secret(models.Model):
    """An encrypted value (a Hugging Face token, a kubeconfig). Written, never shown again."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="secrets")
    name = models.SlugField(max_length=64)
    description = models.CharField(max_length=200, blank=True)
    ciphertext = models.TextField(editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="unique_secret_name")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        # The ciphertext is left out too: nothing about the value belongs in a log line.
        return f"<Secret {self.name} org={self.organization_id}>"


class AuditEvent(models.Model):
    """One mutation: who did what to which object, with the state before and after."""

    id = models.BigAutoField(primary_key=True)
    organization = models.ForeignKey(
        Organization, null=True, on_delete=models.CASCADE, related_name="audit_events"
    )
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL)
    actor_label = models.CharField(max_length=150)
    action = models.CharField(max_length=64)
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64)
    target_repr = models.CharField(max_length=200, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["organization", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.actor_label} {self.action} {self.target_type}:{self.target_id}"


class SsoIdentity(models.Model):
    """Who a user is at the identity provider: its issuer and the subject it names them by.

    Single sign-on finds the account by this pair, never by a name or an email the provider
    sends (those can change hands), and makes the account on first sign-in.
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    # The groups the provider named at the last sign-in, as shown to admins (not an input).
    groups = models.JSONField(default=list, blank=True)
    last_sign_in_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="unique_sso_subject")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
