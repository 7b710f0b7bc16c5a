"""Where endpoints run: the Cluster record (the built-in local one, or a tenant's Kubernetes)."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from controlplane.models import Organization, Secret


class ClusterKind(models.TextChoices):
    LOCAL = "local", "This machine"
    KUBERNETES = "kubernetes", "Kubernetes"


class Cluster(models.Model):
    """Where endpoints run. ``organization`` null means shared by the whole installation (the
    built-in ``local`` cluster is)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, null=True, blank=True, on_delete=models.CASCADE, related_name="clusters"
    )
    name = models.SlugField(max_length=50)
    kind = models.CharField(max_length=16, choices=ClusterKind.choices)
    namespace = models.CharField(max_length=63, default="plinth")
    kubeconfig = models.ForeignKey(
        Secret, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # What its admins set once (``deployments.cluster_settings.ClusterSettings``, validated by
    # ``deployments.clusters.services`` when saved; {}: every default). Kubernetes clusters only.
    operator_settings = models.JSONField(default=dict, blank=True)
    # Its GPU nodes as the worker last saw them (``deployments.clusters.inventory``): {"nodes":
    # [...], "gpus": {gpu: {"nodes", "gpus", "free"}}, "error": ""}; null until first observed.
    gpu_inventory = models.JSONField(null=True, blank=True)
    inventory_observed_at = models.DateTimeField(null=True, blank=True)
    # --- availability (judged by the fleet's health check): failover and drain ---
    # False once it failed for longer than the grace period; True again only after it has
    # answered for the return hold (hysteresis). Replicas there are never deleted while False.
    available = models.BooleanField(default=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)  # last answer with ready GPU nodes
    failing_since = models.DateTimeField(null=True, blank=True)  # first failure of this streak
    unavailable_since = models.DateTimeField(null=True, blank=True)
    healthy_since = models.DateTimeField(null=True, blank=True)  # first answer after failures
    unavailable_reason = models.CharField(max_length=300, blank=True)
    # Set by an operator's drain: endpoints move off (make before break); cleared by undrain.
    draining_since = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [
            # Shared clusters have no organization: NULLs compare equal here, so two shared
            # clusters cannot share a name either.
            models.UniqueConstraint(
                fields=["organization", "name"], name="unique_cluster_name", nulls_distinct=False
            )
        ]

    def __str__(self) -> str:
        return self.name
