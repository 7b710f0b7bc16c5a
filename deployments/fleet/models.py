"""Where an endpoint's replicas run across clusters: one ``Placement`` per (endpoint, cluster).

Every endpoint has at least one, on its home cluster (``Deployment.cluster``). The user sets a
placement's ``min_replicas`` and ``weight`` and the endpoint's ``placement_policy``; the
planner (``deployments.fleet.plan``) decides ``desired_replicas``; reconcile writes what it saw
there (``ready_replicas``, ``router_url``, ``replica_facts``) and the ``state`` (lost while its
cluster is unavailable, draining while its cluster is drained), and since when a cluster still
within its grace period has not answered. The gateway reads
``router_url``, ``ready_replicas`` and ``state``.
"""

from __future__ import annotations

from django.db import models

from deployments.clusters.models import Cluster


class PlacementState(models.TextChoices):
    ACTIVE = "active", "Active"
    DRAINING = "draining", "Draining"
    LOST = "lost", "Lost"  # its cluster is unavailable: nothing there is seen, nothing deleted


class PlacementPolicy(models.TextChoices):
    """How an endpoint's desired replicas are split over its clusters (``fleet.plan``)."""

    CHEAPEST = "cheapest", "Fill the cheapest cluster first"
    SPREAD = "spread", "Spread evenly"
    WEIGHTED = "weighted", "Pinned weights"


class Placement(models.Model):
    """One cluster an endpoint runs, or should run, replicas on."""

    deployment = models.ForeignKey(
        "deployments.Deployment", on_delete=models.CASCADE, related_name="placements"
    )
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="placements")
    # --- asked for by the user ---
    min_replicas = models.PositiveIntegerField(default=0)
    weight = models.PositiveIntegerField(default=1)  # the weighted policy's share
    # Taken out of the endpoint's placement: its replicas move off, then its objects are
    # deleted and the row with them.
    retiring = models.BooleanField(default=False)
    # --- the plan (``fleet.plan``, stored by reconcile) ---
    desired_replicas = models.PositiveIntegerField(default=0)
    # --- observed there (reconcile) ---
    ready_replicas = models.PositiveIntegerField(default=0)
    total_replicas = models.PositiveIntegerField(default=0)
    replica_facts = models.JSONField(default=list, blank=True)
    # How the gateway reaches this cluster's router for this endpoint: the cluster's
    # ``router_address`` setting, else the address the driver observed.
    router_url = models.CharField(max_length=300, blank=True)
    state = models.CharField(
        max_length=16, choices=PlacementState.choices, default=PlacementState.ACTIVE
    )
    # Since when its cluster, though not (yet) lost, has not answered this endpoint's passes
    # (``deployments.endpoints.sites``): what was last seen there is kept meanwhile.
    unanswered_since = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster__name"]
        constraints = [
            models.UniqueConstraint(
                fields=["deployment", "cluster"], name="unique_placement_per_cluster"
            )
        ]

    def __str__(self) -> str:
        return f"{self.deployment_id}@{self.cluster_id}"
