"""An endpoint's timeline: the one writer of DeploymentEvent rows.

Below everything that records what happened (services for what people ask, reconcile for what
was observed, the autoscaler for its decisions), so none of them calls up into another to add a
line. It knows the event model only; what the lines mean is its callers' to say.
"""

from __future__ import annotations

from typing import Any

from deployments.models import Deployment, DeploymentEvent, EventLevel

# The reason column's width (DeploymentEvent.reason): longer reasons are cut, not refused.
_REASON_MAX_LENGTH = 64


def record_event(
    deployment: Deployment,
    level: str,
    reason: str,
    message: str,
    revision_number: int | None = None,
    data: dict[str, Any] | None = None,
) -> DeploymentEvent:
    """Add one line to the endpoint's timeline."""
    if level not in EventLevel.values:
        raise ValueError(f"unknown event level {level!r}")
    return DeploymentEvent.objects.create(
        deployment=deployment,
        level=level,
        reason=reason[:_REASON_MAX_LENGTH],
        message=message,
        revision_number=revision_number,
        data=data or {},
    )
