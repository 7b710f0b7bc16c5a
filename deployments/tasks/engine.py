"""Tasks that drive endpoints towards their desired state: reconcile, sweep, probe, retention.

Thin: each takes ids and calls one function. ``reconcile_deployment`` holds a Redis lock per
endpoint, so two workers never reconcile the same endpoint at once, and retries temporary driver
errors with exponential backoff (permanent ones are marked failed inside ``reconcile``). Beat runs
``sweep``, which claims endpoints whose ``next_reconcile_at`` has passed with one conditional
UPDATE and queues them: a lost message, or a worker killed mid-pass, only delays a deployment.

A change whose message finds the lock taken is not left to the sweep: the holder looks again
after releasing the lock and runs another pass while a change is pending, so a stop made during
a long pass is acted on as soon as that pass ends. A starting worker makes every local-cluster
endpoint due at once, so their status follows what runs after a restart.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import timedelta

import redis
from celery import shared_task
from celery.app.task import Task
from celery.signals import worker_ready
from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.utils import timezone
from redis.lock import Lock

from controlplane import redis_clients
from deployments import probe, reconcile
from deployments.drivers.errors import TemporaryDriverError
from deployments.models import ClusterKind, Deployment, DesiredState

__all__: list[str] = [
    "probe_deployment",
    "probe_due",
    "purge_samples",
    "reconcile_deployment",
    "sweep",
]

logger = logging.getLogger(__name__)
MAX_RETRIES = 8
# Passes one task runs back to back while changes keep arriving during them.
MAX_PASSES = 3
SWEEP_BATCH = 500


def _redis() -> redis.Redis:
    return redis_clients.client(settings.REDIS_URL)


@shared_task(
    name="deployments.reconcile_deployment", bind=True, ignore_result=True, max_retries=MAX_RETRIES
)
def reconcile_deployment(self: Task, deployment_id: str) -> None:
    """Bring one endpoint towards its desired state. Safe to run any number of times."""
    for _ in range(MAX_PASSES):
        lock = _acquire(f"plinth:reconcile:{deployment_id}")
        if lock is None:
            logger.info("reconcile %s: another worker holds it and looks again", deployment_id)
            return
        try:
            reconcile.reconcile(deployment_id)
        except TemporaryDriverError as exc:
            countdown = min(60, 2 ** (self.request.retries or 0))
            logger.warning("reconcile %s: %s; retry in %s s", deployment_id, exc.message, countdown)
            raise self.retry(exc=exc, countdown=countdown) from exc
        finally:
            _release(lock, deployment_id)
        # Checked after the release: a message that found the lock taken before this point was
        # sent after its change committed, so the change is seen here.
        if not reconcile.change_pending(deployment_id):
            return
    # Still changing under it: a message of its own, so other endpoints get their turn.
    reconcile_deployment.delay(deployment_id)


def _release(lock: Lock, deployment_id: str) -> None:
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
        lock = client.lock(name, timeout=settings.PLINTH_RECONCILE_LOCK_S, blocking=False)
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
    lease = now + timedelta(seconds=settings.PLINTH_SWEEP_LEASE_S)
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


@worker_ready.connect
def _reobserve_local_endpoints(**_: object) -> None:
    """A worker starts (``make run`` again): the local cluster's processes may have stopped
    with the previous run, so its endpoints are observed at once rather than when due."""
    try:
        make_local_endpoints_due()
    except DatabaseError:
        logger.warning("could not make the local endpoints due; the sweep gets to them later")
    finally:
        connections.close_all()  # the main process runs no tasks: hold no connection open


def make_local_endpoints_due() -> int:
    return Deployment.objects.filter(cluster__kind=ClusterKind.LOCAL).update(
        next_reconcile_at=timezone.now()
    )


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
