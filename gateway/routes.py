"""The in-memory route table: which endpoints exist and which inference keys may call them.

Pure data, loaded whole by ``gateway.loader`` and swapped in by ``gateway.refresher``, which
also swaps in a copy with one endpoint's or key's route changed when a notification names it; a
request only reads it, so there is no database query and no lock on the request path.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from controlplane.keys import hash_key, split_prefix
from deployments import status as statuses

_Route = TypeVar("_Route", "Endpoint", "InferenceKey")
# Compared against when a prefix is unknown, so a miss costs the same hashing as a hit.
_DUMMY_HASH = "0" * 64


@dataclass(frozen=True, slots=True)
class CanaryRoute:
    """A canary beside the endpoint's serving revision: its own router, and its share."""

    revision: int
    router_url: str
    weight: int  # percent of requests, 1-50
    sticky: bool  # one conversation's requests go to one revision
    ready_replicas: int
    placed: bool = False  # the gateway names each request's replica (``gateway.placement``)
    # The LoRA adapters the canary's revision serves (``gateway.adapters``' names).
    adapters: frozenset[str] = frozenset()

    @property
    def serving(self) -> bool:
        return self.ready_replicas > 0 and bool(self.router_url)

    def serves(self, adapter: str) -> bool:
        """Whether the canary can answer a request for ``adapter`` ("" the base model)."""
        return not adapter or adapter in self.adapters


# A cluster's share of an endpoint (``deployments.fleet``'s Placement.state): an active one takes
# requests; a draining one only while no active cluster has a ready replica; a lost one none.
ACTIVE, DRAINING, LOST = "active", "draining", "lost"


@dataclass(frozen=True, slots=True)
class ClusterRoute:
    """One cluster's part of an endpoint: its router's address, as reachable from the gateway
    (the cluster's ingress or load balancer), and the replicas ready behind it."""

    cluster: str  # the cluster's name, for logs and metrics ("" for an endpoint on one cluster)
    router_url: str
    ready_replicas: int
    state: str = ACTIVE

    @property
    def serving(self) -> bool:
        return self.ready_replicas > 0 and bool(self.router_url) and self.state != LOST


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: str
    slug: str
    organization_id: str
    status: str
    desired_state: str
    ready_replicas: int
    router_url: str
    # ``Authorization`` toward the router: the endpoint's engine key, which smg demands of its
    # callers (and passes on to the engines). Computed when the table is loaded, not per request.
    upstream_auth: bytes = field(default=b"", repr=False)
    revision: int | None = None  # the serving revision's number (X-Plinth-Revision)
    canary: CanaryRoute | None = None  # a canary's pool taking a share (``gateway.split``)
    # The serving revision's requests name their replica (``gateway.placement``).
    placed: bool = False
    # While it starts: the phase its replica nearest to ready waits on (``runtime.startup``).
    start_phase: str = ""
    # Its serving revision's clusters (``gateway.fleet`` splits requests among them); empty: the
    # one router of ``router_url``.
    clusters: tuple[ClusterRoute, ...] = ()

    @property
    def routes(self) -> tuple[ClusterRoute, ...]:
        """The clusters a request may go to: ``clusters``, or the endpoint's one router."""
        return self.clusters or (ClusterRoute("", self.router_url, self.ready_replicas),)

    # In-flight requests one replica is sized for (``gateway.admission``); 0: no bound.
    per_replica: int = 0
    # Requests one replica's engine runs at once (``batching.max_running_requests``); 0: unknown.
    # Bounds what keys under their fair share may take beyond the limit (``gateway.admission``).
    engine_slots: int = 0
    # The base model's name as its engines serve it, and the LoRA adapters its serving revision
    # serves (``gateway.adapters`` routes requests by them).
    served_name: str = ""
    adapters: frozenset[str] = frozenset()

    def adapter_model(self, adapter: str) -> str:
        """What SGLang's OpenAI routes call ``adapter`` in ``model``."""
        return f"{self.served_name}:{adapter}"

    @property
    def serving(self) -> bool:
        """A request can be forwarded now. ``ready_replicas`` is the endpoint's own count, every
        cluster's together: zero there means nothing serves, whatever a cluster's placement last
        recorded (a placement may keep stale figures a moment longer)."""
        return (
            self.desired_state == "running"
            and self.ready_replicas > 0
            and any(r.serving for r in self.routes)
        )

    @property
    def wakeable(self) -> bool:
        """Idle at zero replicas: a request should wake it and wait."""
        return self.status == statuses.SCALED_TO_ZERO


@dataclass(frozen=True, slots=True)
class InferenceKey:
    id: str
    prefix: str
    key_hash: str
    organization_id: str
    # Empty: every endpoint of the organization.
    allowed_endpoint_ids: frozenset[str]
    requests_per_minute: int | None
    tokens_per_minute: int | None
    expires_at: float | None  # epoch seconds
    # Under overload (``gateway.admission``): its class, and its share within the class.
    priority: str = "standard"
    weight: int = 1
    # Empty: the base model and every adapter; else only these adapters (not the base model).
    allowed_adapters: frozenset[str] = frozenset()

    def allows(self, endpoint: Endpoint) -> bool:
        return not self.allowed_endpoint_ids or endpoint.id in self.allowed_endpoint_ids

    def allows_adapter(self, adapter: str) -> bool:
        """Whether it may call ``adapter`` ("" the base model)."""
        return not self.allowed_adapters or adapter in self.allowed_adapters

    @property
    def limited(self) -> bool:
        return bool(self.requests_per_minute or self.tokens_per_minute)


@dataclass(frozen=True)
class RouteChanges:
    """Fresh routes of the endpoints and keys a change notification named, by id; None for one
    that is gone (deleted, revoked, expired)."""

    endpoints: Mapping[str, Endpoint | None] = field(default_factory=dict)
    keys: Mapping[str, InferenceKey | None] = field(default_factory=dict)


@dataclass(frozen=True)
class RouteTable:
    endpoints: dict[str, Endpoint] = field(default_factory=dict)  # by slug
    keys: dict[str, InferenceKey] = field(default_factory=dict)  # by public prefix
    loaded_at: float = 0.0  # when it was last loaded whole

    def with_changes(self, changes: RouteChanges) -> RouteTable:
        """A new table with ``changes`` applied; this one is left as it is, so a request that
        already holds it reads one consistent table."""
        return RouteTable(
            endpoints=_replaced(self.endpoints, changes.endpoints, lambda e: e.slug),
            keys=_replaced(self.keys, changes.keys, lambda k: k.prefix),
            loaded_at=self.loaded_at,
        )

    def authenticate(self, presented: str, now: float | None = None) -> InferenceKey | None:
        """The active inference key matching ``presented``, compared in constant time."""
        prefix = split_prefix(presented)
        key = self.keys.get(prefix) if prefix is not None else None
        digest = hash_key(presented)
        matched = hmac.compare_digest(digest, key.key_hash if key is not None else _DUMMY_HASH)
        if key is None or not matched:
            return None
        if key.expires_at is not None and key.expires_at <= (now or time.time()):
            return None
        return key


def _replaced(
    entries: dict[str, _Route], changed: Mapping[str, _Route | None], name: Callable[[_Route], str]
) -> dict[str, _Route]:
    """``entries`` (by name) without the changed ids' old entries, plus their new ones."""
    if not changed:
        return entries
    out = {n: entry for n, entry in entries.items() if entry.id not in changed}
    for entry in changed.values():
        if entry is not None:
            out[name(entry)] = entry
    return out
