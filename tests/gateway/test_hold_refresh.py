"""While requests are held for an endpoint waking from zero, the gateway reads that endpoint
alone again, often, and never the whole table for it.

Real PostgreSQL (committed rows read by the refresher's own thread, as in the gateway), the real
Redis channel and the gateway's real loaders, counted by ``CountingLoads`` as they are called.
"""

from __future__ import annotations

import asyncio

import pytest
from django.conf import settings

from controlplane import redis_clients
from deployments.endpoints.models import Deployment
from gateway import loader
from gateway.holds import Holds
from gateway.refresher import RouteRefresher
from gateway.routes import RouteTable
from tests.aio import run_async
from tests.conftest import Cast
from tests.gateway.conftest import create_endpoint, mark_scaled_to_zero
from tests.gateway.test_route_updates import CountingLoads, in_thread, until


def holding_refresher(loads: CountingLoads) -> RouteRefresher:
    return RouteRefresher(
        loads.load,
        redis_clients.async_subscriber(settings.REDIS_URL),
        refresh_seconds=3600,  # no periodic whole reload within the test
        hold_refresh_seconds=0.05,
        close=loader.close_connections,
        load_changes=loads.load_changes,
    )


def wake_silently(deployment: Deployment) -> None:
    """A replica became ready, recorded without the change notification (as if it were lost):
    only the hold's own reads can see it."""
    deployment.refresh_from_db()
    revision = deployment.target_revision
    Deployment.objects.filter(pk=deployment.pk).update(
        desired_replicas=1,
        applied_revision=revision,
        current_revision=revision,
        ready_replicas=1,
        total_replicas=1,
        router_url="http://127.0.0.1:9",
        observed_generation=deployment.generation,
    )


@pytest.mark.django_db(transaction=True)
def test_a_held_request_reads_its_endpoint_alone_until_it_serves(cast: Cast) -> None:
    sleepy = create_endpoint(cast, "sleepy")
    create_endpoint(cast, "other")
    mark_scaled_to_zero(sleepy)
    loads = CountingLoads()
    woken: list[str] = []

    async def send_wake(endpoint_id: str) -> None:
        woken.append(endpoint_id)

    async def scenario() -> None:
        refresher = holding_refresher(loads)
        await refresher.start()
        try:
            await until(lambda: loads.full == 2, "subscribed")
            await until(lambda: refresher.table.endpoints["sleepy"].wakeable, "scaled to zero")
            before = len(loads.changed)
            holds = Holds(refresher, send_wake, hold_seconds=60, queue_size=4)
            held = asyncio.create_task(holds.hold(refresher.table.endpoints["sleepy"]))
            # Read again and again while the request waits: that endpoint only.
            await until(lambda: len(loads.changed) >= before + 3, "held endpoint read")
            assert refresher.holding == 1
            assert not held.done()
            await in_thread(wake_silently, sleepy)
            endpoint = await asyncio.wait_for(held, 10)
            assert endpoint.serving and endpoint.slug == "sleepy"
            assert woken == [str(sleepy.pk)]
            assert set(map(frozenset, (d for d, _ in loads.changed[before:]))) == {
                frozenset({str(sleepy.pk)})
            }
            assert all(not keys for _, keys in loads.changed[before:])
            assert loads.full == 2  # never the whole table for a hold
            assert refresher.holding == 0
        finally:
            await refresher.stop()

    run_async(scenario())


def test_held_requests_are_counted_per_endpoint_and_released() -> None:
    refresher = RouteRefresher(
        RouteTable,
        redis_clients.async_subscriber(settings.REDIS_URL),  # never started: never connects
        refresh_seconds=30,
        hold_refresh_seconds=1,
    )
    refresher.hold("a")
    refresher.hold("a")
    refresher.hold("b")
    assert refresher.holding == 3
    refresher.release("a")
    refresher.release("b")
    assert refresher.holding == 1
    refresher.release("a")
    refresher.release("a")  # one too many leaves nothing negative behind
    assert refresher.holding == 0
