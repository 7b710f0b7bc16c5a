"""The replica timeline the cost report reads: one span per engine replica's lifetime."""

from __future__ import annotations

import uuid

from django.db import models

from controlplane.models import Organization
from deployments.clusters.models import Cluster
from deployments.endpoints.models import SLUG_MAX_LENGTH


class ReplicaSpan(models.Model):
    """One engine replica holding its GPUs, from the pass that first saw it scheduled to the pass
    that saw it gone (``ended_at`` null while it runs).

    The endpoint is kept by id and slug rather than a foreign key (as ``UsageRecord`` does) so
    a month's cost survives the endpoint's deletion; ``last_seen_at`` ends a span whose endpoint
    was deleted before a pass could close it.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    deployment_id = models.UUIDField()
    deployment_slug = models.CharField(max_length=SLUG_MAX_LENGTH)
    revision = models.PositiveIntegerField(null=True, blank=True)
    replica = models.CharField(max_length=253)
    role = models.CharField(max_length=16, default="engine")
    cluster = models.ForeignKey(Cluster, on_delete=models.SET_NULL, null=True, related_name="+")
    cluster_name = models.CharField(max_length=50)
    gpu = models.CharField(max_length=50)  # the catalogue's GPU id
    gpus = models.PositiveIntegerField()  # per replica, all its nodes together
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField()

    class Meta:
        ordering = ("started_at",)
        constraints = [
            models.UniqueConstraint(
                fields=("deployment_id", "cluster_name", "replica"),
                condition=models.Q(ended_at__isnull=True),
                name="one_open_span_per_replica",
            )
        ]
        indexes = [
            models.Index(fields=("organization", "started_at")),
            models.Index(fields=("deployment_id", "ended_at")),
        ]

    def __str__(self) -> str:
        return f"{self.deployment_slug}/{self.replica} from {self.started_at:%Y-%m-%d %H:%M}"
