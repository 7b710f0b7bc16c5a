"""The order in which a request tries an endpoint's clusters (``gateway.fleet``), and the
routers' health behind it (``gateway.health``) against a small real HTTP server standing in for
a router's ``/readiness`` (it answers what the test sets, which a real smg does only when its
workers come and go)."""

from __future__ import annotations

import asyncio
from collections import Counter

from deployments.fleet.models import PlacementState
from gateway.fleet import ClusterSplit, probe_targets
from gateway.health import FAILED_ANSWERS, RouterHealth
from gateway.routes import ACTIVE, DRAINING, LOST, ClusterRoute, Endpoint, RouteTable
from tests.gateway.conftest import run_async

EAST = ClusterRoute("east", "http://east.example", 3)
WEST = ClusterRoute("west", "http://west.example", 1)
NORTH = ClusterRoute("north", "http://north.example", 2, DRAINING)


def endpoint(*routes: ClusterRoute) -> Endpoint:
    total = sum(r.ready_replicas for r in routes)
    return Endpoint("e1", "chat", "org", "active", "running", total, "", clusters=routes)


def no_probes() -> RouterHealth:
    return RouterHealth(dict)


def test_keyless_requests_split_by_ready_replicas_and_keys_keep_their_cluster() -> None:
    split = ClusterSplit(no_probes())
    spread = endpoint(EAST, WEST)
    firsts = Counter(split.order(spread, None)[0].cluster for _ in range(100))
    assert abs(firsts["east"] - 75) <= 2, firsts
    for key in ("tenant-a", "tenant-b", "tenant-c"):
        orders = {tuple(r.cluster for r in split.order(spread, key)) for _ in range(5)}
        assert len(orders) == 1  # the same key, the same order, every time


def test_a_draining_cluster_comes_after_the_active_ones_and_a_lost_one_never() -> None:
    split = ClusterSplit(no_probes())
    lost = ClusterRoute("south", "http://south.example", 4, LOST)
    for key in (None, "tenant-a", "tenant-b"):
        order = [r.cluster for r in split.order(endpoint(NORTH, EAST, lost, WEST), key)]
        assert order[-1] == "north" and set(order) == {"east", "west", "north"}, order
    assert [r.cluster for r in split.order(endpoint(NORTH, lost), "k")] == ["north"]


def test_a_router_found_unreachable_goes_last_until_its_probes_are_good_again() -> None:
    """East's router refused a request: east is tried last; two good probes of its readiness
    bring it back to its place. Three 5xx answers in a row put a router down too; an answer
    below 500 in between starts the count again."""

    async def scenario() -> None:
        ready = {"status": b"200 OK"}

        async def readiness(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 " + ready["status"] + b"\r\ncontent-length: 0\r\n\r\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(readiness, "127.0.0.1", 0)
        east = ClusterRoute("east", f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", 3)
        spread = endpoint(east, WEST)
        table = RouteTable(endpoints={"chat": spread})
        health = RouterHealth(lambda: probe_targets(table), probe_timeout=2)
        split = ClusterSplit(health)
        key = next(k for k in map(str, range(100)) if split.order(spread, k)[0] is east)

        health.unreachable(east.router_url, "east")
        assert split.order(spread, key) == [WEST, east]
        ready["status"] = b"503 Service Unavailable"
        await health.probe_all()
        await health.probe_all()
        assert not health.up(east.router_url)
        ready["status"] = b"200 OK"
        await health.probe_all()
        assert not health.up(east.router_url)  # one good probe is not enough
        await health.probe_all()
        assert split.order(spread, key) == [east, WEST]

        for _ in range(FAILED_ANSWERS - 1):
            health.answered(east.router_url, "east", 503)
        health.answered(east.router_url, "east", 200)
        health.answered(east.router_url, "east", 503)
        assert health.up(east.router_url)
        for _ in range(FAILED_ANSWERS - 1):
            health.answered(east.router_url, "east", 503)
        assert not health.up(east.router_url)
        await health.stop()
        server.close()

    run_async(scenario())


def test_only_routers_of_endpoints_on_several_clusters_are_probed() -> None:
    single = Endpoint("e2", "solo", "org", "active", "running", 1, "http://solo.example")
    table = RouteTable(endpoints={"chat": endpoint(EAST, WEST), "solo": single})
    assert probe_targets(table) == {EAST.router_url: "east", WEST.router_url: "west"}


def test_the_gateways_states_are_the_placements() -> None:
    """``gateway.routes`` names a placement's states without importing the records."""
    assert {ACTIVE, DRAINING, LOST} == set(PlacementState.values)
