"""An endpoint's timeline: the one writer of DeploymentEvent rows, and its reading by rollout.

Below everything that records what happened (services for what people ask, reconcile for what
was observed, the autoscaler for its decisions), so none of them calls up into another to add a
line. It knows the event model only; what the lines mean is its callers' to say.

``by_rollout`` groups a timeline (newest first) into the rollouts it tells of: a run of events
about one revision, with the events that name no revision (scaling, cluster events) kept in the
run they happened during.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from deployments.endpoints.models import Deployment, DeploymentEvent, EventLevel

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


@dataclass
class Rollout:
    """Consecutive events about one revision (None: before any revision was named)."""

    revision_number: int | None
    events: list[DeploymentEvent] = field(default_factory=list)

    @property
    def level(self) -> str:
        """The most severe level among the events, for the group's heading."""
        levels = {e.level for e in self.events}
        return next((lv for lv in ("error", "warning") if lv in levels), "info")


def by_rollout(events: Iterable[DeploymentEvent]) -> list[Rollout]:
    """The events (newest first) in runs per revision, newest run first.

    Read oldest first: an event naming no revision (a scaling decision) belongs to the rollout
    already under way when it happened, not to the next one.
    """
    groups: list[Rollout] = []
    for event in reversed(list(events)):
        number = event.revision_number
        current = groups[-1] if groups else None
        if current is not None and (number is None or current.revision_number in (None, number)):
            if current.revision_number is None:
                current.revision_number = number
            current.events.append(event)
        else:
            groups.append(Rollout(number, [event]))
    for group in groups:
        group.events.reverse()
    return groups[::-1]
