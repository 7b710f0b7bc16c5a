"""Clusters: the built-in local one and the organization's Kubernetes clusters (admins add).

Every member sees a cluster's observed GPU inventory (to choose where an endpoint fits); only
admins see and change its operator settings (``ClusterSettings``: validated when saved,
rendered into every endpoint's manifests at its next reconcile pass).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import Field, StrictStr

from controlplane.models import Role
from deployments.api.auth import actor_of
from deployments.api.schemas import PageQuery, StrictIn, page_of, page_schema
from deployments.cluster_settings import ClusterSettings, SettingsInvalid, parse_settings
from deployments.clusters import queries as cluster_queries
from deployments.clusters import services
from deployments.clusters.models import Cluster

router = Router(tags=["clusters"])


class GpuNodeOut(Schema):
    name: str
    gpu: str = Field(description="catalogue GPU id by the cluster's GPU map; empty: none matches")
    product: str = Field(description="the node's nvidia.com/gpu.product label")
    allocatable: int
    allocated: int = Field(description="GPUs requested by the node's unfinished pods")
    schedulable: bool = Field(description="false when the node is cordoned")


class GpuTotalsOut(Schema):
    nodes: int
    gpus: int
    free: int


class InventoryOut(Schema):
    nodes: list[GpuNodeOut]
    gpus: dict[str, GpuTotalsOut] = Field(description="per catalogue GPU, schedulable nodes only")
    error: str = Field(description="why the last look failed (the figures are older); empty if not")
    observed_at: datetime | None


class ClusterOut(Schema):
    id: uuid.UUID
    name: str
    kind: str
    namespace: str
    shared: bool = Field(description="built into the installation, usable by every organization")
    created_at: datetime
    gpu_inventory: InventoryOut | None = Field(
        description="GPU nodes as the worker last observed them; null until then (and for the "
        "local cluster)"
    )
    settings: ClusterSettings | None = Field(
        description="operator settings of a Kubernetes cluster; shown to admins only"
    )
    available: bool = Field(
        True,
        description="false once its API server stopped answering (or every GPU node went "
        "NotReady) for the grace period: its replicas are planned elsewhere",
    )
    unavailable_since: datetime | None = None
    unavailable_reason: str = ""
    last_seen_at: datetime | None = Field(None, description="its last good answer")
    draining: bool = Field(False, description="drained by an admin: endpoints move off it")


ClusterPage = page_schema(ClusterOut, "ClusterPage")


class ClusterIn(StrictIn):
    name: StrictStr = Field(max_length=50, description="DNS-safe")
    kind: StrictStr = "kubernetes"
    namespace: StrictStr = Field("plinth", max_length=63)
    kubeconfig_secret_id: StrictStr = Field(
        max_length=100, description="id or name of the Secret holding the kubeconfig"
    )
    settings: ClusterSettings | None = Field(None, description="operator settings; defaults")


class ClusterPatch(StrictIn):
    namespace: StrictStr | None = Field(
        None, max_length=63, description="only while no endpoint runs on the cluster"
    )
    settings: ClusterSettings | None = Field(None, description="replaces the settings whole")


def _settings(payload: ClusterIn | ClusterPatch) -> dict[str, Any] | None:
    return None if payload.settings is None else payload.settings.model_dump(mode="json")


def cluster_out(cluster: Cluster, *, admin: bool) -> dict[str, Any]:
    inventory = cluster.gpu_inventory
    kube = cluster.kind == "kubernetes"
    return {
        **{f: getattr(cluster, f) for f in ("id", "name", "kind", "namespace", "created_at")},
        "shared": cluster.organization_id is None,
        "gpu_inventory": (
            {**inventory, "observed_at": cluster.inventory_observed_at} if inventory else None
        ),
        "settings": _shown_settings(cluster) if admin and kube else None,
        **{
            f: getattr(cluster, f)
            for f in ("available", "unavailable_since", "unavailable_reason", "last_seen_at")
        },
        "draining": cluster.draining_since is not None,
    }


def _shown_settings(cluster: Cluster) -> ClusterSettings | None:
    """Every field, defaults included; None for settings saved before a rule they now break
    (reconcile tells the admin; a PATCH replaces them)."""
    try:
        return parse_settings(cluster.operator_settings)
    except SettingsInvalid:
        return None


def _is_admin(request: HttpRequest) -> bool:
    return actor_of(request).has_role(Role.ADMIN)


@router.get("/clusters", response=ClusterPage, summary="List clusters")
def list_clusters(request: HttpRequest, page: Query[PageQuery]) -> dict[str, Any]:
    admin = _is_admin(request)
    # The id breaks ties (an organization's cluster may share a name with a shared one), so
    # pages neither skip nor repeat a cluster.
    rows = cluster_queries.clusters_for(actor_of(request)).order_by("name", "created_at", "id")
    return page_of(request, rows, page, lambda c: cluster_out(c, admin=admin))


@router.post("/clusters", response={201: ClusterOut}, summary="Add a Kubernetes cluster")
def create_cluster(request: HttpRequest, payload: ClusterIn) -> Status[dict[str, Any]]:
    cluster = services.create_cluster(
        actor_of(request), **payload.model_dump(exclude={"settings"}), settings=_settings(payload)
    )
    return Status(201, cluster_out(cluster, admin=True))


@router.get("/clusters/{cluster_id}", response=ClusterOut, summary="Get a cluster")
def get_cluster(request: HttpRequest, cluster_id: uuid.UUID) -> dict[str, Any]:
    cluster = cluster_queries.get_cluster(actor_of(request), cluster_id)
    return cluster_out(cluster, admin=_is_admin(request))


@router.patch(
    "/clusters/{cluster_id}", response=ClusterOut, summary="Change a cluster's settings (admins)"
)
def update_cluster(request: HttpRequest, cluster_id: uuid.UUID, payload: ClusterPatch) -> Any:
    cluster = services.update_cluster(
        actor_of(request), cluster_id, namespace=payload.namespace, settings=_settings(payload)
    )
    return cluster_out(cluster, admin=True)


@router.delete("/clusters/{cluster_id}", response={204: None}, summary="Remove a cluster")
def delete_cluster(request: HttpRequest, cluster_id: uuid.UUID) -> Status[None]:
    services.delete_cluster(actor_of(request), cluster_id)
    return Status(204, None)
