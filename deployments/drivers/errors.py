"""What can go wrong when a driver talks to a cluster, split by what reconcile should do about it.

``TemporaryDriverError``: try again later (rate limits, 5xx, timeouts, write conflicts, a process
that could not bind yet). ``PermanentDriverError``: retrying will not help (forbidden, invalid
object, an object Plinth does not own); the deployment is marked failed with the message.
"""

from __future__ import annotations


class DriverError(Exception):
    """Base of every driver error. ``message`` is shown to every viewer of the endpoint and
    logged, so it holds no secrets and never the words of a reply from the cluster (whatever
    answered chose them): a status code and a fixed summary, as ``kube.client`` builds them."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class TemporaryDriverError(DriverError):
    """The same call may succeed later: reconcile retries with backoff."""


class PermanentDriverError(DriverError):
    """The call will keep failing until a person changes something."""


class ForeignObjectError(PermanentDriverError):
    """An object with the name Plinth wants exists but is not Plinth's: never touched."""


class AdapterChangeRefused(PermanentDriverError):
    """An engine refused to load or unload a LoRA adapter (``Driver.apply_adapters``). Its
    message quotes the engine's reason (a bad source, a full pool), cut short: the endpoint's
    own engine said it, about the adapter its owner named, and nothing else tells them why."""
