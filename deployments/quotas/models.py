"""Per-organization quotas: what an organization may ask for."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from controlplane.models import Organization


class Quota(models.Model):
    """What one organization may ask for, set by instance admins (``deployments.quotas.services``).

    A null limit is no limit; an organization without a row has none at all. GPU limits count
    the GPUs the organization's endpoints ask for (``quotas.usage``), by GPU type
    (``gpus_by_type``: catalogue id -> count) and in total. The row is also the lock that
    serialises the organization's quota checks: each writer locks it (SELECT ... FOR UPDATE)
    before counting, so two creates racing cannot both fit under the same headroom.
    """

    organization = models.OneToOneField(
        Organization, on_delete=models.CASCADE, primary_key=True, related_name="quota"
    )
    gpus = models.PositiveIntegerField(null=True, blank=True)
    gpus_by_type = models.JSONField(default=dict, blank=True)
    endpoints = models.PositiveIntegerField(null=True, blank=True)
    replicas_per_endpoint = models.PositiveIntegerField(null=True, blank=True)
    # GPU-hours the organization's quantization runs may use in a calendar month (UTC).
    quantization_gpu_hours = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.CharField(max_length=150, blank=True)

    def __str__(self) -> str:
        return f"quota of {self.organization}"
