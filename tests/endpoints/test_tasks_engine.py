"""The Celery tasks around reconcile: the per-endpoint lock, retries, failures and the sweep.

Tasks run in this process with ``apply`` (Celery's own synchronous execution, retries included);
the sweep's messages are read back from the real Redis broker. A change made while a pass runs
is acted on when that pass ends, and a starting worker (a real one) re-observes the local
cluster's endpoints.

Why the emulator (a stand-in, see tests/drivers/kube_emulator.py): retries and failures are driven
by injected 500s and a 403 on the engine's apply, and the lock tests assert that no request was
written (``writes``), which a real API server does not show a test.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from deployments.drivers.local.processes import ProcessTable
from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.endpoints.tasks import reconcile_deployment, sweep
from deployments.status import FAILED, STOPPED, STOPPING
from tests.conftest import Cast, queued
from tests.drivers.kube_emulator import RunningEmulator
from tests.endpoints import processes
from tests.fixtures.endpoints import NS, refresh, small_spec
from tests.waiting import wait_until


@pytest.mark.django_db
def test_a_temporary_api_error_is_retried_and_the_pass_completes(
    kube_endpoint: Deployment,
    emulator: RunningEmulator,
) -> None:
    emulator.inject("PATCH", "deployments/kchat-engine", 500, times=2)
    result = reconcile_deployment.apply(args=[str(kube_endpoint.pk)])
    assert result.successful()
    assert emulator.get("apps/v1", "Deployment", NS, "kchat-engine") is not None
    deployment = refresh(kube_endpoint)
    assert deployment.failed_at is None and deployment.applied_revision.number == 1


@pytest.mark.django_db
def test_a_permanent_api_error_fails_the_endpoint_with_the_reason(
    kube_endpoint: Deployment,
    emulator: RunningEmulator,
) -> None:
    emulator.inject("PATCH", "deployments/kchat-engine", 403)
    reconcile_deployment.apply(args=[str(kube_endpoint.pk)])
    deployment = refresh(kube_endpoint)
    assert deployment.status == FAILED
    assert deployment.failure_reason.startswith("Kubernetes API 403")


@pytest.mark.django_db
def test_a_held_lock_means_another_worker_is_on_it(
    kube_endpoint: Deployment,
    emulator: RunningEmulator,
) -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    lock = client.lock(f"plinth:reconcile:{kube_endpoint.pk}", timeout=30)
    assert lock.acquire(blocking=False)
    try:
        reconcile_deployment.apply(args=[str(kube_endpoint.pk)])
        assert refresh(kube_endpoint).observed_at is None  # nothing done twice at once
        assert emulator.writes() == []
    finally:
        lock.release()
    reconcile_deployment.apply(args=[str(kube_endpoint.pk)])
    assert refresh(kube_endpoint).observed_at is not None


@pytest.mark.django_db
def test_the_sweep_queues_due_endpoints_once_per_lease(
    kube_endpoint: Deployment,
    broker: redis.Redis,
) -> None:
    broker.delete(settings.CELERY_TASK_DEFAULT_QUEUE)  # the create's own message
    later = Deployment.objects.create(
        organization=kube_endpoint.organization, slug="later", name="later",
        cluster=kube_endpoint.cluster, next_reconcile_at=timezone.now() + timedelta(hours=1),
    )  # fmt: skip
    assert sweep.apply().get() == [str(kube_endpoint.pk)]
    assert queued(broker) == [("deployments.reconcile_deployment", [str(kube_endpoint.pk)])]
    assert sweep.apply().get() == []  # claimed: not queued again before its lease ends
    assert str(later.pk) not in [args[0] for _, args in queued(broker)]


@pytest.mark.django_db
def test_a_message_for_a_deleted_endpoint_is_a_no_op() -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    assert reconcile.reconcile(missing) is False
    assert reconcile_deployment.apply(args=[missing]).successful()


@pytest.mark.django_db
def test_the_lock_of_a_worker_that_died_here_is_taken_over(
    kube_endpoint: Deployment,
    emulator: RunningEmulator,
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    client = redis.Redis.from_url(settings.REDIS_URL)
    name = f"plinth:reconcile:{kube_endpoint.pk}"
    client.set(name, f"{socket.gethostname()}:{gone.pid}:deadbeef", ex=60)
    try:
        reconcile_deployment.apply(args=[str(kube_endpoint.pk)])
        assert refresh(kube_endpoint).observed_at is not None
        assert client.get(name) is None  # released by the pass that took it over
    finally:
        client.delete(name)


def _blocked_by_me() -> bool:
    """Another session waits on a lock this one holds (pg_locks is live, not a snapshot)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted"
            " AND pg_backend_pid() = ANY(pg_blocking_pids(pid))"
        )
        return bool(cursor.fetchone()[0])


def _overtaken(
    deployment: Deployment, run: Callable[[], object], change: Callable[[], None]
) -> None:
    """Run ``run`` (a pass) in a thread and commit ``change`` while that pass is under way.

    The test holds the endpoint's row lock, so the pass, which has read the row and done its
    work, waits at its save until the change is committed: the order is certain, not timed.
    """
    errors: list[BaseException] = []

    def target() -> None:
        try:
            run()
        except BaseException as exc:  # reported in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    worker = threading.Thread(target=target)
    with transaction.atomic():
        Deployment.objects.select_for_update().get(pk=deployment.pk)
        worker.start()
        wait_until(_blocked_by_me, "the pass waiting at its save", timeout=90)
        change()
    worker.join(timeout=120)
    assert not worker.is_alive() and not errors, errors


@pytest.mark.django_db(transaction=True)
def test_a_stop_made_during_a_pass_is_acted_on_when_that_pass_ends(
    cast: Cast, fast_local: Path, broker: redis.Redis
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    deployment = services.create_deployment(actor, slug="busy", name="B", spec=small_spec())
    endpoint_id = str(deployment.pk)

    def stop_while_held() -> None:
        services.stop(actor, endpoint_id)
        # The stop's own message finds the lock taken by the pass under way.
        reconcile_deployment.apply(args=[endpoint_id])

    _overtaken(deployment, lambda: reconcile_deployment.apply(args=[endpoint_id]), stop_while_held)
    # No sweep ran: the worker that held the lock saw the change and stopped the endpoint.
    stopped = refresh(deployment)
    assert stopped.desired_state == "stopped"
    assert stopped.observed_generation == stopped.generation
    assert stopped.status in {STOPPING, STOPPED}
    assert not any(r.role != "router" for r in ProcessTable(fast_local / endpoint_id).records())


@pytest.mark.django_db(transaction=True)
def test_a_sweeps_lease_does_not_hide_a_change_made_during_a_pass(
    cast: Cast, fast_local: Path, broker: redis.Redis
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    deployment = services.create_deployment(actor, slug="leased", name="L", spec=small_spec())
    endpoint_id = str(deployment.pk)

    def stop_then_sweep() -> None:
        services.stop(actor, endpoint_id)
        assert sweep.apply().get() == [endpoint_id]  # claimed for PLINTH_SWEEP_LEASE_S

    _overtaken(deployment, lambda: reconcile.reconcile(endpoint_id), stop_then_sweep)
    after = refresh(deployment)
    assert after.observed_generation < after.generation  # that pass did not see the stop
    assert after.next_reconcile_at <= timezone.now()  # so it is due now, not after the lease


@pytest.mark.django_db(transaction=True)
def test_a_starting_worker_observes_the_local_endpoints_at_once(
    cast: Cast, tmp_path: Path, broker: redis.Redis
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    deployment = services.create_deployment(actor, slug="later", name="L", spec=small_spec())
    future = timezone.now() + timedelta(hours=1)
    Deployment.objects.filter(pk=deployment.pk).update(next_reconcile_at=future)
    queue = f"plinth-ready-{uuid.uuid4().hex[:8]}"  # no task of this test reaches it
    env = processes.engine_env(tmp_path / "local", queue)
    worker = processes.start("worker", env, tmp_path / "worker.log")
    try:
        due = lambda: refresh(deployment).next_reconcile_at <= timezone.now()  # noqa: E731
        wait_until(due, "due once a worker started", timeout=120)
    finally:
        processes.stop(worker)
        broker.delete(queue)
