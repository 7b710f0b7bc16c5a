"""Every Redis client is built by ``controlplane.redis_clients``, with the same timeouts.

Clients built where they were needed came out four ways (a 2 s timeout, 5 s, none at all, a
new pool per call); one factory makes a client without a timeout, which hangs a worker when
Redis stops answering, impossible to write by accident.
"""

from __future__ import annotations

import ast
import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.cache import cache

from controlplane import notify, redis_clients
from tests.controlplane.source_tree import call_name, sources
from tests.waiting import wait_until

FACTORY = "controlplane/redis_clients.py"
BUILDERS = {"Redis", "StrictRedis", "from_url", "ConnectionPool", "BlockingConnectionPool"}


def test_no_module_builds_a_redis_client_of_its_own() -> None:
    found = []
    for source in sources("controlplane", "deployments", "gateway"):
        if source.name == FACTORY:
            continue
        for node in ast.walk(source.tree):
            if not isinstance(node, ast.Call):
                continue
            name = call_name(node)
            if "redis" in name.lower() and name.rsplit(".", 1)[-1] in BUILDERS:
                found.append(f"{source.name}:{node.lineno} {name}")
    assert found == [], "use controlplane.redis_clients: " + str(found)


def _connection_kwargs(client: redis.Redis) -> dict[str, object]:
    return dict(client.connection_pool.connection_kwargs)


def test_the_shared_client_times_out_and_is_one_per_url() -> None:
    client = redis_clients.client(settings.REDIS_URL)
    assert client is redis_clients.client(settings.REDIS_URL)
    assert client.ping()
    kwargs = _connection_kwargs(client)
    assert kwargs["socket_timeout"] == redis_clients.COMMAND_TIMEOUT_S
    assert kwargs["socket_connect_timeout"] == redis_clients.COMMAND_TIMEOUT_S


def test_a_redis_that_does_not_answer_is_an_error_not_a_hang() -> None:
    with pytest.raises(redis.RedisError):
        redis_clients.client("redis://127.0.0.1:1/0").ping()  # nothing listens on port 1


def test_the_gateways_clients_time_out_except_a_subscriptions_reads() -> None:
    # A thread of its own: a browser test may leave an event loop running in this one.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, _check_the_gateways_clients()).result()


async def _check_the_gateways_clients() -> None:
    commands = redis_clients.async_client(settings.REDIS_URL)
    subscriber = redis_clients.async_subscriber(settings.REDIS_URL)
    try:
        assert await commands.ping()
        assert await subscriber.ping()
        kwargs = commands.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == redis_clients.COMMAND_TIMEOUT_S
        listening = subscriber.connection_pool.connection_kwargs
        assert listening.get("socket_timeout") is None  # waits for as long as nothing changes
        assert listening["socket_connect_timeout"] == redis_clients.COMMAND_TIMEOUT_S
    finally:
        await commands.aclose()
        await subscriber.aclose()


def test_djangos_cache_uses_the_same_options() -> None:
    assert settings.CACHES["default"]["OPTIONS"] == redis_clients.command_options()
    cache.set("redis-clients-check", 1, timeout=5)
    assert cache.get("redis-clients-check") == 1


@pytest.mark.django_db
def test_change_notifications_stay_on_their_database(
    django_capture_on_commit_callbacks: Any,
) -> None:
    """Pub/sub ignores database numbers; the channel's name carries it, so a subscriber on
    another database of the same server hears nothing of this one's changes."""
    here = redis_clients.client(settings.REDIS_URL)
    kwargs = here.connection_pool.connection_kwargs
    server = {name: kwargs[name] for name in ("host", "port", "password") if name in kwargs}
    other = redis.Redis(**server, db=(int(kwargs.get("db", 0)) + 1) % 16)
    assert redis_clients.changes_channel(here) != redis_clients.changes_channel(other)
    listeners = [client.pubsub(ignore_subscribe_messages=True) for client in (here, other)]
    marker = f"d-{uuid.uuid4()}"
    try:
        for client, pubsub in zip((here, other), listeners, strict=True):
            pubsub.subscribe(redis_clients.changes_channel(client))
            pubsub.get_message(timeout=1)  # the subscription's confirmation
        with django_capture_on_commit_callbacks(execute=True):
            notify.publish_on_commit("deployment", marker)
        # Then a fence on each channel: pub/sub delivers in the order of publishing, so whatever
        # a listener was sent of this change came before its fence.
        fence = f"fence-{uuid.uuid4()}"
        for client in (here, other):
            client.publish(redis_clients.changes_channel(client), fence)
        assert any(marker in sent for sent in _sent_before(listeners[0], fence))
        # Another run may be using that database: only this change's absence counts.
        assert not any(marker in sent for sent in _sent_before(listeners[1], fence))
    finally:
        for pubsub in listeners:
            pubsub.close()
        other.close()


def _sent_before(pubsub: redis.client.PubSub, fence: str) -> list[str]:
    """The messages ``pubsub`` was sent before ``fence``."""
    sent: list[str] = []

    def fenced() -> bool:
        message = pubsub.get_message(timeout=1)
        if message is None:
            return False
        text = redis_clients.as_text(message["data"])
        if text != fence:
            sent.append(text)
        return text == fence

    wait_until(fenced, f"the fence on {pubsub.channels}", interval=0)
    return sent
