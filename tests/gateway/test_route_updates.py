"""The gateway applies a change notification to the one endpoint or key it names.

A notification reads that endpoint's (or key's) route again and swaps it into a copy of the
table; the rest of the table is not read. A notification it cannot read alone reloads the
whole table, and so does the periodic refresh. Real PostgreSQL (committed rows, read by the
refresher's own thread as in the gateway) and the real Redis channel.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import connections

from controlplane import redis_clients
from controlplane import services as platform
from deployments.endpoints import services as deployment_services
from gateway import loader
from gateway.refresher import RouteRefresher
from gateway.routes import Endpoint, InferenceKey, RouteChanges, RouteTable
from tests.conftest import Cast
from tests.gateway.conftest import create_endpoint, mark_serving, run_async


class CountingLoads:
    """The gateway's loaders, counting what they are asked to read."""

    def __init__(self) -> None:
        self.full = 0
        self.changed: list[tuple[set[str], set[str]]] = []
        self.last: RouteTable | None = None  # the table the latest full load returned

    def load(self) -> RouteTable:
        self.last = loader.load_route_table()
        self.full += 1  # counted once read, so a test that waits for a load sees its table
        return self.last

    def load_changes(self, deployments: Collection[str], keys: Collection[str]) -> RouteChanges:
        self.changed.append((set(deployments), set(keys)))
        return loader.load_changes(deployments, keys)


def refresher_for(loads: CountingLoads) -> RouteRefresher:
    return RouteRefresher(
        loads.load,
        redis_clients.async_subscriber(settings.REDIS_URL),
        refresh_seconds=3600,  # no periodic reload within the test
        hold_refresh_seconds=3600,
        close=loader.close_connections,
        load_changes=loads.load_changes,
    )


async def in_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn`` in a worker thread (the ORM is blocking), closing the connection it opened."""

    def call() -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    return await asyncio.to_thread(call)


async def until(check: Any, what: str, timeout: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"{what}: not within {timeout} s"
        await asyncio.sleep(0.02)


@pytest.mark.django_db(transaction=True)
def test_a_notification_reloads_only_the_endpoint_and_key_it_names(cast: Cast) -> None:
    chat = create_endpoint(cast, "chat")
    other = create_endpoint(cast, "other")
    owner = cast.actor(cast.alice, cast.acme)
    key = platform.create_api_key(owner, name="k", kind="inference").api_key
    loads = CountingLoads()

    async def scenario() -> None:
        refresher = refresher_for(loads)
        await refresher.start()
        try:
            # The start's load, and the one after subscribing (anything may have changed).
            # (Counted once read: wait until its table is the one in use.)
            await until(lambda: loads.full == 2 and refresher.table is loads.last, "subscribed")
            before = refresher.table
            await in_thread(mark_serving, chat, "http://127.0.0.1:9")
            await until(lambda: refresher.table.endpoints["chat"].serving, "chat serving")
            after = refresher.table
            assert loads.full == 2  # not the whole table again
            assert loads.changed == [({str(chat.pk)}, set())]
            assert after.endpoints["other"] is before.endpoints["other"]  # not read again
            assert after.keys == before.keys
            assert before.endpoints["chat"].router_url == ""  # the old table is left as it was

            await in_thread(platform.revoke_api_key, owner, key_id=key.pk)
            await until(lambda: key.prefix not in refresher.table.keys, "key dropped")
            assert loads.changed[-1] == (set(), {str(key.pk)})
            assert loads.full == 2
        finally:
            await refresher.stop()

    run_async(scenario())
    assert other.slug == "other"


@pytest.mark.django_db(transaction=True)
def test_a_notification_it_cannot_read_alone_reloads_the_whole_table(cast: Cast) -> None:
    loads = CountingLoads()

    async def scenario() -> None:
        refresher = refresher_for(loads)
        await refresher.start()
        try:
            await until(lambda: loads.full == 2, "subscribed")
            client = redis.Redis.from_url(settings.REDIS_URL)
            channel = redis_clients.changes_channel(client)
            await asyncio.to_thread(client.publish, channel, json.dumps({"kind": "x"}))
            await until(lambda: loads.full == 3, "reloaded whole")
            client.close()
        finally:
            await refresher.stop()

    run_async(scenario())


@pytest.mark.django_db(transaction=True)
def test_the_loader_reads_named_routes_and_says_which_are_gone(cast: Cast) -> None:
    chat = create_endpoint(cast, "chat")
    create_endpoint(cast, "other")
    owner = cast.actor(cast.alice, cast.acme)
    deployment_services.delete_deployment(owner, chat.pk)  # deleting: no longer routed
    missing = "00000000-0000-0000-0000-000000000000"
    changes = loader.load_changes([str(chat.pk), missing], [missing])
    assert changes.endpoints == {str(chat.pk): None, missing: None}
    assert changes.keys == {missing: None}


def endpoint(slug: str, identity: str, ready: int = 0) -> Endpoint:
    return Endpoint(
        id=identity, slug=slug, organization_id="o", status="active", desired_state="running",
        ready_replicas=ready, router_url="http://r" if ready else "",
    )  # fmt: skip


def key(prefix: str, identity: str) -> InferenceKey:
    return InferenceKey(
        id=identity, prefix=prefix, key_hash="h", organization_id="o",
        allowed_endpoint_ids=frozenset(), requests_per_minute=None, tokens_per_minute=None,
        expires_at=None,
    )  # fmt: skip


def test_changes_replace_and_drop_routes_by_id_in_a_new_table() -> None:
    table = RouteTable(
        endpoints={"a": endpoint("a", "1"), "b": endpoint("b", "2")},
        keys={"pa": key("pa", "k1"), "pb": key("pb", "k2")},
        loaded_at=5.0,
    )
    changed = table.with_changes(
        RouteChanges(
            endpoints={"1": endpoint("a", "1", ready=1), "2": None, "3": endpoint("c", "3")},
            keys={"k2": None},
        )
    )
    assert set(changed.endpoints) == {"a", "c"} and changed.endpoints["a"].serving
    assert set(changed.keys) == {"pa"}
    assert changed.loaded_at == 5.0  # the last whole load, for the route table's age
    assert set(table.endpoints) == {"a", "b"} and not table.endpoints["a"].serving
