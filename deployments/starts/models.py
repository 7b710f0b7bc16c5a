"""The record of one replica start: how long each phase of its cold start took."""

from __future__ import annotations

import uuid

from django.db import models

from deployments.endpoints.models import Deployment
from runtime.startup import PHASES


class ReplicaStart(models.Model):
    """One start of one engine replica (a pod, a process), recorded once it was ready.

    ``phases`` maps ``runtime.startup`` phases to seconds, those that are known; they add up
    to ``total_seconds`` (the time from ``created_at`` to ``ready_at``)
    except where an engine reports simulated seconds (a simulator at a time scale).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="starts")
    revision = models.PositiveIntegerField(null=True, blank=True)
    replica = models.CharField(max_length=253)
    role = models.CharField(max_length=16, default="engine")
    created_at = models.DateTimeField()  # the pod or process was created: the start's origin
    ready_at = models.DateTimeField()
    phases = models.JSONField(default=dict)
    total_seconds = models.FloatField()

    class Meta:
        ordering = ("-ready_at",)
        constraints = [
            models.UniqueConstraint(
                fields=("deployment", "replica", "created_at"), name="one_record_per_start"
            )
        ]
        indexes = [models.Index(fields=("deployment", "-ready_at"))]

    def __str__(self) -> str:
        return f"{self.replica} ready in {self.total_seconds:.0f} s"

    def ordered_phases(self) -> list[tuple[str, float]]:
        """(phase, seconds) in phase order (the stored JSON keeps no order)."""
        return [(phase, self.phases[phase]) for phase in PHASES if phase in self.phases]
