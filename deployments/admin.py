"""Django admin for instance admins: organizations' quotas.

Edits go through ``deployments.quotas.services.set_quota`` (checks, the organization's audit trail)
rather than the model form saving the row itself. A quota is never deleted here: clearing
every limit is the same as having none, and stays on record.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from deployments.quotas import services as quotas
from deployments.quotas.models import Quota


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "organization", "gpus", "gpus_by_type", "endpoints", "replicas_per_endpoint", "updated_at",
    )  # fmt: skip
    fields = (
        "organization", "gpus", "gpus_by_type", "endpoints", "replicas_per_endpoint",
        "quantization_gpu_hours",
    )  # fmt: skip
    readonly_fields = ("updated_at", "updated_by")
    search_fields = ("organization__name", "organization__slug")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # The organization is chosen once; a quota never moves to another one.
        return (*self.readonly_fields, "organization") if obj is not None else self.readonly_fields

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Quota, form: Any, change: bool) -> None:
        limits = {name: getattr(obj, name) for name in quotas.limits_of(None)}
        saved = quotas.set_quota(request.user, obj.organization, limits)
        obj.pk, obj.updated_at, obj.updated_by = saved.pk, saved.updated_at, saved.updated_by
