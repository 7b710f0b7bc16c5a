"""Inference keys' last-used times: the gateway's Redis hash into ``ApiKey.last_used_at``.

The gateway authenticates inference keys from its in-memory table, so no database write happens
on a request; its meter records each key's latest request time in one Redis hash with every
batch (``gateway.metering``: one HSET per batch, not per request). Beat runs this flush: the
hash is renamed out of the way (atomic, so new times start a fresh hash), its times are handed
to ``controlplane.services.record_keys_used`` (which writes a key at most once a minute, and
only forward), and the renamed hash is deleted after that. A flush that dies midway leaves the
renamed hash for the next one; applying it twice changes nothing.

The gateway's metering module is not imported: the hash's name is the contract between the two
processes and is repeated here on purpose.
"""

from __future__ import annotations

import contextlib
import uuid

import redis
from django.conf import settings

from controlplane import redis_clients
from controlplane import services as platform
from deployments.traffic.redis_fields import as_time

KEY_LAST_USED_HASH = "plinth:usage:key_last_used"
PROCESSING_PREFIX = "plinth:key_last_used:processing:"


def flush_key_last_used(client: redis.Redis | None = None) -> int:
    """Move the keys' last-used times to the database; the number of key rows written."""
    client = client or redis_clients.client(settings.REDIS_URL)
    with contextlib.suppress(redis.ResponseError):  # no such key: no request since last time
        client.rename(KEY_LAST_USED_HASH, f"{PROCESSING_PREFIX}{uuid.uuid4().hex}")
    written = 0
    for name in client.scan_iter(match=f"{PROCESSING_PREFIX}*"):
        times = {
            redis_clients.as_text(key_id): when
            for key_id, epoch in client.hgetall(name).items()
            if (when := as_time(epoch)) is not None  # else not a gateway's: skipped
        }
        written += platform.record_keys_used(times)
        client.delete(name)
    return written
