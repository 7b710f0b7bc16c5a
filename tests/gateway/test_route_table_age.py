"""plinth_gateway_route_table_age_seconds: how long ago this gateway last loaded its route
table. A load resets it; a failed load does not, so a gateway serving a stale table shows it."""

from __future__ import annotations

import time

from prometheus_client import REGISTRY

from gateway.observability import ROUTE_TABLE_CLOCK
from gateway.refresher import RouteRefresher
from gateway.routes import RouteTable
from tests.gateway.conftest import run_async

AGE = "plinth_gateway_route_table_age_seconds"
AN_HOUR = 3600.0


def age() -> float:
    value = REGISTRY.get_sample_value(AGE)
    assert value is not None, "the gateway's registry has no route-table age"
    return value


def reload_with(load: object) -> bool:
    async def scenario() -> bool:
        refresher = RouteRefresher(load, client=None, refresh_seconds=30, hold_refresh_seconds=1)
        try:
            return await refresher.reload()
        finally:
            await refresher.stop()

    result: bool = run_async(scenario())
    return result


def failing_load() -> RouteTable:
    raise ConnectionError("database unreachable")


def test_a_load_resets_the_age_and_a_failed_one_does_not() -> None:
    ROUTE_TABLE_CLOCK.loaded_at = time.monotonic() - AN_HOUR  # last loaded an hour ago
    assert age() >= AN_HOUR

    assert reload_with(failing_load) is False
    assert age() >= AN_HOUR  # still the hour-old table

    assert reload_with(RouteTable) is True
    assert age() < AN_HOUR
