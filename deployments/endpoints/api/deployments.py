"""Endpoints: list (filters, pagination), create, get, edit settings, delete, scale, stop, start."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime
from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import Field, StrictInt, StrictStr
from pydantic.config import JsonDict

from controlplane.services import ServiceError
from deployments.api.auth import actor_of
from deployments.api.schemas import PageQuery, StrictIn, page_body, page_schema
from deployments.endpoints import queries, services
from deployments.endpoints.fields import MAX_REPLICAS
from deployments.endpoints.models import SLUG_MAX_LENGTH, SLUG_PATTERN, Deployment
from deployments.fleet import queries as fleet_queries
from deployments.fleet.queries import PlacedOn
from deployments.status import ALL_STATUSES
from runtime.spec import RuntimeSpec

router = Router(tags=["deployments"])

SLUG_DOC: JsonDict = {
    "pattern": SLUG_PATTERN,
    "maxLength": SLUG_MAX_LENGTH,
    "example": "llama-chat",
}


LABELS_DOC = (
    "key/value tags: keys lowercase letters, digits, '.', '_', '/', '-' (at most 63); "
    "not settings, so changing them alone makes no revision"
)


class ClusterRef(Schema):
    id: uuid.UUID
    name: str
    kind: str


class PoolOut(Schema):
    role: str = Field(description="prefill or decode")
    desired: int = Field(description="the pool's size in the serving settings")
    ready: int
    present: int = Field(description="replicas running, ready or not")


class DeploymentOut(Schema):
    id: uuid.UUID
    slug: str
    name: str
    labels: dict[str, str] = Field(
        default_factory=dict, description="key/value tags (e.g. the owner `plinth apply` sets)"
    )
    status: str = Field(description="derived: " + ", ".join(ALL_STATUSES))
    settled: bool = Field(
        description="true when nothing is expected to change by itself: every change is acted "
        "on and the target revision serves at the desired replica count"
    )
    desired_state: str
    desired_replicas: int
    ready_replicas: int
    target_revision: int | None = Field(
        description="the revision that should run: `spec` is its settings, and an edit of them "
        "sends this number as base_revision (a canary's revision is not it until promoted)"
    )
    current_revision: int | None
    generation: int = Field(description="counts the changes asked of the endpoint")
    observed_generation: int = Field(
        description="the generation the last reconcile pass acted on (Kubernetes' "
        "status.observedGeneration): below generation while a change is not yet seen"
    )
    failure_reason: str
    cluster: ClusterRef
    url: str = Field(description="the endpoint's OpenAI-compatible base URL")
    created_at: datetime
    updated_at: datetime


class DeploymentDetailOut(DeploymentOut):
    spec: dict[str, Any] = Field(description="the target revision's RuntimeSpec")
    pools: list[PoolOut] = Field(
        default_factory=list,
        description="a prefill/decode split's pools (size, ready and running replicas); empty "
        "for an endpoint that does not split them",
    )
    warnings: list[dict[str, Any]]
    placement_policy: str = Field(
        "cheapest", description="how replicas split over its clusters (PUT .../placement)"
    )
    placements: list[PlacedOn] = Field(
        default_factory=list,
        description="where its replicas run: per cluster (home first) the state (active, "
        "draining, lost: the cluster cannot be seen), desired and ready replicas",
    )


DeploymentPage = page_schema(DeploymentOut, "DeploymentPage")


class DeploymentCreateIn(StrictIn):
    slug: StrictStr = Field(description="DNS-safe, unique", json_schema_extra=SLUG_DOC)
    name: StrictStr = Field("", description="display name (defaults to the slug)")
    spec: RuntimeSpec
    cluster_id: uuid.UUID | None = Field(None, description="default: the built-in local cluster")
    replicas: StrictInt | None = Field(None, description="default: autoscaling.min_replicas")
    message: StrictStr = Field("", description="why; shown in the revision list")
    labels: dict[StrictStr, StrictStr] | None = Field(None, description=LABELS_DOC)


class SettingsPatchIn(StrictIn):
    spec: RuntimeSpec
    base_revision: StrictInt = Field(
        description="the endpoint's target_revision (as GET reports it) that these settings edit"
    )
    message: StrictStr = ""
    name: StrictStr | None = None
    labels: dict[StrictStr, StrictStr] | None = Field(
        None, description=LABELS_DOC + "; replace the endpoint's labels (omit to keep them)"
    )


class ScaleIn(StrictIn):
    replicas: StrictInt = Field(ge=0, le=MAX_REPLICAS)


class DeploymentFilters(PageQuery):
    status: str | None = Field(None, description="one of: " + ", ".join(ALL_STATUSES))
    search: str | None = Field(None, max_length=100, description="in name or slug")
    cluster: str | None = Field(None, max_length=100, description="cluster id or name")
    label: list[str] = Field(
        default_factory=list,
        description="key=value: endpoints carrying this label (repeat for several)",
    )


def deployment_out(deployment: Deployment, *, detail: bool = False) -> dict[str, Any]:
    status = deployment.status
    target, current = deployment.target_revision, deployment.current_revision
    body: dict[str, Any] = {
        **{f: getattr(deployment, f) for f in ("id", "slug", "name", "labels", "desired_state")},
        "status": status,
        "settled": deployment.settled,
        "desired_replicas": deployment.desired_replicas,
        "ready_replicas": deployment.ready_replicas,
        "target_revision": target.number if target else None,
        "current_revision": current.number if current else None,
        "generation": deployment.generation,
        "observed_generation": deployment.observed_generation,
        "failure_reason": deployment.failure_reason,
        "cluster": deployment.cluster,
        "url": f"{settings.GATEWAY_PUBLIC_URL.rstrip('/')}/endpoints/{deployment.slug}/v1",
        "created_at": deployment.created_at,
        "updated_at": deployment.updated_at,
    }
    if detail:
        body["spec"] = target.spec if target else {}
        body["pools"] = [dataclasses.asdict(pool) for pool in queries.pool_status(deployment)]
        body["warnings"] = target.warnings if target else []
        body["placement_policy"] = deployment.placement_policy
        body["placements"] = fleet_queries.placed_on(deployment)
    return body


def detail_body(request: HttpRequest, deployment_id: str) -> dict[str, Any]:
    deployment = queries.get_deployment(actor_of(request), deployment_id)
    deployment.target_revision = (
        deployment.revisions.get(pk=deployment.target_revision_id)
        if deployment.target_revision_id
        else None
    )
    return deployment_out(deployment, detail=True)


@router.get("/deployments", response=DeploymentPage, summary="List endpoints")
def list_deployments(request: HttpRequest, filters: Query[DeploymentFilters]) -> dict[str, Any]:
    if filters.status and filters.status not in ALL_STATUSES:
        raise ServiceError(f"unknown status; use one of {', '.join(ALL_STATUSES)}", field="status")
    labels = {}
    for pair in filters.label:
        key, equals, value = pair.partition("=")
        if not equals:
            raise ServiceError("write a label filter as key=value", field="label")
        labels[key] = value
    page = queries.list_deployments(
        actor_of(request),
        status=filters.status,
        search=filters.search,
        cluster=filters.cluster,
        labels=labels,
        limit=filters.limit,
        offset=filters.offset,
    )
    items = [deployment_out(d) for d in page.items]
    return page_body(request, items, page.count, filters)


@router.post("/deployments", response={201: DeploymentDetailOut}, summary="Create an endpoint")
def create_deployment(request: HttpRequest, payload: DeploymentCreateIn) -> Status[dict[str, Any]]:
    deployment = services.create_deployment(
        actor_of(request),
        slug=payload.slug,
        name=payload.name,
        spec=payload.spec,
        cluster_id=payload.cluster_id,
        replicas=payload.replicas,
        message=payload.message,
        labels=payload.labels,
    )
    return Status(201, detail_body(request, str(deployment.pk)))


@router.get("/deployments/{deployment_id}", response=DeploymentDetailOut, summary="Get one")
def get_deployment(request: HttpRequest, deployment_id: str) -> dict[str, Any]:
    """``deployment_id`` is the endpoint's id or its slug."""
    return detail_body(request, deployment_id)


@router.patch("/deployments/{deployment_id}", response=DeploymentDetailOut, summary="Edit settings")
def update_settings(
    request: HttpRequest, deployment_id: str, payload: SettingsPatchIn
) -> dict[str, Any]:
    """Creates a new revision and rolls it out. Send the ``target_revision`` you edited as
    ``base_revision``: if the endpoint's settings changed meanwhile (an edit, a rollback, a
    promoted canary), you get 409 and nothing changes; reload and apply your change again.
    Settings identical to the target revision's change nothing (same revision returned)."""
    services.update_settings(
        actor_of(request),
        deployment_id,
        spec=payload.spec,
        base_revision=payload.base_revision,
        message=payload.message,
        name=payload.name,
        labels=payload.labels,
    )
    return detail_body(request, deployment_id)


@router.delete(
    "/deployments/{deployment_id}", response={202: DeploymentOut}, summary="Delete an endpoint"
)
def delete_deployment(request: HttpRequest, deployment_id: str) -> Status[dict[str, Any]]:
    """Tears the endpoint down; it shows status ``deleting`` until that is done."""
    return Status(202, deployment_out(services.delete_deployment(actor_of(request), deployment_id)))


@router.post("/deployments/{deployment_id}/scale", response=DeploymentOut, summary="Scale")
def scale(request: HttpRequest, deployment_id: str, payload: ScaleIn) -> dict[str, Any]:
    actor = actor_of(request)
    services.scale(actor, deployment_id, replicas=payload.replicas)
    return deployment_out(queries.get_deployment(actor, deployment_id))


@router.post("/deployments/{deployment_id}/stop", response=DeploymentOut, summary="Stop")
def stop(request: HttpRequest, deployment_id: str) -> dict[str, Any]:
    actor = actor_of(request)
    services.stop(actor, deployment_id)
    return deployment_out(queries.get_deployment(actor, deployment_id))


@router.post("/deployments/{deployment_id}/start", response=DeploymentOut, summary="Start")
def start(request: HttpRequest, deployment_id: str) -> dict[str, Any]:
    actor = actor_of(request)
    services.start(actor, deployment_id)
    return deployment_out(queries.get_deployment(actor, deployment_id))
