"""Tasks of what flows through endpoints: the gateway's usage and keys' last-used flushes from
Redis, scale-from-zero wake-ups, and the metrics probe with its retention.

The gateway sends ``deployments.wake_deployment`` by name when a request arrives for an
endpoint at zero replicas. Beat runs ``deployments.flush_usage`` and
``deployments.flush_key_last_used`` every ``PLINTH_USAGE_FLUSH_S`` (``CELERY_BEAT_SCHEDULE`` in
settings, the one schedule). Each has time limits: the usage flush's below its Redis lock's
TTL (``usage.FLUSH_LOCK_S``), so a flush cut short releases the lock rather than outliving it;
the others hold nothing and are idempotent, so theirs only bound a stuck one.

Beat runs ``deployments.probe_due`` every ``PLINTH_PROBE_INTERVAL_S``, which queues
``deployments.probe_deployment`` for every running endpoint with a ready replica, and
``deployments.purge_samples`` hourly, which drops samples older than their retention.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from deployments.autoscaling import services as autoscaler
from deployments.endpoints.models import Deployment, DesiredState
from deployments.traffic import key_activity, probe, usage

__all__: list[str] = [
    "flush_key_last_used",
    "flush_usage",
    "probe_deployment",
    "probe_due",
    "purge_samples",
    "wake_deployment",
]

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


# Probes hold nothing. One still running three intervals on is stuck, not slow (the next
# rounds have run meanwhile); a probe message still queued when the next round is sent is dropped.
_PROBE_SOFT_LIMIT_S = settings.PLINTH_PROBE_INTERVAL_S * 3
_PROBE_LIMIT_S = settings.PLINTH_PROBE_INTERVAL_S * 4


@shared_task(
    name="deployments.probe_due",
    ignore_result=True,
    soft_time_limit=_PROBE_SOFT_LIMIT_S,
    time_limit=_PROBE_LIMIT_S,
)
def probe_due() -> int:
    """Queue a probe of every running endpoint with a ready replica."""
    ids = Deployment.objects.filter(
        desired_state=DesiredState.RUNNING, ready_replicas__gt=0
    ).values_list("pk", flat=True)
    for deployment_id in ids:
        probe_deployment.apply_async(
            args=(str(deployment_id),), expires=settings.PLINTH_PROBE_INTERVAL_S
        )
    return len(ids)


@shared_task(
    name="deployments.probe_deployment",
    ignore_result=True,
    soft_time_limit=_PROBE_SOFT_LIMIT_S,
    time_limit=_PROBE_LIMIT_S,
)
def probe_deployment(deployment_id: str) -> None:
    probe.probe(deployment_id)


# Hourly; a purge cut short leaves the rest for the next hour's.
@shared_task(
    name="deployments.purge_samples", ignore_result=True, soft_time_limit=600, time_limit=900
)
def purge_samples() -> int:
    return probe.purge_old_samples()
