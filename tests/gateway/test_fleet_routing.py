"""An endpoint on several clusters, through the real gateway process (``gateway.fleet``,
``gateway.health``): requests split by each cluster's ready replicas, a routing key kept in one
cluster, draining and lost clusters passed over, and a cluster whose router dies losing no
request once it has exited, then taking its keys back when its router returns.

Each "cluster" is a real smg router with simulated engines (``runtime.sim``, real processes)
standing in for what runs inside a Kubernetes cluster: the clusters of ``tests/kube_real`` run
kwok pods, which cannot serve a request. The placements (which cluster's router, how many ready
replicas, active / draining / lost) are written by ``mark_placed``, the stand-in for what the
fleet's reconcile records, as ``mark_serving`` is for an endpoint on one cluster.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from controlplane import notify
from deployments.clusters.models import Cluster
from deployments.endpoints import services as deployment_services
from deployments.endpoints.models import Deployment
from deployments.fleet.models import Placement
from gateway.loader import load_endpoints
from gateway.routes import ClusterRoute
from runtime.sim.launcher import SimCluster
from tests.conftest import Cast
from tests.gateway.conftest import (
    SPEC,
    TIME_SCALE,
    GatewayProcess,
    create_endpoint,
    inference_key,
    mark_serving,
    wait_routable,
)
from tests.gateway.test_placement_end_to_end import placed_cluster, system_prompt
from tests.runtime.sim.scrape import metric_sum
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
TENANTS = tuple(f"tenant-{n}" for n in range(12))
ROUND_ROBIN = {"routing": {"policy": "round_robin"}}
REQUESTS = "sglang:num_requests_total"


def cluster_record(cast: Cast, name: str) -> Cluster:
    """A cluster of the organization (a record only: the gateway reads its name)."""
    return Cluster.objects.create(organization=cast.acme, name=name, kind="kubernetes")


def mark_placed(
    deployment: Deployment, cluster: Cluster, router_url: str, ready: int, state: str = "active"
) -> None:
    """What the fleet's reconcile records of the endpoint's part on ``cluster`` (see above)."""
    Placement.objects.update_or_create(
        deployment=deployment,
        cluster=cluster,
        defaults={
            "router_url": router_url,
            "desired_replicas": ready,
            "ready_replicas": ready,
            "total_replicas": ready,
            "state": state,
        },
    )
    notify.publish_on_commit("deployment", str(deployment.pk))


def chat(gateway: GatewayProcess, slug: str, key: str, tenant: str) -> httpx.Response:
    messages = [
        {"role": "system", "content": system_prompt(tenant)},
        {"role": "user", "content": "Hello?"},
    ]
    return httpx.post(
        f"{gateway.base_url(slug)}/chat/completions",
        json={"model": "sim/llama-test", "messages": messages, "max_tokens": 2},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def served_by(gateway: GatewayProcess, slug: str, key: str, tenant: str) -> str:
    """The cluster that answered one chat of ``tenant`` (the gateway names it)."""
    answer = chat(gateway, slug, key, tenant)
    assert answer.status_code == 200, answer.text
    return answer.headers["x-plinth-cluster"]


def spread_endpoint(
    cast: Cast,
    gateway: GatewayProcess,
    slug: str,
    placements: dict[str, tuple[str, int, str]],
    **spec: Any,
) -> str:
    """``slug`` (``SPEC`` plus ``spec``) placed on the clusters named in ``placements`` (name ->
    router URL, ready replicas, state), its key routable; returns the key."""
    actor = cast.actor(cast.alice, cast.acme)
    endpoint = deployment_services.create_deployment(
        actor, slug=slug, name=slug, spec={**SPEC, **spec}
    )
    mark_serving(endpoint, next(iter(placements.values()))[0], replicas=1)
    for name, (url, ready, state) in placements.items():
        mark_placed(endpoint, cluster_record(cast, name), url, ready, state)
    key = inference_key(cast)
    wait_routable(gateway, slug, key)
    return key


def sims(tmp_path: Any, name: str) -> SimCluster:
    """One "cluster": a round-robin smg router in front of one simulated engine."""
    return SimCluster(1, policy="round_robin", time_scale=TIME_SCALE, log_dir=tmp_path / name)


def test_the_loader_reads_every_cluster_of_an_endpoint_in_one_query(
    cast: Cast, django_assert_num_queries: Any
) -> None:
    """Two endpoints spread over two clusters each and one on its home cluster alone: the
    table's load reads their placements in one query whatever their number; the endpoint on
    one cluster keeps its own router as its one route."""
    east, west = cluster_record(cast, "east"), cluster_record(cast, "west")
    for slug in ("spread-a", "spread-b"):
        endpoint = create_endpoint(cast, slug)
        mark_serving(endpoint, "http://127.0.0.1:9", replicas=3)
        mark_placed(endpoint, east, "http://east.example/", 2)
        mark_placed(endpoint, west, "http://west.example", 1, "draining")
    mark_serving(create_endpoint(cast, "single"), "http://127.0.0.1:8", replicas=1)
    with django_assert_num_queries(3):  # endpoints, their clusters, running canaries
        endpoints = load_endpoints()
    assert endpoints["spread-a"].routes == (
        ClusterRoute("east", "http://east.example", 2, "active"),
        ClusterRoute("west", "http://west.example", 1, "draining"),
    )
    assert endpoints["single"].routes == (ClusterRoute("", "http://127.0.0.1:8", 1),)


def test_requests_are_split_by_each_clusters_ready_replicas(
    cast: Cast, gateway: GatewayProcess, tmp_path: Any
) -> None:
    """Two clusters with 3 and 1 ready replicas (the control plane's count, which the split
    follows; one engine behind each router serves them here, and the endpoint is routed round
    robin, so the gateway names no replica): chats of 120 distinct conversations go three to
    one within a wide margin (a conversation's cluster comes from its key's hash), keyless
    requests (``GET /v1/models``) three to one within two requests (a counter spreads them)."""
    with sims(tmp_path, "east") as east, sims(tmp_path, "west") as west:
        placements = {"east": (east.url, 3, "active"), "west": (west.url, 1, "active")}
        key = spread_endpoint(cast, gateway, "split", placements, **ROUND_ROBIN)
        chats = Counter(served_by(gateway, "split", key, f"talk {n}") for n in range(120))
        assert 0.6 <= chats["east"] / 120 <= 0.9, chats
        listed = Counter(models_served_by(gateway, "split", key) for _ in range(40))
        assert 28 <= listed["east"] <= 32, listed
        # The header is the gateway's word; the engines' own counts agree.
        assert metric_sum(west.engine_urls[0], REQUESTS) == chats["west"]


def test_a_conversation_stays_on_one_cluster_and_conversations_spread(
    cast: Cast, gateway: GatewayProcess, tmp_path: Any
) -> None:
    """Two clusters of equal replicas: each of 12 tenants' three rounds of chats reach one
    cluster, the same every round, and both clusters get tenants."""
    with sims(tmp_path, "east") as east, sims(tmp_path, "west") as west:
        placements = {"east": (east.url, 2, "active"), "west": (west.url, 2, "active")}
        key = spread_endpoint(cast, gateway, "sticky", placements, **ROUND_ROBIN)
        first = {t: served_by(gateway, "sticky", key, t) for t in TENANTS}
        for _ in range(2):
            assert {t: served_by(gateway, "sticky", key, t) for t in TENANTS} == first
    assert set(first.values()) == {"east", "west"}, first


def test_a_draining_cluster_takes_requests_only_when_no_active_one_can_and_a_lost_one_none(
    cast: Cast, gateway: GatewayProcess, tmp_path: Any
) -> None:
    """East active, west draining: every tenant goes to east. East lost (the control plane
    cannot see it), west still draining: every tenant goes to west, as nothing else serves."""
    with sims(tmp_path, "east") as east, sims(tmp_path, "west") as west:
        placements = {"east": (east.url, 2, "active"), "west": (west.url, 2, "draining")}
        key = spread_endpoint(cast, gateway, "moving", placements, **ROUND_ROBIN)
        assert {served_by(gateway, "moving", key, t) for t in TENANTS} == {"east"}
        endpoint = Deployment.objects.get(slug="moving")
        mark_placed(endpoint, Cluster.objects.get(name="east"), east.url, 2, "lost")

        def all_west() -> bool:
            return {served_by(gateway, "moving", key, t) for t in TENANTS} == {"west"}

        wait_until(all_west, "every tenant on the draining cluster", 10)
        assert metric_sum(west.engine_urls[0], REQUESTS) >= len(TENANTS)


def models_served_by(gateway: GatewayProcess, slug: str, key: str) -> str:
    answer = httpx.get(
        f"{gateway.base_url(slug)}/models", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    return answer.headers["x-plinth-cluster"]


# A logical clock: the order of sends, answers and the kill is all the test needs, so it counts
# events rather than reading a wall clock (next() on a count is atomic).
TICKS = itertools.count()


@dataclass
class Sent:
    started: int
    ended: int
    ok: bool
    cluster: str
    detail: str


class SteadyTraffic:
    """Clients sending every tenant's chats in turn, back to back, streamed and not."""

    def __init__(self, gateway: GatewayProcess, slug: str, key: str, tenants: list[str]) -> None:
        self.url = f"{gateway.base_url(slug)}/chat/completions"
        self.key, self.tenants = key, tenants
        self.sent: list[Sent] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(i,)) for i in range(4)]

    def _client(self, index: int) -> None:
        turn = itertools.count(index)
        with httpx.Client() as client:
            while not self._stop.is_set():
                n = next(turn)
                self.sent.append(self._send(client, self.tenants[n % len(self.tenants)], n % 2))

    def _send(self, client: httpx.Client, tenant: str, stream: int) -> Sent:
        messages = [
            {"role": "system", "content": system_prompt(tenant)},
            {"role": "user", "content": "How are you?"},
        ]
        body = {"model": "sim/llama-test", "messages": messages, "max_tokens": 16}
        body["stream"] = bool(stream)
        started = next(TICKS)
        headers = {"Authorization": f"Bearer {self.key}"}
        try:
            with client.stream("POST", self.url, json=body, headers=headers, timeout=30) as got:
                text = got.read().decode(errors="replace")
        except httpx.HTTPError as exc:
            return Sent(started, next(TICKS), False, "", repr(exc))
        whole = text.rstrip().endswith("data: [DONE]") if stream else '"choices"' in text
        ok = got.status_code == 200 and whole and '"error"' not in text
        cluster = got.headers.get("x-plinth-cluster", "")
        return Sent(started, next(TICKS), ok, cluster, f"{got.status_code} {text[-300:]}")

    def __enter__(self) -> SteadyTraffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def since(self, moment: int) -> list[Sent]:
        return [sent for sent in list(self.sent) if sent.started > moment]


def test_a_cluster_whose_router_dies_loses_no_request_and_takes_its_keys_back_when_it_returns(
    cast: Cast, gateway: GatewayProcess, tmp_path: Any
) -> None:
    """Two clusters, each one engine behind the router a deployed endpoint gets (the gateway
    places keys on replicas), and six tenants spread over both under steady traffic. East's
    router is killed (SIGKILL): every request sent once it has exited is answered whole, by
    west (the first to find east's router gone sends its request on to west, and the gateway
    stops sending there); only requests in flight at the kill may fail. East's router comes
    back on its address: its tenants return to it once the gateway's probes see it ready."""
    endpoint = create_endpoint(cast, "fleet-kill")
    with (
        placed_cluster(1, endpoint, tmp_path / "east") as east,
        placed_cluster(1, endpoint, tmp_path / "west") as west,
    ):
        mark_serving(endpoint, east.url, replicas=2)
        mark_placed(endpoint, cluster_record(cast, "east"), east.url, 1)
        mark_placed(endpoint, cluster_record(cast, "west"), west.url, 1)
        key = inference_key(cast)
        wait_routable(gateway, "fleet-kill", key)
        tenants = list(TENANTS[:6])
        home = {t: served_by(gateway, "fleet-kill", key, t) for t in tenants}
        assert set(home.values()) == {"east", "west"}, home
        with SteadyTraffic(gateway, "fleet-kill", key, tenants) as traffic:
            wait_until(lambda: len(traffic.sent) >= 12, "traffic under way", 30)
            assert east.router is not None
            killed = next(TICKS)
            east.router.popen.kill()
            east.router.popen.wait(10)
            exited = next(TICKS)
            wait_until(lambda: len(traffic.since(exited)) >= 30, "traffic after the kill", 60)
        failed = [s for s in traffic.sent if not s.ok]
        in_flight = [s for s in failed if s.started < exited and s.ended > killed]
        assert failed == in_flight, [s.detail for s in failed if s not in in_flight]
        assert {s.cluster for s in traffic.since(exited)} == {"west"}
        ejected = metric_sum(
            gateway.metrics_url, "plinth_gateway_router_ejections_total", cluster="east"
        )
        assert ejected >= 1

        east.restart_router()
        back = [t for t, cluster in home.items() if cluster == "east"]
        wait_until(
            lambda: {served_by(gateway, "fleet-kill", key, t) for t in back} == {"east"},
            "east's tenants back on east",
            30,
        )
        assert {t: served_by(gateway, "fleet-kill", key, t) for t in tenants} == home
