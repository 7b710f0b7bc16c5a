"""The one place Plinth builds Redis clients, so every process talks to Redis the same way.

Framework-free on purpose (no Django): the control plane and its workers pass
``settings.REDIS_URL``, the gateway its own ``GatewayConfig.redis_url``, and settings.py gives
Django's cache the same connection options. Commands time out, connecting included: a Redis
that stops answering must fail a call (each caller knows how to degrade) rather than hang a
request or a worker. A subscriber waits for as long as nothing is published, so it has no read
timeout and checks its connection's health instead.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import redis
import redis.asyncio as aioredis

__all__ = [
    "COMMAND_TIMEOUT_S",
    "as_text",
    "async_client",
    "async_subscriber",
    "changes_channel",
    "client",
    "command_options",
]

COMMAND_TIMEOUT_S = 5.0
HEALTH_CHECK_INTERVAL_S = 30


def command_options() -> dict[str, Any]:
    """Connection options of a client that sends commands (also Django cache's ``OPTIONS``)."""
    return {
        "socket_timeout": COMMAND_TIMEOUT_S,
        "socket_connect_timeout": COMMAND_TIMEOUT_S,
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
    }


def _subscriber_options() -> dict[str, Any]:
    return {
        "socket_connect_timeout": COMMAND_TIMEOUT_S,
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
    }


@cache
def client(url: str) -> redis.Redis:
    """The process's client for ``url``: one connection pool, shared by every caller.

    redis-py's pool is thread-safe and starts afresh in a forked child (Celery's prefork
    workers), so sharing it is safe where each call building its own would leak pools.
    """
    return redis.Redis.from_url(url, **command_options())


def async_client(url: str) -> aioredis.Redis:
    """A command client for asyncio code; its owner closes it (``aclose``) with its loop."""
    return aioredis.Redis.from_url(url, **command_options())


def as_text(value: bytes | str) -> str:
    """A key or field read back from Redis, as text. These clients answer bytes (no
    ``decode_responses``); redis-py's types allow either."""
    return value.decode() if isinstance(value, bytes) else value


def async_subscriber(url: str) -> aioredis.Redis:
    """A client for pub/sub subscriptions, which block until something is published."""
    return aioredis.Redis.from_url(url, **_subscriber_options())


def changes_channel(client: redis.Redis | aioredis.Redis) -> str:
    """The pub/sub channel of change notifications (``controlplane.notify``) for the database
    that ``client`` talks to.

    Redis pub/sub ignores database numbers: a subscriber hears every publisher on the server.
    The number in the name keeps two installs (or two test runs) that share a server on
    different databases from reloading on each other's changes.
    """
    db = client.connection_pool.connection_kwargs.get("db", 0)
    return f"plinth:changes:{int(db)}"
