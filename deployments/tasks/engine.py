"""Tasks that drive endpoints towards their desired state: reconcile, sweep, probe, retention.

Thin: each takes ids and calls one function. ``reconcile_deployment`` holds a Redis lock per
endpoint, so two workers never reconcile the same endpoint at once, and retries temporary driver
errors with exponential backoff (permanent ones are marked failed inside ``reconcile``). Beat runs
``sweep``, which claims endpoints whose ``next_reconcile_at`` has passed with one conditional
UPDATE and queues them: a lost message, or a worker killed mid-pass, only delays a deployment.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import timedelta
from functools import cache

import redis
from celery import shared_task
from celery.app.task import Task
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from redis.lock import Lock

from controlplane.celery import app
from deployments import probe, reconcile
from deployments.drivers.errors import TemporaryDriverError
from deployments.models import Deployment, DesiredState

__all__: list[str] = [
    "probe_deployment",
    "probe_due",
    "purge_samples",
    "reconcile_deployment",
    "sweep",
]

logger = logging.getLogger(__name__)
MAX_RETRIES = 8
SWEEP_BATCH = 500


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


@cache
def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL)


@shared_task(
    name="deployments.reconcile_deployment", bind=True, ignore_result=True, max_retries=MAX_RETRIES
)
def reconcile_deployment(self: Task, deployment_id: str) -> None:
    """Bring one endpoint towards its desired state. Safe to run any number of times."""
    lock = _acquire(f"plinth:reconcile:{deployment_id}")
    if lock is None:
        logger.info("reconcile %s: another worker holds it; the sweep will return", deployment_id)
        return
    try:
        reconcile.reconcile(deployment_id)
    except TemporaryDriverError as exc:
        countdown = min(60, 2 ** (self.request.retries or 0))
        logger.warning("reconcile %s: %s; retry in %s s", deployment_id, exc.message, countdown)
        raise self.retry(exc=exc, countdown=countdown) from exc
    finally:
        try:
            lock.release()
        except redis.exceptions.LockError:
            logger.warning("reconcile %s outlived its lock", deployment_id)


# Deletes the lock only if it still holds the dead worker's token (atomic compare-and-delete).
_RELEASE_IF = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end"


def _acquire(name: str) -> Lock | None:
    """The per-endpoint lock, or None while another live worker holds it.

    The token names the holder (host, pid): a lock left by a worker that died on this machine
    (SIGKILL, OOM) is taken over at once instead of blocking the endpoint until it expires.
    """
    client = _redis()
    for _ in range(2):
        lock = client.lock(name, timeout=_setting("PLINTH_RECONCILE_LOCK_S", 60), blocking=False)
        token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        if lock.acquire(blocking=False, token=token):
            return lock
        holder = client.get(name)
        if holder is None or not _died_here(holder.decode()):
            return None
        logger.warning("taking over the lock %s of a worker that died (%s)", name, holder)
        client.eval(_RELEASE_IF, 1, name, holder)
    return None


def _died_here(holder: str) -> bool:
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@shared_task(name="deployments.sweep", ignore_result=True)
def sweep() -> list[str]:
    """Queue every endpoint whose ``next_reconcile_at`` has passed (beat runs this)."""
    now = timezone.now()
    lease = now + timedelta(seconds=_setting("PLINTH_SWEEP_LEASE_S", 30))
    with transaction.atomic():
        due = (
            Deployment.objects.select_for_update(skip_locked=True)
            .filter(next_reconcile_at__lte=now)
            .order_by("next_reconcile_at")
            .values_list("pk", flat=True)[:SWEEP_BATCH]
        )
        ids = [str(pk) for pk in due]
        # Claimed until the lease ends: the next sweep does not queue them again meanwhile.
        Deployment.objects.filter(pk__in=ids).update(next_reconcile_at=lease)
    for deployment_id in ids:
        reconcile_deployment.delay(deployment_id)
    return ids


@shared_task(name="deployments.probe_due", ignore_result=True)
def probe_due() -> int:
    """Queue a probe of every running endpoint with a ready replica."""
    ids = Deployment.objects.filter(
        desired_state=DesiredState.RUNNING, ready_replicas__gt=0
    ).values_list("pk", flat=True)
    for deployment_id in ids:
        probe_deployment.delay(str(deployment_id))
    return len(ids)


@shared_task(name="deployments.probe_deployment", ignore_result=True)
def probe_deployment(deployment_id: str) -> None:
    probe.probe(deployment_id)


@shared_task(name="deployments.purge_samples", ignore_result=True)
def purge_samples() -> int:
    return probe.purge_old_samples()


# Merged into whatever schedule settings define; beat reads it after importing the tasks.
app.conf.beat_schedule = {
    **(app.conf.beat_schedule or {}),
    "deployments.sweep": {
        "task": "deployments.sweep",
        "schedule": _setting("PLINTH_SWEEP_INTERVAL_S", 5),
    },
    "deployments.probe_due": {
        "task": "deployments.probe_due",
        "schedule": _setting("PLINTH_PROBE_INTERVAL_S", 15),
    },
    "deployments.purge_samples": {"task": "deployments.purge_samples", "schedule": 3600.0},
}
