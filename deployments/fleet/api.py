"""The fleet's routes: an endpoint's placement across clusters, and a cluster's drain.

``PUT /deployments/{id}/placement`` is a scale-like change (no new revision); the endpoint's
detail (``GET /deployments/{id}``) shows the same placement with its replicas per cluster.
``POST /clusters/{id}/drain`` and ``/undrain`` are for the cluster's admins.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema
from pydantic import Field, StrictInt, StrictStr

from deployments.api.auth import actor_of
from deployments.api.schemas import StrictIn
from deployments.endpoints import queries as endpoint_queries
from deployments.fleet import queries, services
from deployments.fleet.models import PlacementPolicy
from deployments.fleet.queries import PlacedOn

router = Router(tags=["fleet"])

POLICY_DOC = (
    "how desired replicas split over the clusters: cheapest (fill the cluster with the lowest "
    "gpu_price_factor first), spread (evenly), weighted (by each cluster's weight)"
)


class PlacementClusterIn(StrictIn):
    cluster: StrictStr = Field(max_length=100, description="cluster id or name")
    min_replicas: StrictInt = Field(0, description="replicas kept on it whenever it serves")
    weight: StrictInt = Field(1, description="its share under the weighted policy")


class PlacementIn(StrictIn):
    policy: StrictStr = Field(description=POLICY_DOC, examples=list(PlacementPolicy.values))
    clusters: list[PlacementClusterIn] = Field(
        description="the clusters it runs on, its home first (rollouts start there; a canary "
        "runs there); a cluster left out has its replicas moved off, then removed"
    )


class PlacementOut(Schema):
    policy: str = Field(description=POLICY_DOC)
    clusters: list[PlacedOn] = Field(description="per cluster: its state and replicas")


def placement_out(deployment_id: str, request: HttpRequest) -> dict[str, Any]:
    deployment = endpoint_queries.get_deployment(actor_of(request), deployment_id)
    return {"policy": deployment.placement_policy, "clusters": queries.placed_on(deployment)}


@router.get(
    "/deployments/{deployment_id}/placement",
    response=PlacementOut,
    summary="Where an endpoint's replicas run",
)
def get_placement(request: HttpRequest, deployment_id: str) -> dict[str, Any]:
    return placement_out(deployment_id, request)


@router.put(
    "/deployments/{deployment_id}/placement",
    response=PlacementOut,
    summary="Place an endpoint on clusters",
)
def set_placement(request: HttpRequest, deployment_id: str, payload: PlacementIn) -> Any:
    """Which clusters the endpoint runs on and how its replicas split: applied like a scale
    (no new revision), replicas moving with new ones ready before old ones stop."""
    services.set_placement(
        actor_of(request),
        deployment_id,
        policy=payload.policy,
        clusters=[entry.model_dump() for entry in payload.clusters],
    )
    return placement_out(deployment_id, request)


class DrainOut(Schema):
    cluster: str
    draining: bool
    draining_since: datetime | None
    endpoints: int = Field(description="endpoints placed on the cluster")


def _drain_out(cluster: Any) -> dict[str, Any]:
    return {
        "cluster": cluster.name,
        "draining": cluster.draining_since is not None,
        "draining_since": cluster.draining_since,
        "endpoints": queries.endpoints_on(cluster),
    }


@router.post("/clusters/{cluster_id}/drain", response=DrainOut, summary="Drain a cluster")
def drain_cluster(request: HttpRequest, cluster_id: str) -> dict[str, Any]:
    """``cluster_id`` is its id or name. Admins: every endpoint's replicas start on its other
    clusters first, then stop here. An endpoint placed on this cluster alone keeps serving here."""
    return _drain_out(services.drain_cluster(actor_of(request), cluster_id))


@router.post("/clusters/{cluster_id}/undrain", response=DrainOut, summary="End a drain")
def undrain_cluster(request: HttpRequest, cluster_id: str) -> dict[str, Any]:
    return _drain_out(services.undrain_cluster(actor_of(request), cluster_id))
