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

from controlplane import redis_clients

logger = logging.getLogger(__name__)


def _publish(kind: str, object_id: str) -> None:
    try:
        message = json.dumps({"kind": kind, "id": object_id})
        client = redis_clients.client(settings.REDIS_URL)
        client.publish(redis_clients.changes_channel(client), message)
    except redis.RedisError:
        # The periodic refresh catches up; a mutation must not fail because Redis blinked.
        logger.warning("could not publish change notification kind=%s", kind)


def publish_on_commit(kind: str, object_id: str) -> None:
    transaction.on_commit(lambda: _publish(kind, object_id))
