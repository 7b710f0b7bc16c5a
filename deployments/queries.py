"""Read-side queries the console needs, always scoped to the actor's organization.

Reads only: writers are ``deployments.services`` and ``deployments.reconcile``. Each function
keeps its query count fixed (no per-row queries), because the list pages are polled.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.db.models import Q, QuerySet
from django.utils import timezone

from controlplane.access import Actor, NotFound
from deployments.models import Cluster, Deployment, DeploymentEvent, MetricSample, Revision

_RELATED = ("cluster", "target_revision", "applied_revision", "current_revision")


def deployments_of(actor: Actor) -> QuerySet[Deployment]:
    return Deployment.objects.filter(organization=actor.organization).select_related(*_RELATED)


def get_endpoint(actor: Actor, slug: str) -> Deployment:
    """The actor's endpoint with this slug; NotFound for missing and other orgs' alike."""
    endpoint = deployments_of(actor).filter(slug=slug).first()
    if endpoint is None:
        raise NotFound("endpoint not found")
    return endpoint


@dataclass(frozen=True)
class EndpointRow:
    deployment: Deployment
    status: str
    model: str
    gpu: str
    gpus_per_replica: int
    requests_per_s: float | None

    @property
    def settled(self) -> bool:
        return self.deployment.settled


def _spec_summary(deployment: Deployment) -> tuple[str, str, int]:
    revision = deployment.target_revision
    spec = revision.spec if revision is not None else {}
    hardware = spec.get("hardware", {})
    parallel = spec.get("parallelism", {})
    gpus = hardware.get("gpus_per_replica") or parallel.get("tp", 1) * parallel.get("pp", 1)
    return spec.get("model", {}).get("source", "?"), hardware.get("gpu", "?"), int(gpus)


def endpoint_rows(actor: Actor, *, search: str = "", status: str = "") -> list[EndpointRow]:
    """The endpoints list: three queries whatever the number of endpoints."""
    # Endpoints being deleted stay listed (as Deleting) until their teardown is done.
    qs = deployments_of(actor)
    if search:
        qs = qs.filter(
            Q(slug__icontains=search)
            | Q(name__icontains=search)
            | Q(target_revision__spec__model__source__icontains=search)
        )
    deployments = list(qs[:500])
    rates = latest_rates([d.pk for d in deployments])
    rows = []
    for d in deployments:
        model, gpu, gpus = _spec_summary(d)
        rows.append(EndpointRow(d, d.status, model, gpu, gpus, rates.get(d.pk)))
    if status:
        rows = [r for r in rows if r.status == status]
    return rows


def latest_rates(ids: list[uuid.UUID]) -> dict[uuid.UUID, float]:
    """Requests per second of each deployment's latest sample (within the last 10 minutes)."""
    if not ids:
        return {}
    since = timezone.now() - timedelta(minutes=10)
    samples = (
        MetricSample.objects.filter(deployment_id__in=ids, ts__gte=since)
        .order_by("deployment_id", "-ts")
        .distinct("deployment_id")
        .values_list("deployment_id", "requests_per_s")
    )
    return dict(samples)


def recent_samples(deployment: Deployment, minutes: int = 60) -> list[MetricSample]:
    since = timezone.now() - timedelta(minutes=minutes)
    samples = MetricSample.objects.filter(deployment=deployment, ts__gte=since).order_by("-ts")
    return list(reversed(samples[:360]))


def recent_events(deployment: Deployment, limit: int = 50) -> list[DeploymentEvent]:
    return list(DeploymentEvent.objects.filter(deployment=deployment)[:limit])


def revisions_of(deployment: Deployment) -> list[Revision]:
    return list(Revision.objects.filter(deployment=deployment).select_related("author"))


def get_revision(deployment: Deployment, number: int) -> Revision:
    revision = Revision.objects.filter(deployment=deployment, number=number).first()
    if revision is None:
        raise NotFound("revision not found")
    return revision


def clusters_for(actor: Actor) -> QuerySet[Cluster]:
    """Clusters this organization may deploy to: its own and the shared ones."""
    return Cluster.objects.filter(
        Q(organization=actor.organization) | Q(organization__isnull=True)
    ).order_by("name")
