"""The timeline's lines for replicas that move between an endpoint's clusters: a cluster lost
(failover), one answering again (moving back), one drained or taken out of the placement, and
replicas that fit on no cluster. Each is said once, on the pass that first plans the move (the
placement's stored state is still the previous one then).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deployments.fleet.models import Placement, PlacementState
from deployments.fleet.plan import Plan

# (level, reason, message, data) of one timeline line.
Line = tuple[str, str, str, dict[str, Any]]


def lines(placements: Sequence[Placement], counts: Mapping[int, int], plan: Plan) -> list[Line]:
    grown = {
        p.cluster.name: counts[p.pk] - p.desired_replicas
        for p in placements
        if p.cluster.available and counts[p.pk] > p.desired_replicas
    }
    onto = (
        ", ".join(f"{name} +{n}" for name, n in grown.items()) or "no other cluster (none has room)"
    )
    out: list[Line] = []
    for placement in placements:
        cluster, had = placement.cluster, placement.desired_replicas
        data = {"cluster": cluster.name}
        if not cluster.available and placement.state != PlacementState.LOST and had:
            since = (
                cluster.unavailable_since.strftime("%H:%M:%S")
                if cluster.unavailable_since
                else "now"
            )
            why = cluster.unavailable_reason or "it stopped answering"
            message = (
                f"cluster {cluster.name} unavailable since {since} ({why}): its {had} replica(s) "
                f"re-planned onto {onto}; nothing on {cluster.name} is deleted"
            )
            out.append(("warning", "ClusterLost", message, data))
        elif cluster.available and placement.state == PlacementState.LOST:
            message = (
                f"cluster {cluster.name} answers again: {counts[placement.pk]} replica(s) "
                "planned there; the others shrink once those are ready"
            )
            out.append(("info", "ClusterReturned", message, data))
        elif placing_off(placement) and placement.state == PlacementState.ACTIVE and had:
            why = "taken out of the placement" if placement.retiring else "drained"
            message = (
                f"cluster {cluster.name} {why}: its {had} replica(s) start on {onto} first, "
                f"then stop on {cluster.name}"
            )
            out.append(("info", "Draining", message, data))
    if plan.unplaced:
        message = f"{plan.unplaced} replica(s) fit on no cluster's free GPUs; they wait unscheduled"
        out.append(("warning", "Unplaced", message, {"key": f"unplaced:{plan.unplaced}"}))
    return out


def placing_off(placement: Placement) -> bool:
    """Its replicas are moving off it: its cluster is drained, or it leaves the placement."""
    return placement.retiring or placement.cluster.draining_since is not None
