"""Change notifications for processes that cache state (the gateway's route table).

Published on Redis after the writing transaction commits, so a reader never sees a
notification for a change it cannot read yet. Readers also refresh periodically, so a lost
notification only delays.
"""

from __future__ import annotations

import json
import logging

import redis
from django.conf import settings
from django.db import transaction

CHANNEL = "plinth:changes"
logger = logging.getLogger(__name__)
_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
    return _client


def _publish(kind: str, object_id: str) -> None:
    try:
        _redis().publish(CHANNEL, json.dumps({"kind": kind, "id": object_id}))
    except redis.RedisError:
        # The periodic refresh catches up; a mutation must not fail because Redis blinked.
        logger.warning("could not publish change notification kind=%s", kind)


def publish_on_commit(kind: str, object_id: str) -> None:
    transaction.on_commit(lambda: _publish(kind, object_id))
