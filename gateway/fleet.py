"""Which cluster a request goes to, for an endpoint whose replicas run on several clusters.

Each cluster runs its own router in front of its own replicas (``gateway.routes.ClusterRoute``:
the router's address as the gateway reaches it, an ingress or load balancer the operator
names per cluster). A request goes to one cluster's router, which picks the replica; the
gateway's placement of routing keys on replicas (``gateway.placement``) then works within that
cluster, as it does for an endpoint on one cluster (its table is per router).

The order of clusters a request tries, first to last:

1. The *active* clusters with ready replicas whose router is up (``gateway.health``). Requests
   are split among them by their ready replicas: a cluster with three of four replicas gets
   three requests in four.
2. The *draining* ones, likewise: a cluster being drained takes new requests only while no
   active cluster can (its replicas stop once the others are ready).
3. Clusters whose router is down, as a last resort: the probe may be wrong, and trying costs a
   refused connection when it is not.

A *lost* cluster (the control plane cannot see it) gets nothing; neither does one with no ready
replica. The first in the order takes the request; the others are where it goes next if it
reaches no engine there (``gateway.app``).

**Affinity.** A request with a routing key (``runtime.routing_key``: a tenant's system prompt,
a conversation's first turn) goes to the cluster of highest weighted rendezvous score (score
``replicas / -ln(hash(key, cluster))``, the hash in (0, 1)), so every gateway process sends a
key to the same cluster with no shared state, the cluster's prefix caches keep their tenants,
and the share of keys each cluster gets follows its ready replicas. A key keeps its cluster
while that cluster stays up and the replica counts stay; when a cluster goes down only its keys
move (each to its own second choice, the same in every process), and they come back with it;
when a cluster gains replicas, only the keys it now outscores for move to it. A request without
a key (``GET /v1/models``) is spread by a per-endpoint counter over the replicas, evenly.
"""

from __future__ import annotations

import hashlib
import math

from gateway.health import RouterHealth
from gateway.routes import ACTIVE, DRAINING, ClusterRoute, Endpoint, RouteTable

# The golden ratio's fraction: request n of a keyless spread goes to the point n·φ mod 1, a
# sequence that covers [0, 1) evenly at every length, so each cluster gets its share at once.
_PHI = (math.sqrt(5) - 1) / 2
_HASH_SPAN = float(2**64)


def affinity_score(key: str, route: ClusterRoute) -> float:
    """The weighted rendezvous score of ``route`` for ``key`` (higher wins)."""
    name = route.cluster or route.router_url
    digest = hashlib.blake2b(f"{key}\x00{name}".encode(), digest_size=8).digest()
    point = (int.from_bytes(digest, "big") + 0.5) / _HASH_SPAN  # in (0, 1), never 0 or 1
    return route.ready_replicas / -math.log(point)


class ClusterSplit:
    """Orders an endpoint's clusters for one request (per gateway process: counters only)."""

    def __init__(self, health: RouterHealth) -> None:
        self._health = health
        self._counts: dict[str, int] = {}

    def order(self, endpoint: Endpoint, key: str | None) -> list[ClusterRoute]:
        """The clusters ``key``'s request tries, first to last (described above)."""
        routes = endpoint.routes
        if len(routes) == 1:
            return [routes[0]] if routes[0].serving else []
        up = self._health.up
        serving = [r for r in routes if r.serving]
        ordered: list[ClusterRoute] = []
        for state in (ACTIVE, DRAINING):
            tier = [r for r in serving if r.state == state and up(r.router_url)]
            ordered += self._spread(endpoint, tier, key) if tier else []
        return ordered + [r for r in serving if not up(r.router_url)]

    def _spread(
        self, endpoint: Endpoint, tier: list[ClusterRoute], key: str | None
    ) -> list[ClusterRoute]:
        if key is not None:
            return sorted(tier, key=lambda r: affinity_score(key, r), reverse=True)
        n = self._counts.get(endpoint.id, 0)
        self._counts[endpoint.id] = n + 1
        point = (n * _PHI) % 1.0 * sum(r.ready_replicas for r in tier)
        by_weight = sorted(tier, key=lambda r: r.ready_replicas, reverse=True)
        for route in tier:
            point -= route.ready_replicas
            if point < 0:
                return [route, *(r for r in by_weight if r is not route)]
        return by_weight


def probe_targets(table: RouteTable) -> dict[str, str]:
    """Router URL -> cluster name, for the routers of endpoints on two clusters or more (the
    routers ``gateway.health`` probes)."""
    return {
        route.router_url: route.cluster
        for endpoint in table.endpoints.values()
        if len(endpoint.clusters) > 1
        for route in endpoint.clusters
        if route.router_url
    }
