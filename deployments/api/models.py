"""The REST API's own record: a POST's first response, kept for its Idempotency-Key."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from controlplane.models import Organization


class IdempotencyRecord(models.Model):
    """The first response to a POST sent with an ``Idempotency-Key``, replayed on retries.

    A record belongs to one caller (a management key, or a signed-in user) in one organization:
    another caller sending the same key runs their own request under their own role. ``role``
    is the role the first request ran with; a replay needs it still. ``status_code`` is null
    while the first request is still running. Rows expire after a day.
    """

    id = models.BigAutoField(primary_key=True)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    # "key:<api key id>" or "user:<user id>" (deployments.api.idempotency.caller_of).
    caller = models.CharField(max_length=80, default="")
    role = models.CharField(max_length=16, default="")
    key = models.CharField(max_length=255)
    method = models.CharField(max_length=8)
    path = models.CharField(max_length=500)
    body_hash = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response_body = models.BinaryField(default=bytes)
    content_type = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "caller", "key"], name="unique_idempotency_key_per_caller"
            )
        ]

    def __str__(self) -> str:
        return f"{self.method} {self.path} ({self.key[:20]})"
