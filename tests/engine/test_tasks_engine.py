"""The Celery tasks around reconcile: the per-endpoint lock, retries, failures and the sweep.

Tasks run in this process with ``apply`` (Celery's own synchronous execution, retries included);
the sweep's messages are read back from the real Redis broker.
"""

from __future__ import annotations

import socket
import subprocess
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from deployments import reconcile
from deployments.models import Deployment
from deployments.status import FAILED
from deployments.tasks.engine import reconcile_deployment, sweep
from tests.conftest import queued
from tests.drivers.kube_emulator import RunningEmulator
from tests.engine.conftest import NS, refresh


@pytest.mark.django_db
def test_a_temporary_api_error_is_retried_and_the_pass_completes(
    endpoint: Deployment,
    emulator: RunningEmulator,
) -> None:
    emulator.inject("PATCH", "deployments/kchat-engine", 500, times=2)
    result = reconcile_deployment.apply(args=[str(endpoint.pk)])
    assert result.successful()
    assert emulator.get("apps/v1", "Deployment", NS, "kchat-engine") is not None
    deployment = refresh(endpoint)
    assert deployment.failed_at is None and deployment.applied_revision.number == 1


@pytest.mark.django_db
def test_a_permanent_api_error_fails_the_endpoint_with_the_reason(
    endpoint: Deployment,
    emulator: RunningEmulator,
) -> None:
    emulator.inject("PATCH", "deployments/kchat-engine", 403)
    reconcile_deployment.apply(args=[str(endpoint.pk)])
    deployment = refresh(endpoint)
    assert deployment.status == FAILED
    assert deployment.failure_reason.startswith("Kubernetes API 403")


@pytest.mark.django_db
def test_a_held_lock_means_another_worker_is_on_it(
    endpoint: Deployment,
    emulator: RunningEmulator,
) -> None:
    client = redis.Redis.from_url(settings.REDIS_URL)
    lock = client.lock(f"plinth:reconcile:{endpoint.pk}", timeout=30)
    assert lock.acquire(blocking=False)
    try:
        reconcile_deployment.apply(args=[str(endpoint.pk)])
        assert refresh(endpoint).observed_at is None  # nothing done twice at once
        assert emulator.writes() == []
    finally:
        lock.release()
    reconcile_deployment.apply(args=[str(endpoint.pk)])
    assert refresh(endpoint).observed_at is not None


@pytest.mark.django_db
def test_the_sweep_queues_due_endpoints_once_per_lease(
    endpoint: Deployment,
    broker: redis.Redis,
) -> None:
    broker.delete(settings.CELERY_TASK_DEFAULT_QUEUE)  # the create's own message
    later = Deployment.objects.create(
        organization=endpoint.organization, slug="later", name="later", cluster=endpoint.cluster,
        next_reconcile_at=timezone.now() + timedelta(hours=1),
    )  # fmt: skip
    assert sweep.apply().get() == [str(endpoint.pk)]
    assert queued(broker) == [("deployments.reconcile_deployment", [str(endpoint.pk)])]
    assert sweep.apply().get() == []  # claimed: not queued again before its lease ends
    assert str(later.pk) not in [args[0] for _, args in queued(broker)]


@pytest.mark.django_db
def test_a_message_for_a_deleted_endpoint_is_a_no_op() -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    assert reconcile.reconcile(missing) is False
    assert reconcile_deployment.apply(args=[missing]).successful()


@pytest.mark.django_db
def test_the_lock_of_a_worker_that_died_here_is_taken_over(
    endpoint: Deployment,
    emulator: RunningEmulator,
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    client = redis.Redis.from_url(settings.REDIS_URL)
    name = f"plinth:reconcile:{endpoint.pk}"
    client.set(name, f"{socket.gethostname()}:{gone.pid}:deadbeef", ex=60)
    try:
        reconcile_deployment.apply(args=[str(endpoint.pk)])
        assert refresh(endpoint).observed_at is not None
        assert client.get(name) is None  # released by the pass that took it over
    finally:
        client.delete(name)
