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
instead of crashing the worker.

That restore puts back every message the channel had delivered, the running tasks' too. Celery
keeps a running task (``worker_cancel_long_running_tasks_on_connection_loss`` is off) and acks
it after the reconnect, so a restored copy of its message runs it a second time, beside or after
the first: whenever Redis answers the restore, which it does when only the connection was lost or
when Redis came back quickly. ``QoS`` here leaves the running tasks' messages unacknowledged in
Redis: their late ack removes them, and should the task's process die first, Celery rejects the
message back to the queue (``task_reject_on_worker_lost``) or the visibility timeout restores
it. The messages of tasks not yet started are restored as before.
``tests/controlplane/test_broker_restart.py`` restarts Redis, and drops the worker's
connections, under a running and a queued task with a real worker.
"""

from __future__ import annotations

from typing import Any

from celery.worker import state as worker_state
from kombu.transport import redis as kombu_redis

__all__ = ["Channel", "QoS", "Transport"]


class QoS(kombu_redis.QoS):
    """kombu's Redis ack emulation that never puts a running task's message back.

    kombu restores what a channel delivered when the channel closes: on a lost connection, and
    at a shutdown, by which time a warm shutdown has let every running task finish and ack.
    """

    def restore_unacked(self, client: Any = None) -> None:
        delivered = self._delivered
        if delivered is not None:
            for tag in _running_delivery_tags():
                delivered.pop(tag, None)  # acked when it ends, never run a second time
        super().restore_unacked(client)


def _running_delivery_tags() -> set[str]:
    """The delivery tags of the tasks this worker process is running (none outside a worker)."""
    return {
        request.message.delivery_tag
        for request in list(worker_state.active_requests)
        if request.message is not None
    }


class Channel(kombu_redis.Channel):
    """kombu's Redis channel that can still reach Redis after its connection was collected."""

    QoS = QoS

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
