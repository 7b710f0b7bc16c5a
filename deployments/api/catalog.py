"""Catalogues (GPU types, known models) and the dry-run check of settings."""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest
from ninja import Router, Schema
from pydantic import Field, StrictStr

from deployments import diff, queries
from deployments.api.auth import actor_of
from deployments.api.revisions import FieldChangeOut
from deployments.api.schemas import FieldErrorOut, StrictIn
from deployments.cluster_settings import cluster_issues
from deployments.fields import initial_replicas
from deployments.models import ClusterKind
from deployments.specs import issue_dict
from runtime.catalog import GpuType, ModelArch, list_gpus, list_models
from runtime.spec import RuntimeSpec
from runtime.validate import Estimate, check, estimate, has_errors

router = Router(tags=["catalogue"])
logger = logging.getLogger(__name__)


class ValidateIn(StrictIn):
    spec: dict[str, Any] = Field(description="a RuntimeSpec to check (see POST /deployments)")
    cluster_id: StrictStr | None = Field(
        default=None,
        max_length=100,
        description="also check against this cluster: what its operator keeps (errors) and its "
        "observed GPU nodes (warnings)",
    )
    deployment: StrictStr | None = Field(
        default=None,
        max_length=100,
        description="also compare with this endpoint's (id or slug) target revision: `changes` "
        "lists what saving these settings would change, as the revision diff does",
    )


class IssueOut(FieldErrorOut):
    severity: str = Field(description="error (blocks a deploy) or warning")


class ValidateOut(Schema):
    valid: bool
    issues: list[IssueOut]
    estimate: Estimate | None = Field(description="memory fit and cost; null when unparsable")
    target_revision: int | None = Field(
        None, description="with `deployment`: the revision compared with (send it as base_revision)"
    )
    changes: list[FieldChangeOut] | None = Field(
        None,
        description="with `deployment`: every setting that differs from the target revision's "
        "(empty: saving would change nothing); null when unparsable or without `deployment`",
    )


@router.get("/gpus", response=list[GpuType], summary="GPU catalogue")
def gpus(request: HttpRequest) -> list[GpuType]:
    return list_gpus()


@router.get("/models", response=list[ModelArch], summary="Model catalogue")
def models(request: HttpRequest) -> list[ModelArch]:
    return list_models()


@router.post("/validate", response=ValidateOut, summary="Check settings without deploying")
def validate(request: HttpRequest, payload: ValidateIn) -> dict[str, Any]:
    """Every issue (errors and warnings, field by field), the memory fit and the cost."""
    spec, issues = check(payload.spec)
    if spec is not None and payload.cluster_id is not None:
        cluster = queries.get_cluster(actor_of(request), payload.cluster_id)
        if cluster.kind == ClusterKind.KUBERNETES:
            replicas = initial_replicas(spec)
            issues += cluster_issues(
                cluster.operator_settings, cluster.gpu_inventory, spec, replicas
            )
    body: dict[str, Any] = {
        "valid": spec is not None and not has_errors(issues),
        "issues": [{**issue_dict(i), "severity": i.severity} for i in issues],
        "estimate": _estimate(spec) if spec is not None else None,
    }
    if payload.deployment is not None:
        deployment = queries.get_deployment(actor_of(request), payload.deployment)
        target = deployment.target_revision
        body["target_revision"] = target.number if target else None
        if spec is not None:
            stored = target.spec if target else {}
            body["changes"] = diff.diff_revisions(stored, spec.model_dump(mode="json"))
    return body


def _estimate(spec: RuntimeSpec) -> Estimate | None:
    try:
        return estimate(spec)
    except Exception:
        # The figures are a convenience of the dry run: a gap in the estimator's arithmetic
        # for some exotic spec must not turn the whole check into a 500. Logged for fixing.
        logger.exception("estimate failed for a spec that passed validation")
        return None
