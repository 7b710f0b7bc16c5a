"""What a reconcile pass needs of the fleet: an endpoint's placements in rollout order, how many
replicas each cluster runs now (``deployments.fleet.plan`` over the clusters' records), and the
writer of what a pass saw on each cluster.

Reconcile (``deployments.endpoints.reconcile``) does the cluster work through each cluster's own
driver; this module reads and writes records only. A cluster that is unavailable is never given
a count (nothing is deleted where Plinth cannot see); its placement is marked lost and keeps
what was last seen there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from deployments.cluster_settings import SettingsInvalid, parse_settings
from deployments.clusters.models import Cluster, ClusterKind
from deployments.endpoints.models import Deployment
from deployments.fleet import plan as planner
from deployments.fleet.models import Placement, PlacementState


def placements_of(deployment: Deployment) -> list[Placement]:
    """The endpoint's placements, its home cluster's first (rollouts start there), then by
    cluster name. An endpoint made before it had any gets its home one here."""
    rows = list(deployment.placements.select_related("cluster", "cluster__kubeconfig"))
    if not any(p.cluster_id == deployment.cluster_id for p in rows):
        home, _ = Placement.objects.get_or_create(
            deployment=deployment,
            cluster=deployment.cluster,
            defaults={
                "desired_replicas": deployment.total_replicas,
                "ready_replicas": deployment.ready_replicas,
                "router_url": deployment.router_url,
            },
        )
        home.cluster = deployment.cluster
        rows.append(home)
    return sorted(rows, key=lambda p: (p.cluster_id != deployment.cluster_id, p.cluster.name))


def cluster_of_replica(deployment: Deployment, replica: str | None) -> Cluster:
    """Where a replica's log is read: the cluster it runs on (an endpoint on several names it
    in each replica's facts); for none named, the home cluster, or while Plinth cannot see that
    one, the first of its clusters it can."""
    clusters = [p.cluster for p in deployment.placements.select_related("cluster__kubeconfig")]
    by_name = {c.name: c for c in clusters}
    for fact in deployment.replica_facts or []:
        if replica and fact.get("name") == replica and fact.get("cluster") in by_name:
            return by_name[fact["cluster"]]
    home = deployment.cluster
    if home.available or replica:
        return home
    return next((c for c in clusters if c.available), home)


def state_of(placement: Placement) -> str:
    cluster = placement.cluster
    if not cluster.available:
        return PlacementState.LOST
    if cluster.draining_since is not None or placement.retiring:
        return PlacementState.DRAINING
    return PlacementState.ACTIVE


@dataclass(frozen=True)
class Seen:
    """What one pass saw of the endpoint on one cluster."""

    ready: int
    total: int
    replica_facts: list[dict[str, Any]]
    router_url: str


def counts(
    deployment: Deployment,
    placements: Sequence[Placement],
    total: int,
    spec: Mapping[str, Any],
    ready: Mapping[int, int],
) -> tuple[dict[int, int], planner.Plan, bool]:
    """Placement id -> replicas its cluster runs now: the plan for ``total`` under the
    endpoint's policy, with shrinks held until their replacements are ready elsewhere (``ready``:
    placement id -> ready replicas seen this pass); then the plan, and whether a shrink is held
    (the endpoint is not done moving: its next pass comes soon)."""
    by_name = {p.cluster.name: p for p in placements}
    slots = [_slot(p, spec) for p in placements]
    result = planner.plan(total, slots, deployment.placement_policy)
    held = planner.hold_shrinks(
        result.replicas,
        current={p.cluster.name: _current(p) for p in placements},
        ready={p.cluster.name: ready.get(p.pk, 0) for p in placements},
        available={p.cluster.name: p.cluster.available for p in placements},
    )
    counts = {by_name[name].pk: count for name, count in held.items()}
    moving = any(
        held[name] != result.replicas[name] for name, p in by_name.items() if p.cluster.available
    )
    return counts, result, moving


def split(deployment: Deployment, total: int) -> dict[str, int]:
    """Cluster name -> replicas of ``total`` by the endpoint's policy, as the next pass will
    plan them (before any shrink is held); empty for an endpoint on one cluster. What the
    autoscaler's decision means per cluster, for its timeline line."""
    placements = placements_of(deployment)
    if len(placements) < 2 or deployment.target_revision is None:
        return {}
    spec = deployment.target_revision.spec
    slots = [_slot(p, spec) for p in placements]
    return planner.plan(total, slots, deployment.placement_policy).replicas


def described(split_: Mapping[str, int]) -> str:
    """`` (east 2, west 1)``, or "" for no split."""
    if not split_:
        return ""
    return " (" + ", ".join(f"{name} {n}" for name, n in split_.items()) + ")"


def _current(placement: Placement) -> int:
    """What the cluster runs now, as far as a shrink elsewhere is concerned: a cluster back
    from being lost counts from nothing (what was there may be gone), so the others keep their
    replicas until its own are ready again."""
    if placement.state == PlacementState.LOST and placement.cluster.available:
        return 0
    return placement.desired_replicas


def _slot(placement: Placement, spec: Mapping[str, Any]) -> planner.Slot:
    cluster = placement.cluster
    settings = _settings(cluster)
    return planner.Slot(
        cluster=cluster.name,
        min_replicas=placement.min_replicas,
        weight=placement.weight,
        capacity=_capacity(placement, spec),
        price=settings.gpu_price_factor if settings is not None else 1.0,
        available=cluster.available,
        draining=cluster.draining_since is not None or placement.retiring,
    )


def _settings(cluster: Cluster) -> Any:
    if cluster.kind != ClusterKind.KUBERNETES:
        return None
    try:
        return parse_settings(cluster.operator_settings)
    except SettingsInvalid:
        return None  # the pass's driver says so, with the reason


def _capacity(placement: Placement, spec: Mapping[str, Any]) -> int | None:
    """Replicas of this endpoint that fit on the cluster: what it runs there now plus what its
    free GPUs of the spec's type take. None: not known (no inventory, or it could not be read)."""
    inventory = placement.cluster.gpu_inventory
    if not inventory or inventory.get("error"):
        return None
    hardware = spec.get("hardware") or {}
    parallel = spec.get("parallelism") or {}
    per_replica = int(
        hardware.get("gpus_per_replica") or int(parallel.get("tp", 1)) * int(parallel.get("pp", 1))
    )
    free = int(((inventory.get("gpus") or {}).get(hardware.get("gpu", "")) or {}).get("free", 0))
    return placement.total_replicas + free // max(1, per_replica)


def router_url_for(placement: Placement, slug: str, observed: str) -> str:
    """How the gateway reaches this endpoint's router on the placement's cluster: the cluster's
    ``router_address`` when its operator set one, else what the driver observed."""
    settings = _settings(placement.cluster)
    address = settings.router_address_of(slug) if settings is not None else None
    return address if address and observed else observed


# What the gateway reads of a placement: a change to one of these is worth telling it.
ROUTED = ("router_url", "ready_replicas", "state")


def store(placement: Placement, planned: int | None, seen: Seen | None) -> bool:
    """What one pass decided and saw for ``placement`` (None: its cluster was not asked);
    whether anything the gateway reads of it changed."""
    before = [getattr(placement, name) for name in ROUTED]
    fields: dict[str, Any] = {"state": state_of(placement)}
    if planned is not None:
        fields["desired_replicas"] = planned
    if seen is not None:
        fields.update(
            ready_replicas=seen.ready,
            total_replicas=seen.total,
            replica_facts=seen.replica_facts,
            router_url=seen.router_url,
        )
    Placement.objects.filter(pk=placement.pk).update(**fields)
    for name, value in fields.items():
        setattr(placement, name, value)
    return before != [getattr(placement, name) for name in ROUTED]


def mark_unanswered(placement: Placement, since: datetime | None) -> None:
    """Since when the placement's cluster has not answered its endpoint's passes (None: it
    answers); written only when that changes."""
    if placement.unanswered_since != since:
        Placement.objects.filter(pk=placement.pk).update(unanswered_since=since)
        placement.unanswered_since = since
