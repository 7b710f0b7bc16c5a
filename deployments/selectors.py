"""Reading endpoints and revisions, scoped to the actor's organization, in a fixed number of
queries whatever the number of rows (list pages and the API's lists are polled).

Objects of another organization are :class:`NotFound`, exactly like missing ones.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.db.models import Q, QuerySet

from controlplane.access import Actor, NotFound
from controlplane.services import ServiceError
from deployments.models import Deployment, Revision

REVISION_FIELDS = ("target_revision", "current_revision", "applied_revision")


def id_or_name(value: str, prefix: str = "", name_field: str = "name") -> Q:
    """Match a primary key when ``value`` is a UUID, else a name (or slug)."""
    try:
        return Q(**{f"{prefix}pk": uuid.UUID(str(value))})
    except ValueError:
        return Q(**{f"{prefix}{name_field}": str(value)})


def deployments_of(actor: Actor) -> QuerySet[Deployment]:
    # Status needs only revision numbers: leave the (large) specs of related revisions unloaded.
    return (
        Deployment.objects.filter(organization=actor.organization)
        .select_related("cluster", *REVISION_FIELDS)
        .defer(*(f"{name}__spec" for name in REVISION_FIELDS))
    )


def check_endpoint_ids(actor: Actor, ids: list[uuid.UUID] | None) -> list[uuid.UUID]:
    """Endpoint ids a key is limited to: each must be an endpoint of the actor's organization."""
    wanted = set(ids or [])
    found = set(deployments_of(actor).filter(pk__in=wanted).values_list("pk", flat=True))
    if wanted - found:
        raise ServiceError(
            "allowed_deployment_ids names endpoints that do not exist in this organization",
            field="allowed_deployment_ids",
        )
    return list(ids or [])


def by_id_or_slug(id_or_slug: uuid.UUID | str) -> Q:
    return id_or_name(str(id_or_slug), name_field="slug")


def get_deployment(actor: Actor, id_or_slug: uuid.UUID | str) -> Deployment:
    deployment = deployments_of(actor).filter(by_id_or_slug(id_or_slug)).first()
    if deployment is None:
        raise NotFound("endpoint not found")
    return deployment


@dataclass(frozen=True)
class Page:
    items: list[Any]
    count: int


def list_deployments(
    actor: Actor,
    *,
    status: str | None = None,
    search: str | None = None,
    cluster: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> Page:
    """A page of the organization's endpoints, newest first, in two queries at most.

    Status is derived, so a status filter runs over the (search/cluster-filtered) rows in
    Python; one query either way.
    """
    rows = deployments_of(actor)
    if search:
        rows = rows.filter(Q(name__icontains=search) | Q(slug__icontains=search.lower()))
    if cluster:
        rows = rows.filter(id_or_name(cluster, "cluster__"))
    if status:
        matching = [d for d in rows if d.status == status]
        return Page(matching[offset : offset + limit], len(matching))
    return Page(list(rows[offset : offset + limit]), rows.count())


def get_revision(actor: Actor, deployment_id: uuid.UUID | str, number: int) -> Revision:
    deployment = get_deployment(actor, deployment_id)
    revision = deployment.revisions.filter(number=number).first()
    if revision is None:
        raise NotFound(f"revision {number} not found")
    return revision


def list_revisions(deployment: Deployment, *, limit: int = 50, offset: int = 0) -> Page:
    """A page of the endpoint's revisions, newest first (specs left unloaded)."""
    rows = deployment.revisions.defer("spec").order_by("-number")
    return Page(list(rows[offset : offset + limit]), rows.count())
