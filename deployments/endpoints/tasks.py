"""Tasks that drive endpoints towards their desired state: reconcile and the sweep.

Thin: each reloads what it names (or what is due) and calls one function.
``reconcile_deployment`` holds a Redis lock per endpoint, so two workers never reconcile the same
endpoint at once, and Celery retries temporary driver errors with exponential backoff and jitter
(permanent ones are marked failed inside ``reconcile``). Every task has time limits below what
it holds: a pass over ``PLINTH_RECONCILE_TIME_LIMIT_S`` is interrupted, releases its lock and is
retried; one that ignores that is ended when the lock's TTL runs out, so no two passes ever act
under one lock.
Beat runs ``sweep``, which claims endpoints whose ``next_reconcile_at`` has passed with one
conditional UPDATE and queues them at routine priority, each message expiring with the claim: a
lost or late message, or a worker killed mid-pass, only delays a deployment. An endpoint at rest
(stopped or scaled to zero) has no ``next_reconcile_at`` and is never swept until a change makes
it due. Changes (services), autoscaling and wake-ups are sent at urgent priority
(``CELERY_TASK_ROUTES``), so a backlog of routine passes never delays them.

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
from celery.exceptions import SoftTimeLimitExceeded
from celery.signals import worker_ready
from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.utils import timezone
from redis.lock import Lock

from controlplane import redis_clients
from deployments.clusters.models import ClusterKind
from deployments.drivers.errors import TemporaryDriverError
from deployments.endpoints import due, reconcile
from deployments.endpoints.models import Deployment
from deployments.traffic import telemetry

__all__: list[str] = ["reconcile_deployment", "sweep"]

logger = logging.getLogger(__name__)
MAX_RETRIES = 8
# Seconds of the longest wait between retries (1, 2, 4, ... with full jitter).
MAX_BACKOFF_S = 60
# Passes one task runs back to back while changes keep arriving during them.
MAX_PASSES = 3
SWEEP_BATCH = 500


def _redis() -> redis.Redis:
    return redis_clients.client(settings.REDIS_URL)


# Celery's time limits: the soft one raises SoftTimeLimitExceeded in the task (its finally
# clauses run), the hard one, the TTL of what the task holds, ends the process (prefork pool).
def _soft_limit_s(hard_s: int) -> int:
    """A soft limit a quarter before ``hard_s`` (at least 1 s: 0 would mean none)."""
    return max(1, hard_s * 3 // 4)


@shared_task(
    name="deployments.reconcile_deployment",
    ignore_result=True,
    autoretry_for=(TemporaryDriverError, SoftTimeLimitExceeded),
    max_retries=MAX_RETRIES,
    retry_backoff=True,
    retry_backoff_max=MAX_BACKOFF_S,
    retry_jitter=True,
    # Below the lock's TTL (settings checks it): a pass never runs on after its lock expired.
    soft_time_limit=settings.PLINTH_RECONCILE_TIME_LIMIT_S,
    time_limit=settings.PLINTH_RECONCILE_LOCK_S,
)
def reconcile_deployment(deployment_id: str) -> None:
    """Bring one endpoint towards its desired state. Safe to run any number of times."""
    for _ in range(MAX_PASSES):
        lock = _acquire(f"plinth:reconcile:{deployment_id}")
        if lock is None:
            logger.info("reconcile %s: another worker holds it and looks again", deployment_id)
            return
        try:
            with telemetry.timed_reconcile():  # duration and outcome, for /metrics
                reconcile.reconcile(deployment_id)
        except TemporaryDriverError as exc:
            logger.warning("reconcile %s: %s; retrying", deployment_id, exc.message)
            raise
        except SoftTimeLimitExceeded:
            logger.warning("reconcile %s: over its time limit; retrying", deployment_id)
            raise
        finally:
            _release(lock, deployment_id)
        # Checked after the release: a message that found the lock taken before this point was
        # sent after its change committed, so the change is seen here.
        if not due.change_pending(deployment_id):
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
        lock: Lock = client.lock(name, timeout=settings.PLINTH_RECONCILE_LOCK_S, blocking=False)
        token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"
        if lock.acquire(blocking=False, token=token):
            return lock
        holder = client.get(name)
        if holder is None or not _died_here(redis_clients.as_text(holder)):
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


# The sweep's claim on an endpoint is its lease: a sweep still running when it ends would race
# the next one, and a message still queued then is one the next sweep has sent again.
@shared_task(
    name="deployments.sweep",
    ignore_result=True,
    soft_time_limit=_soft_limit_s(settings.PLINTH_SWEEP_LEASE_S),
    time_limit=settings.PLINTH_SWEEP_LEASE_S,
)
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
        # A message not started within the lease is one the next sweep has sent again. Routine:
        # a change someone asked for (sent by services, urgent) is taken before these.
        reconcile_deployment.apply_async(
            args=(deployment_id,), expires=lease, priority=settings.PLINTH_ROUTINE_PRIORITY
        )
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
    """Every local endpoint with a pass scheduled is due now. One at rest (stopped or scaled to
    zero, no pass scheduled) ran nothing that a restart could have stopped: it stays at rest."""
    rows = Deployment.objects.filter(
        cluster__kind=ClusterKind.LOCAL, next_reconcile_at__isnull=False
    )
    return rows.update(next_reconcile_at=timezone.now())
