"""Reads of the fleet: an endpoint's placement as the API and the console show it (its replicas
per cluster, the cluster's state), and the endpoints placed on a cluster."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from controlplane.access import Actor
from deployments.clusters.models import Cluster
from deployments.clusters.queries import clusters_for
from deployments.endpoints.models import Deployment
from deployments.fleet.models import Placement, PlacementState


@dataclass(frozen=True)
class PlacedOn:
    """One cluster of an endpoint's placement."""

    cluster: str
    cluster_id: str
    home: bool
    state: str  # PlacementState: active, draining (drained or leaving), lost
    min_replicas: int
    weight: int
    desired_replicas: int
    ready_replicas: int
    total_replicas: int
    retiring: bool
    # Since when the cluster has not answered while within its grace period (the replicas are
    # what was last seen there); None while it answers.
    unanswered_since: datetime | None = None


def placed_on(deployment: Deployment) -> list[PlacedOn]:
    """The endpoint's clusters, home first, with what runs on each."""
    rows = list(Placement.objects.filter(deployment=deployment).select_related("cluster"))
    home = deployment.cluster_id
    if not any(p.cluster_id == home for p in rows):
        # Not yet placed by a pass (an endpoint older than placements): its home, as is.
        rows = [
            *rows,
            Placement(
                deployment=deployment,
                cluster=deployment.cluster,
                desired_replicas=deployment.desired_replicas,
                ready_replicas=deployment.ready_replicas,
                total_replicas=deployment.total_replicas,
            ),
        ]
    ordered = sorted(rows, key=lambda p: (p.cluster_id != home, p.cluster.name))
    return [
        PlacedOn(
            cluster=p.cluster.name,
            cluster_id=str(p.cluster_id),
            home=p.cluster_id == home,
            state=p.state,
            min_replicas=p.min_replicas,
            weight=p.weight,
            desired_replicas=p.desired_replicas,
            ready_replicas=0 if p.state == PlacementState.LOST else p.ready_replicas,
            total_replicas=p.total_replicas,
            retiring=p.retiring,
            unanswered_since=p.unanswered_since,
        )
        for p in ordered
    ]


@dataclass(frozen=True)
class ClusterChoice:
    """A cluster the endpoint may be placed on, as the console's placement form shows it."""

    id: str
    name: str
    placed: bool
    home: bool
    min_replicas: int
    weight: int


def placement_choices(actor: Actor, deployment: Deployment) -> list[ClusterChoice]:
    """Every cluster the organization may use, those the endpoint is placed on first."""
    placed = {p.cluster_id: p for p in deployment.placements.filter(retiring=False)}
    choices = [
        ClusterChoice(
            id=str(c.pk),
            name=c.name,
            placed=c.pk in placed,
            home=c.pk == deployment.cluster_id,
            min_replicas=placed[c.pk].min_replicas if c.pk in placed else 0,
            weight=placed[c.pk].weight if c.pk in placed else 1,
        )
        for c in clusters_for(actor)
    ]
    return sorted(choices, key=lambda c: (not c.home, not c.placed, c.name))


def endpoints_on(cluster: Cluster) -> int:
    """How many endpoints are placed on ``cluster``."""
    return cluster.placements.values("deployment").distinct().count()
