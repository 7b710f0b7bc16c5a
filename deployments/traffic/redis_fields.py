"""Reading what another process wrote into Redis (the gateway's usage counts, last-request and
last-used times), for the flushes that move it into the database.

Each reader answers None for a value that does not parse, and the flush skips that field. A
malformed field must never raise: the flush would fail before deleting its batch, and so fail
again on every later run, holding back every count behind it.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from controlplane import redis_clients

__all__ = ["as_count", "as_time", "as_uuid"]


def as_uuid(value: bytes | str) -> uuid.UUID | None:
    try:
        return uuid.UUID(redis_clients.as_text(value))
    except ValueError:
        return None


def as_count(value: bytes | str) -> int | None:
    try:
        count = int(redis_clients.as_text(value))
    except ValueError:
        return None
    return count if count >= 0 else None


def as_time(value: bytes | str) -> datetime | None:
    """An epoch in whole seconds, as the gateway writes them."""
    epoch = as_count(value)
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, tz=UTC)
    except (OverflowError, OSError, ValueError):  # beyond what a datetime holds
        return None
