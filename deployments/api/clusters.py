"""Clusters: the built-in local one and the organization's Kubernetes clusters (admins add)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema, Status
from pydantic import Field, StrictStr

from deployments import queries, services
from deployments.api.auth import actor_of
from deployments.api.schemas import StrictIn
from deployments.models import Cluster

router = Router(tags=["clusters"])


class ClusterOut(Schema):
    id: uuid.UUID
    name: str
    kind: str
    namespace: str
    shared: bool = Field(description="built into the installation, usable by every organization")
    created_at: datetime


class ClusterIn(StrictIn):
    name: StrictStr = Field(max_length=50, description="DNS-safe")
    kind: StrictStr = "kubernetes"
    namespace: StrictStr = Field("plinth", max_length=63)
    kubeconfig_secret_id: StrictStr = Field(
        max_length=100, description="id or name of the Secret holding the kubeconfig"
    )


def cluster_out(cluster: Cluster) -> dict[str, Any]:
    return {
        **{f: getattr(cluster, f) for f in ("id", "name", "kind", "namespace", "created_at")},
        "shared": cluster.organization_id is None,
    }


@router.get("/clusters", response=list[ClusterOut], summary="List clusters")
def list_clusters(request: HttpRequest) -> list[dict[str, Any]]:
    return [cluster_out(c) for c in queries.list_clusters(actor_of(request))]


@router.post("/clusters", response={201: ClusterOut}, summary="Add a Kubernetes cluster")
def create_cluster(request: HttpRequest, payload: ClusterIn) -> Status[dict[str, Any]]:
    cluster = services.create_cluster(actor_of(request), **payload.model_dump())
    return Status(201, cluster_out(cluster))


@router.get("/clusters/{cluster_id}", response=ClusterOut, summary="Get a cluster")
def get_cluster(request: HttpRequest, cluster_id: uuid.UUID) -> dict[str, Any]:
    return cluster_out(queries.get_cluster(actor_of(request), cluster_id))


@router.delete("/clusters/{cluster_id}", response={204: None}, summary="Remove a cluster")
def delete_cluster(request: HttpRequest, cluster_id: uuid.UUID) -> Status[None]:
    services.delete_cluster(actor_of(request), cluster_id)
    return Status(204, None)
