"""Reads of endpoints: the endpoints, their revisions, events and samples, always scoped
to the actor's organization, for the console, the API and the writers alike.

Reads only: writers are ``deployments.endpoints.services`` (and ``deployments.clusters.services``),
with ``deployments.endpoints.reconcile`` and ``deployments.traffic.probe`` for what was observed.
Objects of another organization are :class:`NotFound`, exactly like missing ones. Each function
keeps its query count fixed whatever the number of rows, because list pages and the API's lists are
polled.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.paginator import Page as DjangoPage
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.utils import timezone

from controlplane.access import Actor, NotFound
from deployments.endpoints.models import Deployment, DeploymentEvent, Revision
from deployments.fleet.models import Placement
from deployments.status import role_counts
from deployments.traffic.models import MetricSample
from deployments.traffic.queries import AdapterTraffic, adapter_traffic

REVISION_FIELDS = ("target_revision", "current_revision", "applied_revision")


def id_or_name(value: str, prefix: str = "", name_field: str = "name") -> Q:
    """Match a primary key when ``value`` is a UUID, else a name (or slug)."""
    try:
        return Q(**{f"{prefix}pk": uuid.UUID(str(value))})
    except ValueError:
        return Q(**{f"{prefix}{name_field}": str(value)})


def by_id_or_slug(id_or_slug: uuid.UUID | str) -> Q:
    return id_or_name(str(id_or_slug), name_field="slug")


# --- endpoints -------------------------------------------------------------------------------


def deployments_of(actor: Actor, *, with_specs: bool = False) -> QuerySet[Deployment]:
    """The organization's endpoints with their cluster and revisions in the same query.

    Status needs only revision numbers, so the (large) specs of the related revisions stay
    unloaded unless ``with_specs`` (the console's pages show the target's settings).
    """
    rows = Deployment.objects.filter(organization=actor.organization).select_related(
        "cluster", *REVISION_FIELDS
    )
    return rows if with_specs else rows.defer(*(f"{name}__spec" for name in REVISION_FIELDS))


def get_deployment(actor: Actor, id_or_slug: uuid.UUID | str) -> Deployment:
    """The actor's endpoint by id or slug (the API's addressing)."""
    deployment = deployments_of(actor).filter(by_id_or_slug(id_or_slug)).first()
    if deployment is None:
        raise NotFound("endpoint not found")
    return deployment


def get_endpoint(actor: Actor, slug: str) -> Deployment:
    """The actor's endpoint with this slug, settings loaded (the console's addressing)."""
    endpoint = deployments_of(actor, with_specs=True).filter(slug=slug).first()
    if endpoint is None:
        raise NotFound("endpoint not found")
    return endpoint


def free_slug(base: str) -> str:
    """``base``, else ``base-2``, ``base-3``...: the first slug no endpoint has (global)."""
    taken = set(Deployment.objects.filter(slug__startswith=base).values_list("slug", flat=True))
    candidates = [base] + [f"{base}-{n}" for n in range(2, len(taken) + 2)]
    return next(slug for slug in candidates if slug not in taken)


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
    labels: dict[str, str] | None = None,
    limit: int = 50,
    offset: int = 0,
) -> Page:
    """A page of the organization's endpoints, newest first, in two queries whatever the
    filters: every filter, the status one too (a stored column), runs in SQL before the page is
    cut, so the count and the page agree. ``labels``: endpoints carrying all of them."""
    rows = _filtered(deployments_of(actor), search=search, cluster=cluster, status=status)
    if labels:
        rows = rows.filter(labels__contains=labels)
    return Page(list(rows[offset : offset + limit]), rows.count())


def _filtered(
    rows: QuerySet[Deployment],
    *,
    search: str | None = None,
    cluster: str | None = None,
    status: str | None = None,
    model: bool = False,
) -> QuerySet[Deployment]:
    """``rows`` narrowed by the list filters (``model``: search the model source too)."""
    if search:
        matches = Q(name__icontains=search) | Q(slug__icontains=search.lower())
        if model:
            matches |= Q(target_revision__spec__model__source__icontains=search)
        rows = rows.filter(matches)
    if cluster:
        # Its home cluster, or any other it is placed on (``deployments.fleet``).
        placed = Placement.objects.filter(id_or_name(cluster, "cluster__"))
        rows = rows.filter(
            id_or_name(cluster, "cluster__") | Q(pk__in=placed.values("deployment_id"))
        )
    if status:
        rows = rows.filter(status=status)
    return rows


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
    return (spec.get("model", {}).get("source", "?"), *replica_gpus(spec))


def replica_gpus(spec: dict[str, Any]) -> tuple[str, int]:
    """(GPU type, GPUs per replica) of a stored spec: its ``gpus_per_replica``, else TP x PP."""
    hardware = spec.get("hardware") or {}
    parallel = spec.get("parallelism") or {}
    gpus = hardware.get("gpus_per_replica") or parallel.get("tp", 1) * parallel.get("pp", 1)
    return hardware.get("gpu", "?"), int(gpus)


ENDPOINTS_PER_PAGE = 50


@dataclass(frozen=True)
class EndpointRows:
    """One page of the console's endpoint list (``page`` is Django's, for the page links)."""

    rows: list[EndpointRow]
    page: DjangoPage[Deployment]


def endpoint_rows(
    actor: Actor,
    *,
    search: str = "",
    status: str = "",
    page: int | str | None = 1,
    per_page: int = ENDPOINTS_PER_PAGE,
) -> EndpointRows:
    """A page of the console's endpoints list: four queries whatever the number of endpoints
    (count, page, latest rates, and none for status, a stored column filtered in SQL)."""
    # Endpoints being deleted stay listed (as Deleting) until their teardown is done.
    qs = _filtered(deployments_of(actor, with_specs=True), search=search, status=status, model=True)
    shown = Paginator(qs, per_page).get_page(page)
    deployments = list(shown.object_list)
    rates = latest_rates([d.pk for d in deployments])
    rows = []
    for d in deployments:
        model, gpu, gpus = _spec_summary(d)
        rows.append(EndpointRow(d, d.status, model, gpu, gpus, rates.get(d.pk)))
    return EndpointRows(rows, shown)


# --- revisions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolStatus:
    """One prefill or decode pool of a split endpoint, as last observed."""

    role: str
    desired: int  # the pool's size for the applied revision (the autoscaler's, or its settings')
    ready: int
    present: int  # replicas of the applied revision, ready or not


def pool_status(deployment: Deployment) -> list[PoolStatus]:
    """The prefill and decode pools of the revision reconcile places; empty when it does not
    split them. Reads no more rows than the endpoint and its applied revision."""
    applied = deployment.applied_revision
    split = (applied.spec.get("disaggregation") or {}) if applied is not None else {}
    if applied is None or not split.get("enabled"):
        return []
    counts = role_counts(deployment.replica_facts or [], applied.number)
    sizes = deployment.pool_sizes(applied.number, applied.spec)
    return [
        PoolStatus(
            role=role,
            desired=sizes[role],
            ready=counts.get(role, (0, 0))[0],
            present=counts.get(role, (0, 0))[1],
        )
        for role in ("prefill", "decode")
    ]


def get_revision(deployment: Deployment, number: int) -> Revision:
    revision = Revision.objects.filter(deployment=deployment, number=number).first()
    if revision is None:
        raise NotFound(f"revision {number} not found")
    return revision


def list_revisions(deployment: Deployment, *, limit: int = 50, offset: int = 0) -> Page:
    """A page of the endpoint's revisions, newest first (specs left unloaded)."""
    rows = deployment.revisions.defer("spec").order_by("-number")
    return Page(list(rows[offset : offset + limit]), rows.count())


def revisions_of(deployment: Deployment) -> list[Revision]:
    """Every revision of the endpoint with its author, newest first (the console's history)."""
    return list(Revision.objects.filter(deployment=deployment).select_related("author"))


# --- what was observed -----------------------------------------------------------------------


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


def inference_url(slug: str) -> str:
    """The endpoint's OpenAI-compatible base URL on the gateway."""
    return f"{settings.GATEWAY_PUBLIC_URL.rstrip('/')}/endpoints/{slug}/v1"


def host_url(slug: str) -> str:
    """``https://<slug>.<INFERENCE_DOMAIN>/v1`` when a wildcard domain is set, else empty."""
    domain = settings.INFERENCE_DOMAIN.strip(".")
    return f"https://{slug}.{domain}/v1" if domain else ""


def adapters_of(deployment: Deployment) -> dict[str, Any]:
    """The target revision's adapters, each with whether it serves and its traffic."""
    target, current = deployment.target_revision, deployment.current_revision
    spec = target.spec if target is not None else {}
    serving = {
        a["name"] for a in ((current.spec if current else {}).get("lora") or {}).get("adapters", [])
    }
    traffic = adapter_traffic(deployment.pk)
    listed = []
    for adapter in (spec.get("lora") or {}).get("adapters", []):
        name = adapter["name"]
        listed.append(
            {
                "name": name,
                "source": adapter["source"],
                "revision": adapter.get("revision"),
                "rank": adapter["rank"],
                "pinned": bool(adapter.get("pinned")),
                "serving": name in serving,
                **_traffic(traffic.get(name, AdapterTraffic(name))),
            }
        )
    model = spec.get("model") or {}
    return {
        "target_revision": target.number if target else None,
        "serving_revision": current.number if current else None,
        "served_name": model.get("served_name") or model.get("source", ""),
        "adapters": listed,
        "base": _traffic(traffic.get("", AdapterTraffic(""))),
    }


def _traffic(figures: AdapterTraffic) -> dict[str, int]:
    return {
        "requests_hour": figures.requests_hour,
        "tokens_hour": figures.tokens_hour,
        "requests_day": figures.requests_day,
        "tokens_day": figures.tokens_day,
    }
