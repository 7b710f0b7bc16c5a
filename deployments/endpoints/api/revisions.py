"""Revisions of an endpoint: list, get, diff two, and roll back to one."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import P, PathEx, Query, Router, Schema
from pydantic import Field, StrictInt, StrictStr

from deployments.api.auth import actor_of
from deployments.api.schemas import PageQuery, StrictIn, page_body, page_schema
from deployments.endpoints import diff, queries, services
from deployments.endpoints.api.deployments import DeploymentDetailOut, detail_body
from deployments.endpoints.models import Deployment, Revision

router = Router(tags=["revisions"])


class RevisionSummaryOut(Schema):
    number: int
    spec_hash: str
    author: str
    message: str
    rollback_of: int | None = Field(description="the revision whose settings this restored")
    warnings: list[dict[str, Any]]
    created_at: datetime
    is_target: bool = Field(description="the revision that should run")
    is_current: bool = Field(description="the revision that serves now")


class RevisionOut(RevisionSummaryOut):
    spec: dict[str, Any]


RevisionPage = page_schema(RevisionSummaryOut, "RevisionPage")


class FieldChangeOut(Schema):
    path: str
    before: Any = None
    after: Any = None
    added: bool = False
    removed: bool = False


class DiffOut(Schema):
    from_revision: int
    to_revision: int
    changes: list[FieldChangeOut]


class DiffQuery(Schema):
    from_revision: int = Field(ge=1, le=1_000_000, alias="from")
    to_revision: int = Field(ge=1, le=1_000_000, alias="to")


class RollbackIn(StrictIn):
    to_revision: StrictInt = Field(ge=1, description="the revision whose settings to restore")
    message: StrictStr = ""


def revision_out(deployment: Deployment, revision: Revision, *, spec: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "number": revision.number,
        "spec_hash": revision.spec_hash,
        "author": revision.author_label,
        "message": revision.message,
        "rollback_of": revision.rollback_of,
        "warnings": revision.warnings,
        "created_at": revision.created_at,
        "is_target": revision.pk == deployment.target_revision_id,
        "is_current": revision.pk == deployment.current_revision_id,
    }
    if spec:
        body["spec"] = revision.spec
    return body


@router.get(
    "/deployments/{deployment_id}/revisions", response=RevisionPage, summary="List revisions"
)
def list_revisions(
    request: HttpRequest, deployment_id: str, page: Query[PageQuery]
) -> dict[str, Any]:
    deployment = queries.get_deployment(actor_of(request), deployment_id)
    rows = queries.list_revisions(deployment, limit=page.limit, offset=page.offset)
    items = [revision_out(deployment, r, spec=False) for r in rows.items]
    return page_body(request, items, rows.count, page)


@router.get("/deployments/{deployment_id}/revisions/diff", response=DiffOut, summary="Diff two")
def diff_revisions(
    request: HttpRequest, deployment_id: str, query: Query[DiffQuery]
) -> dict[str, Any]:
    """Every setting that differs between revision ``from`` and revision ``to``."""
    deployment = queries.get_deployment(actor_of(request), deployment_id)
    before = queries.get_revision(deployment, query.from_revision)
    after = queries.get_revision(deployment, query.to_revision)
    return {
        "from_revision": before.number,
        "to_revision": after.number,
        "changes": diff.diff_revisions(before.spec, after.spec),
    }


@router.get(
    "/deployments/{deployment_id}/revisions/{number}", response=RevisionOut, summary="Get one"
)
def get_revision(
    request: HttpRequest, deployment_id: str, number: PathEx[int, P(ge=1, le=1_000_000)]
) -> dict[str, Any]:
    deployment = queries.get_deployment(actor_of(request), deployment_id)
    revision = queries.get_revision(deployment, number)
    return revision_out(deployment, revision, spec=True)


@router.post(
    "/deployments/{deployment_id}/rollback", response=DeploymentDetailOut, summary="Roll back"
)
def rollback(request: HttpRequest, deployment_id: str, payload: RollbackIn) -> dict[str, Any]:
    """A new revision whose settings equal ``to_revision``'s, rolled out like any edit."""
    services.rollback(
        actor_of(request), deployment_id, to_revision=payload.to_revision, message=payload.message
    )
    return detail_body(request, deployment_id)
