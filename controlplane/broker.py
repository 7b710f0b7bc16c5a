"""The Celery broker transport: kombu's Redis transport, made to survive a Redis restart.

With ``acks_late`` (settings), a worker that loses Redis under a task (Redis restarted, failed
over, killed) tears its connection down: kombu's ``Connection.collect`` drops the transport's
link to its ``Connection`` (``transport.client = None``) while the channel still holds the
task's unacknowledged message. Closing that channel then restores the message, which needs a
Redis client, whose parameters kombu reads from ``transport.client``: ``AttributeError:
'NoneType' object has no attribute 'hostname'``, and the worker stops with "Unrecoverable
error" (kombu 5.7.0, Celery 5.7.0; upstream has no fix yet). The task's late ack after the
reconnect takes the same path and fails too, so its message would run again an hour later
(the visibility timeout).

``Channel`` here remembers the connection it was opened on and builds its clients from that
one when kombu has let go of it, so the restore and the late ack reach Redis (once it is back)
instead of crashing the worker. ``tests/controlplane/test_broker_restart.py`` restarts Redis
under a running and a queued task with a real worker.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis

__all__ = ["Channel", "Transport"]


class Channel(kombu_redis.Channel):
    """kombu's Redis channel that can still reach Redis after its connection was collected."""

    def __init__(self, connection: Any, *args: Any, **kwargs: Any) -> None:
        # The kombu Connection (URL, credentials, TLS) this channel was opened on.
        self._opened_on = connection.client
        super().__init__(connection, *args, **kwargs)

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        transport = self.connection
        if transport.client is not None:
            return self._kombu_connparams(asynchronous)
        # Collected: lend the transport its old connection just while kombu reads the
        # parameters. The worker's main process is single-threaded, so nothing sees it meanwhile.
        transport.client = self._opened_on
        try:
            return self._kombu_connparams(asynchronous)
        finally:
            transport.client = None

    def _kombu_connparams(self, asynchronous: bool) -> dict[str, Any]:
        # celery-types' kombu stubs leave out this private method, so it is typed here, once.
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]
        return params


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with the channel above."""

    Channel = Channel
