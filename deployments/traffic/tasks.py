"""Tasks fed by the gateway: usage and keys' last-used flushes from Redis, scale-from-zero wake-ups.

The gateway sends ``deployments.wake_deployment`` by name when a request arrives for an
endpoint at zero replicas. Beat runs ``deployments.flush_usage`` and
``deployments.flush_key_last_used`` every ``PLINTH_USAGE_FLUSH_S`` (``CELERY_BEAT_SCHEDULE`` in
settings, the one schedule). Each has time limits: the usage flush's below its Redis lock's
TTL (``usage.FLUSH_LOCK_S``), so a flush cut short releases the lock rather than outliving it;
the others hold nothing and are idempotent, so theirs only bound a stuck one.
"""

from __future__ import annotations

import logging

from celery import shared_task

from deployments.autoscaling import services as autoscaler
from deployments.traffic import key_activity, usage

__all__: list[str] = ["flush_key_last_used", "flush_usage", "wake_deployment"]

logger = logging.getLogger(__name__)


@shared_task(
    name="deployments.wake_deployment", ignore_result=True, soft_time_limit=30, time_limit=60
)
def wake_deployment(deployment_id: str) -> bool:
    """Scale a scaled-to-zero endpoint back up; a no-op when it is awake, stopped or gone."""
    woke = autoscaler.wake(deployment_id)
    logger.info("wake %s: %s", deployment_id, "scaling up" if woke else "nothing to do")
    return woke


@shared_task(
    name="deployments.flush_usage",
    ignore_result=True,
    soft_time_limit=usage.FLUSH_LOCK_S * 3 // 4,
    time_limit=usage.FLUSH_LOCK_S,
)
def flush_usage(include_current: bool = False) -> dict[str, int]:
    """Move the gateway's usage counters into UsageRecord (idempotent; one runs at a time)."""
    result = usage.flush_usage(include_current=include_current)
    return {"minutes": result.minutes, "rows": result.rows, "requests": result.requests}


@shared_task(
    name="deployments.flush_key_last_used", ignore_result=True, soft_time_limit=60, time_limit=90
)
def flush_key_last_used() -> int:
    """Move the gateway's per-key last-used times into ApiKey (idempotent)."""
    return key_activity.flush_key_last_used()
