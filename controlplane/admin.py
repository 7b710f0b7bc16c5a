"""Django admin for operators. Secrets are write-only here too: the form has no value field
that shows anything, only one that replaces the value.

Memberships, API keys and the audit trail are read-only here: changing them goes through
``controlplane.services`` (role checks, the audit trail, change notifications to the gateway),
which a model form saving rows directly would skip.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from controlplane import crypto
from controlplane.models import ApiKey, AuditEvent, Membership, Organization, Secret


# ``type: ignore[type-arg]`` on the admin classes here: ModelAdmin and ModelForm are generic in
# django-stubs only; subscripting them at run time needs django-stubs-ext, a dev tool.
class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Lists and shows rows; adding, changing and deleting belong to the services."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Organization)
class OrganizationAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "slug", "created_at")
    search_fields = ("name", "slug")


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin):
    # Roles change through services.change_member_role (owner rules, audit) or invitations.
    list_display = ("user", "organization", "role", "created_at")
    list_filter = ("role",)


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    # Minted in the console or API (the plaintext is shown once), revoked there too: a revoke
    # must reach the gateway's key cache through services' change notification.
    list_display = ("name", "prefix", "kind", "organization", "created_at", "revoked_at")
    list_filter = ("kind",)
    exclude = ("key_hash",)


class SecretAdminForm(forms.ModelForm):  # type: ignore[type-arg]
    new_value = forms.CharField(
        widget=forms.PasswordInput(render_value=False),
        required=False,
        help_text="Write-only: leave empty to keep the current value.",
    )

    class Meta:
        model = Secret
        fields = ("organization", "name", "description")

    def save(self, commit: bool = True) -> Any:
        secret = super().save(commit=False)
        value = self.cleaned_data.get("new_value")
        if value:
            secret.ciphertext = crypto.encrypt(value)
        if commit:
            secret.save()
        return secret


@admin.register(Secret)
class SecretAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = SecretAdminForm
    list_display = ("name", "organization", "updated_at")


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "organization", "actor_label", "action", "target_type")
    list_filter = ("action",)
    search_fields = ("actor_label", "target_id", "target_repr")
