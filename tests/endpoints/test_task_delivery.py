"""How reconcile work reaches a worker and ends: sent by name after commit, a broker outage left
to the sweep, and a pass over its time limit interrupted, its lock released and retried.

Real parts: the management API, the Redis broker, the Kubernetes API emulator, and for the time
limit a real worker on Celery's prefork pool (the pool that enforces limits, as in production).

Why the emulator (a stand-in, see tests/drivers/kube_emulator.py): the time-limit test stalls the
pass's apply (an injected stall, past the task's limit), which a real API server cannot be made to
do; the broker-outage test needs only an API that applies at once, which it also serves.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from controlplane import services as platform
from controlplane.celery import app as celery_app
from controlplane.models import Role
from deployments.endpoints.models import Deployment
from deployments.endpoints.tasks import reconcile_deployment, sweep
from tests.api.conftest import Api
from tests.conftest import Cast, queued
from tests.drivers.kube_emulator import RunningEmulator
from tests.endpoints import processes
from tests.fixtures.endpoints import refresh, small_spec
from tests.waiting import wait_until

RECONCILE = "deployments.reconcile_deployment"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # nothing listens there once it is closed


def _forget_broker_connections() -> None:
    # As Celery itself does after a fork (Celery._after_fork): the next send takes its producer
    # from kombu's pools for whatever conf.broker_url says then.
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


@contextmanager
def broker_unreachable() -> Iterator[None]:
    """This process's Celery app sends to an address where no broker answers (Redis down)."""
    saved = celery_app.conf.broker_url
    _forget_broker_connections()
    celery_app.conf.broker_url = f"redis://127.0.0.1:{_closed_port()}/0"
    try:
        yield
    finally:
        _forget_broker_connections()
        celery_app.conf.broker_url = saved


def developer_api(cast: Cast) -> Api:
    actor = cast.actor(cast.alice, cast.acme)
    key = platform.create_api_key(actor, name="ci", kind="management", role=Role.DEVELOPER)
    return Api(key.plaintext)


@pytest.mark.django_db
def test_a_change_saved_while_the_broker_is_down_answers_2xx_and_the_sweep_reconciles_it(
    cast: Cast,
    kube_endpoint: Deployment,
    emulator: RunningEmulator,
    broker: redis.Redis,
    django_capture_on_commit_callbacks: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = developer_api(cast)
    edited = {**small_spec(), "batching": {"max_running_requests": 32}}
    with broker_unreachable(), django_capture_on_commit_callbacks(execute=True):
        response = api.patch("deployments/kchat", {"spec": edited, "base_revision": 1})
    assert response.status_code == 200, response.content
    saved = refresh(kube_endpoint)
    assert saved.target_revision.number == 2  # the change was made ...
    assert queued(broker) == []  # ... and its message never reached the broker
    assert "not queued" in caplog.text

    # The broker is back: the sweep finds the endpoint due and its pass applies revision 2.
    assert sweep.apply().get() == [str(kube_endpoint.pk)]
    assert queued(broker) == [(RECONCILE, [str(kube_endpoint.pk)])]
    assert reconcile_deployment.apply(args=[str(kube_endpoint.pk)]).successful()
    reconciled = refresh(kube_endpoint)
    assert reconciled.applied_revision.number == 2
    assert reconciled.observed_generation == reconciled.generation


@pytest.mark.django_db(transaction=True)
def test_a_pass_over_its_time_limit_releases_its_lock_and_is_retried(
    kube_endpoint: Deployment, emulator: RunningEmulator, broker: redis.Redis, tmp_path: Path
) -> None:
    # The first apply of the engine stalls (3 s) past the pass's 1 s limit; the lock would
    # hold another 30 s, longer than this test waits, if the interrupted pass kept it.
    emulator.inject("PATCH", "deployments/kchat-engine", None, times=1)
    queue = f"plinth-limits-{uuid.uuid4().hex[:8]}"
    env = processes.engine_env(
        tmp_path / "local", queue,
        PLINTH_RECONCILE_LOCK_S="30", PLINTH_RECONCILE_TIME_LIMIT_S="1",
        PLINTH_KUBE_ALLOW_HTTP="true", PLINTH_KUBE_ALLOW_HOSTS="127.0.0.1",
    )  # fmt: skip
    log = tmp_path / "worker.log"
    worker = processes.start("worker", env, log, pool="prefork")
    lock = f"plinth:reconcile:{kube_endpoint.pk}"
    try:
        # None: the worker's own limits. Celery would put this process's (the defaults) in the
        # message, as it does for any task registered where it is sent from.
        celery_app.send_task(
            RECONCILE,
            args=[str(kube_endpoint.pk)],
            queue=queue,
            soft_time_limit=None,
            time_limit=None,
        )
        applied = lambda: refresh(kube_endpoint).applied_revision is not None  # noqa: E731
        wait_until(applied, "applied by the retried pass", timeout=25)
        assert "Soft time limit (1" in log.read_text()  # the first attempt was cut short
        assert broker.get(lock) is None
    finally:
        processes.stop(worker)
        broker.delete(queue, lock)
    assert refresh(kube_endpoint).failed_at is None
