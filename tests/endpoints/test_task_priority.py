"""Changes people ask for, autoscaling and wake-ups never wait behind routine passes.

One queue, two priorities: kombu keeps a Redis list per priority step and a worker takes from
the urgent one first. The sweep's passes and the probes are routine; a change's reconcile (sent
by services), the autoscaler and the gateway's wake-ups are urgent. Real broker, real worker.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings

from controlplane.celery import app as celery_app
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.endpoints.tasks import reconcile_deployment, sweep
from tests.conftest import Cast, priority_lists
from tests.endpoints import processes
from tests.fixtures.endpoints import small_spec
from tests.waiting import wait_until

RECONCILE = "deployments.reconcile_deployment"


def waiting(broker: redis.Redis, queue: str) -> dict[str, list[tuple[str, list[Any]]]]:
    """(task, args) waiting in the queue, by priority list: "urgent" and "routine"."""

    def read(name: str) -> list[tuple[str, list[Any]]]:
        out = []
        for raw in reversed(broker.lrange(name, 0, -1)):
            message = json.loads(raw)
            args = json.loads(base64.b64decode(message["body"]))[0]
            out.append((message["headers"]["task"], args))
        return out

    urgent, *_, routine = priority_lists(queue)
    return {"urgent": read(urgent), "routine": read(routine)}


@pytest.mark.django_db
def test_changes_autoscaling_and_wake_ups_are_urgent_and_the_sweep_routine(
    cast: Cast, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    actor = cast.actor(cast.alice, cast.acme)
    with django_capture_on_commit_callbacks(execute=True):
        changed = services.create_deployment(actor, slug="chat", name="c", spec=small_spec())
    rested = services.create_deployment(actor, slug="idle", name="i", spec=small_spec())
    Deployment.objects.filter(pk=changed.pk).update(next_reconcile_at=None)  # only "idle" due
    sweep()
    celery_app.send_task("deployments.autoscale")
    celery_app.send_task("deployments.wake_deployment", args=[str(rested.pk)])

    listed = waiting(broker, queue)
    assert listed["urgent"] == [
        (RECONCILE, [str(changed.pk)]),
        ("deployments.autoscale", []),
        ("deployments.wake_deployment", [str(rested.pk)]),
    ]
    assert listed["routine"] == [(RECONCILE, [str(rested.pk)])]


@pytest.mark.django_db
def test_a_worker_takes_an_urgent_change_before_a_backlog_of_routine_passes(
    broker: redis.Redis, tmp_path: Path
) -> None:
    queue = f"plinth-priority-{uuid.uuid4().hex[:8]}"
    backlog = [
        reconcile_deployment.apply_async(
            args=(str(uuid.uuid4()),), queue=queue, priority=settings.PLINTH_ROUTINE_PRIORITY
        ).id
        for _ in range(6)
    ]  # as the sweep queues them (endpoints that no longer exist: each pass is quick)
    urgent = celery_app.send_task(RECONCILE, args=[str(uuid.uuid4())], queue=queue).id
    log = tmp_path / "worker.log"
    worker = processes.start("worker", processes.engine_env(tmp_path / "local", queue), log)
    received = re.compile(rf"Task {RECONCILE}\[([0-9a-f-]+)\] received")

    def every_one() -> list[str]:
        found: list[str] = received.findall(log.read_text())
        return found if len(found) == 7 else []

    try:
        order = wait_until(every_one, "every message received", timeout=60, output=log.read_text)
    finally:
        processes.stop(worker)
        broker.delete(*priority_lists(queue))
    assert order[0] == urgent
    assert sorted(order[1:]) == sorted(backlog)
