"""Reads of clusters: the ones an organization may deploy to, and one of them by id or name.
Reads only: the writers are ``deployments.clusters.services``. A cluster of another organization
is :class:`NotFound`, exactly like a missing one."""

from __future__ import annotations

import uuid

from django.db.models import Q, QuerySet

from controlplane.access import Actor, NotFound
from deployments.clusters.models import Cluster
from deployments.endpoints.queries import id_or_name


def clusters_for(actor: Actor) -> QuerySet[Cluster]:
    """Clusters this organization may deploy to: its own and the shared ones (the built-in
    ``local`` cluster has no organization)."""
    return Cluster.objects.filter(
        Q(organization=actor.organization) | Q(organization__isnull=True)
    ).order_by("name", "created_at")


def get_cluster(actor: Actor, cluster_id: uuid.UUID | str) -> Cluster:
    cluster = clusters_for(actor).filter(id_or_name(str(cluster_id))).first()
    if cluster is None:
        raise NotFound("cluster not found")
    return cluster
