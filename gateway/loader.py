"""Builds a :class:`~gateway.routes.RouteTable` from the database (Django ORM, run in a thread).

A bounded number of queries whatever the number of endpoints and keys: one for deployments
(with their revision numbers, which the derived status needs) and one for inference keys.
"""

from __future__ import annotations

import time

from django.db import close_old_connections, connections
from django.utils import timezone

from controlplane.models import ApiKey, ApiKeyKind
from deployments.models import Deployment, DesiredState
from gateway.routes import Endpoint, InferenceKey, RouteTable

_DEPLOYMENT_FIELDS = (
    "id",
    "slug",
    "organization_id",
    "desired_state",
    "desired_replicas",
    "ready_replicas",
    "total_replicas",
    "replica_facts",
    "router_url",
    "first_ready_at",
    "failed_at",
    "rollout_started_at",
    "generation",
    "observed_generation",
    "target_revision__number",
    "applied_revision__number",
    "current_revision__number",
)


def load_endpoints() -> dict[str, Endpoint]:
    rows = (
        Deployment.objects.exclude(desired_state=DesiredState.DELETED)
        .select_related("target_revision", "applied_revision", "current_revision")
        .only(*_DEPLOYMENT_FIELDS)
    )
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
        )
    return endpoints


def load_keys() -> dict[str, InferenceKey]:
    rows = ApiKey.objects.filter(kind=ApiKeyKind.INFERENCE, revoked_at__isnull=True).exclude(
        expires_at__lte=timezone.now()
    )
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
    ):
        key_id, prefix, key_hash, org_id, allowed, rpm, tpm, expires_at = row
        keys[prefix] = InferenceKey(
            id=str(key_id),
            prefix=prefix,
            key_hash=key_hash,
            organization_id=str(org_id),
            allowed_endpoint_ids=frozenset(str(i) for i in allowed or ()),
            requests_per_minute=rpm,
            tokens_per_minute=tpm,
            expires_at=expires_at.timestamp() if expires_at is not None else None,
        )
    return keys


def load_route_table() -> RouteTable:
    """The whole table, read fresh. Blocking: call it from a worker thread."""
    # This thread serves no Django requests, so nothing else recycles a dropped connection.
    close_old_connections()
    return RouteTable(endpoints=load_endpoints(), keys=load_keys(), loaded_at=time.time())


def close_connections() -> None:
    """Close this thread's database connection (the refresher's thread, at shutdown)."""
    connections.close_all()
