"""Tasks fed by the gateway: usage flush from Redis to UsageRecord, scale-from-zero wake-ups.

The gateway sends ``deployments.wake_deployment`` by name when a request arrives for an
endpoint at zero replicas. Beat runs ``deployments.flush_usage`` every
``USAGE_FLUSH_SECONDS`` (registered below, so the schedule lives next to the task).
"""

from __future__ import annotations

import logging

from celery import shared_task

from controlplane.celery import app

__all__: list[str] = ["flush_usage", "wake_deployment"]

USAGE_FLUSH_SECONDS = 15.0
logger = logging.getLogger(__name__)


@shared_task(name="deployments.wake_deployment", ignore_result=True)
def wake_deployment(deployment_id: str) -> bool:
    """Scale a scaled-to-zero endpoint back up; a no-op when it is awake, stopped or gone."""
    from deployments import services

    woke = services.wake(deployment_id)
    logger.info("wake %s: %s", deployment_id, "scaling up" if woke else "nothing to do")
    return woke


@shared_task(name="deployments.flush_usage", ignore_result=True)
def flush_usage(include_current: bool = False) -> dict[str, int]:
    """Move the gateway's usage counters into UsageRecord (idempotent; one runs at a time)."""
    from deployments import usage

    result = usage.flush_usage(include_current=include_current)
    return {"minutes": result.minutes, "rows": result.rows, "requests": result.requests}


# Merged into whatever schedule settings define; beat reads it after importing the tasks.
app.conf.beat_schedule = {
    **(app.conf.beat_schedule or {}),
    "deployments.flush_usage": {"task": "deployments.flush_usage", "schedule": USAGE_FLUSH_SECONDS},
}
