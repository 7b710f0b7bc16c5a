"""Builds a :class:`~gateway.routes.RouteTable` from the database (Django ORM, run in a thread).

A bounded number of queries whatever the number of endpoints and keys: one for deployments
(their stored status is the derived one), one for their clusters (``deployments.fleet``'s
placements), one for their running canaries, and one for inference keys; ``load_changes`` reads
only the endpoints and keys a change notification named, in as many queries.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any, cast

from django.db import close_old_connections, connections
from django.db.models import F
from django.utils import timezone

from controlplane.crypto import engine_api_key
from controlplane.models import ApiKey, ApiKeyKind
from deployments.endpoints.models import ROUTE_FIELDS, Deployment, DesiredState
from deployments.experiments.models import Canary, CanaryStatus
from deployments.fleet.models import Placement
from gateway.routes import (
    CanaryRoute,
    ClusterRoute,
    Endpoint,
    InferenceKey,
    RouteChanges,
    RouteTable,
)
from runtime.launch import gateway_places
from runtime.spec import PLINTH_ROUTING, AutoscalingSettings, RoutingPlacement, RoutingPolicy
from runtime.startup import furthest


def load_endpoints(ids: Collection[str] | None = None) -> dict[str, Endpoint]:
    """Every endpoint by slug, or only those of ``ids`` (one query either way). The stored
    status is what ``derive_status`` gave the facts, so no revision is read."""
    rows = (
        Deployment.objects.exclude(desired_state=DesiredState.DELETED)
        .only("id", *ROUTE_FIELDS, "replica_facts")
        .annotate(serving_revision=F("current_revision__number"), **_placement("current_revision"))
        .annotate(**_capacity("current_revision"))
        .annotate(**_models("current_revision"))
    )
    if ids is not None:
        rows = rows.filter(pk__in=list(ids))
    canaries = load_canaries(ids)
    clusters = load_clusters(ids)
    endpoints: dict[str, Endpoint] = {}
    for row in rows:
        endpoints[row.slug] = Endpoint(
            id=str(row.id),
            slug=row.slug,
            organization_id=str(row.organization_id),
            status=row.status,
            desired_state=row.desired_state,
            ready_replicas=row.ready_replicas,
            router_url=row.router_url.rstrip("/"),
            upstream_auth=b"Bearer " + engine_api_key(str(row.id)).encode(),
            revision=getattr(row, "serving_revision", None),  # annotated by the query
            canary=canaries.get(str(row.id)),
            placed=_places(*(getattr(row, name, None) for name in _PLACEMENT)),
            start_phase=_start_phase(row.replica_facts),
            clusters=clusters.get(str(row.id), ()),
            per_replica=_per_replica(*(getattr(row, name, None) for name in _CAPACITY)),
            engine_slots=_engine_slots(getattr(row, "max_running", None)),
            **_served(*(getattr(row, name, None) for name in _MODELS)),
        )
    return endpoints


def _start_phase(replica_facts: Any) -> str:
    """What a held request waits on: the starting replicas' phase nearest to ready."""
    facts = replica_facts if isinstance(replica_facts, list) else []
    return furthest(
        str(f.get("start_phase") or "") for f in facts if isinstance(f, dict) and not f.get("ready")
    )


def load_clusters(ids: Collection[str] | None = None) -> dict[str, tuple[ClusterRoute, ...]]:
    """Each endpoint's clusters by endpoint id, of every endpoint or of ``ids`` (one query).

    A placement that names no router yet (nothing runs there, or reconcile has not seen it) can
    take no request and is left out; an endpoint none of whose placements names one is left out
    too: its route is the endpoint's own router (``Endpoint.routes``)."""
    rows = Placement.objects.exclude(router_url="").order_by("deployment_id", "cluster__name")
    if ids is not None:
        rows = rows.filter(deployment_id__in=list(ids))
    found: dict[str, list[ClusterRoute]] = {}
    for deployment_id, name, url, ready, state in rows.values_list(
        "deployment_id", "cluster__name", "router_url", "ready_replicas", "state"
    ):
        route = ClusterRoute(name, url.rstrip("/"), ready, state)
        found.setdefault(str(deployment_id), []).append(route)
    return {deployment_id: tuple(routes) for deployment_id, routes in found.items()}


# Annotation name -> the setting it reads from a revision's spec.
_PLACEMENT = {
    "route_policy": "routing__policy",
    "route_placement": "routing__placement",
    "route_split": "disaggregation__enabled",
}


def _placement(revision: str) -> dict[str, Any]:
    """The three settings of a revision that decide whether the gateway places its requests,
    read in the same query (JSON values: a missing one is None)."""
    return {name: F(f"{revision}__spec__{path}") for name, path in _PLACEMENT.items()}


def _places(policy: object, placement: object, split: object) -> bool:
    """``runtime.launch.gateway_places`` of stored settings, unset ones taking their defaults
    (the router was started from the same settings by ``runtime.launch.router_args``)."""
    # Stored settings were validated when their revision was made: the names are the spec's.
    return gateway_places(
        cast(RoutingPolicy, policy or "cache_aware"),
        cast(RoutingPlacement, placement or PLINTH_ROUTING.placement),
        split is True,
    )


# Annotation name -> the setting of a revision's spec that sizes one replica's in-flight requests.
_CAPACITY = {
    "concurrency_target": "autoscaling__concurrency_target",
    "max_running": "batching__max_running_requests",
}


def _capacity(revision: str) -> dict[str, Any]:
    return {name: F(f"{revision}__spec__{path}") for name, path in _CAPACITY.items()}


def _per_replica(concurrency_target: object, max_running: object) -> int:
    """In-flight requests one replica is sized for (``gateway.admission``): the autoscaler's
    concurrency target (its default when unset), at most the engine's max running requests."""
    target = concurrency_target if isinstance(concurrency_target, int) else None
    per_replica = target or AutoscalingSettings.model_fields["concurrency_target"].default
    if isinstance(max_running, int) and max_running > 0:
        per_replica = min(per_replica, max_running)
    return int(per_replica)


def _engine_slots(max_running: object) -> int:
    """Requests one replica's engine runs at once, when its spec says; 0 when SGLang sizes it."""
    return max_running if isinstance(max_running, int) and max_running > 0 else 0


# Annotation name -> the setting of a revision's spec that names what its engines serve.
_MODELS = {
    "model_served_name": "model__served_name",
    "model_source": "model__source",
    "lora_adapters": "lora__adapters",
}


def _models(revision: str) -> dict[str, Any]:
    return {name: F(f"{revision}__spec__{path}") for name, path in _MODELS.items()}


def _served(served_name: object, source: object, adapters: object) -> dict[str, Any]:
    """The base model's served name (``RuntimeSpec.served_model_name``: the setting, else the
    source) and the adapters' names, from stored settings."""
    return {"served_name": str(served_name or source or ""), "adapters": _adapter_names(adapters)}


def _adapter_names(adapters: object) -> frozenset[str]:
    """The names of a revision's stored ``lora.adapters``."""
    listed = adapters if isinstance(adapters, list) else []
    return frozenset(str(a["name"]) for a in listed if isinstance(a, dict) and a.get("name"))


def load_canaries(ids: Collection[str] | None = None) -> dict[str, CanaryRoute]:
    """The running canaries by endpoint id, of every endpoint or of ``ids`` (one query)."""
    rows = (
        Canary.objects.filter(status=CanaryStatus.RUNNING)
        .annotate(**_placement("revision"))
        .annotate(canary_adapters=F("revision__spec__lora__adapters"))
    )
    if ids is not None:
        rows = rows.filter(deployment_id__in=list(ids))
    fields = ("deployment_id", "revision__number", "router_url", "weight", "sticky")
    routes: dict[str, CanaryRoute] = {}
    for deployment_id, number, url, weight, sticky, ready, adapters, *route in rows.values_list(
        *fields, "ready_replicas", "canary_adapters", *_PLACEMENT
    ):
        routes[str(deployment_id)] = CanaryRoute(
            revision=number,
            router_url=url.rstrip("/"),
            weight=weight,
            sticky=sticky,
            ready_replicas=ready,
            placed=_places(*route),
            adapters=_adapter_names(adapters),
        )
    return routes


def load_keys(ids: Collection[str] | None = None) -> dict[str, InferenceKey]:
    """Every usable inference key by prefix, or only those of ``ids`` (one query)."""
    rows = ApiKey.objects.filter(kind=ApiKeyKind.INFERENCE, revoked_at__isnull=True).exclude(
        expires_at__lte=timezone.now()
    )
    if ids is not None:
        rows = rows.filter(pk__in=list(ids))
    keys: dict[str, InferenceKey] = {}
    for row in rows.values_list(
        "id",
        "prefix",
        "key_hash",
        "organization_id",
        "allowed_deployment_ids",
        "requests_per_minute",
        "tokens_per_minute",
        "expires_at",
        "priority",
        "weight",
        "allowed_adapters",
    ):
        key_id, prefix, key_hash, org_id, allowed, rpm, tpm, expires_at, priority, weight = row[:10]
        keys[prefix] = InferenceKey(
            id=str(key_id),
            prefix=prefix,
            key_hash=key_hash,
            organization_id=str(org_id),
            allowed_endpoint_ids=frozenset(str(i) for i in allowed or ()),
            requests_per_minute=rpm,
            tokens_per_minute=tpm,
            expires_at=expires_at.timestamp() if expires_at is not None else None,
            priority=priority,
            weight=weight,
            allowed_adapters=frozenset(row[10] or ()),
        )
    return keys


def load_route_table() -> RouteTable:
    """The whole table, read fresh. Blocking: call it from a worker thread."""
    # This thread serves no Django requests, so nothing else recycles a dropped connection.
    close_old_connections()
    return RouteTable(endpoints=load_endpoints(), keys=load_keys(), loaded_at=time.time())


def load_changes(deployment_ids: Collection[str], key_ids: Collection[str]) -> RouteChanges:
    """The routes of the endpoints and keys named by change notifications, read fresh: two
    queries at most, whatever the size of the table. One that is gone (deleted, revoked,
    expired) is None, so the table drops it. Blocking: call it from a worker thread."""
    close_old_connections()
    endpoints = {e.id: e for e in load_endpoints(deployment_ids).values()} if deployment_ids else {}
    keys = {k.id: k for k in load_keys(key_ids).values()} if key_ids else {}
    return RouteChanges(
        endpoints={i: endpoints.get(i) for i in deployment_ids},
        keys={i: keys.get(i) for i in key_ids},
    )


def close_connections() -> None:
    """Close this thread's database connection (the refresher's thread, at shutdown)."""
    connections.close_all()
