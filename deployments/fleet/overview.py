"""What the fleet page shows: each cluster an organization may deploy to, its health, GPUs by
type (total, used, free, as its inventory last saw them) and the organization's endpoints on it
with their replicas there. Reads only, two queries whatever the number of clusters and
endpoints: the clusters, then every placement of the organization's endpoints."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from controlplane.access import Actor
from deployments.clusters.models import Cluster
from deployments.clusters.queries import clusters_for
from deployments.endpoints.models import DesiredState
from deployments.endpoints.queries import replica_gpus
from deployments.fleet.models import Placement

HEALTHY, FAILING, UNAVAILABLE, DRAINING = "healthy", "failing", "unavailable", "draining"


@dataclass(frozen=True)
class GpuLine:
    """One GPU type of a cluster's inventory."""

    gpu: str
    nodes: int
    total: int
    free: int

    @property
    def used(self) -> int:
        return max(0, self.total - self.free)


@dataclass(frozen=True)
class EndpointLine:
    """One endpoint's part on a cluster."""

    slug: str
    name: str
    state: str  # the placement's: active, draining, lost
    desired: int
    ready: int
    gpu: str
    gpus_per_replica: int


@dataclass
class ClusterCard:
    cluster: Cluster
    health: str  # HEALTHY, FAILING, UNAVAILABLE or DRAINING
    since: datetime | None  # when it became what ``health`` says (None: healthy from the start)
    gpus: list[GpuLine] = field(default_factory=list)
    endpoints: list[EndpointLine] = field(default_factory=list)

    @property
    def ready_replicas(self) -> int:
        return sum(line.ready for line in self.endpoints)


def fleet_overview(actor: Actor) -> list[ClusterCard]:
    """Every cluster ``actor``'s organization may deploy to, with what runs there (two queries)."""
    cards = {c.pk: _card(c) for c in clusters_for(actor)}
    placements = (
        Placement.objects.filter(
            deployment__organization=actor.organization, cluster_id__in=list(cards)
        )
        .exclude(deployment__desired_state=DesiredState.DELETED)
        .order_by("deployment__slug")
        .values_list(
            "cluster_id",
            "deployment__slug",
            "deployment__name",
            "state",
            "desired_replicas",
            "ready_replicas",
            "deployment__target_revision__spec",
        )
    )
    for cluster_id, slug, name, state, desired, ready, spec in placements:
        gpu, per_replica = replica_gpus(spec or {})
        line = EndpointLine(slug, name, state, desired, ready, gpu, per_replica)
        cards[cluster_id].endpoints.append(line)
    return list(cards.values())


def _card(cluster: Cluster) -> ClusterCard:
    health, since = cluster_health(cluster)
    return ClusterCard(cluster, health, since, gpus=gpu_lines(cluster.gpu_inventory))


def cluster_health(cluster: Cluster) -> tuple[str, datetime | None]:
    """What a cluster's availability fields say, worst first: unavailable (failed past the
    grace period), draining (an operator's), failing (within the grace period), healthy."""
    if not cluster.available:
        return UNAVAILABLE, cluster.unavailable_since
    if cluster.draining_since is not None:
        return DRAINING, cluster.draining_since
    if cluster.failing_since is not None:
        return FAILING, cluster.failing_since
    return HEALTHY, cluster.healthy_since


def gpu_lines(inventory: dict[str, Any] | None) -> list[GpuLine]:
    """The inventory's GPU types (``deployments.clusters.inventory``), by name."""
    gpus = (inventory or {}).get("gpus") or {}
    return [
        GpuLine(gpu, int(t.get("nodes", 0)), int(t.get("gpus", 0)), int(t.get("free", 0)))
        for gpu, t in sorted(gpus.items())
        if isinstance(t, dict)
    ]
