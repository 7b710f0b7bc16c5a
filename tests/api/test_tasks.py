"""Reconcile work is queued on the real broker after commit, exactly once per change, and never
for a refused or no-op request; the gateway is told after commit too."""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from django.conf import settings

from controlplane import redis_clients
from deployments.endpoints import changes
from deployments.endpoints.models import Deployment
from deployments.endpoints.tasks import reconcile_deployment
from tests.api.conftest import SPEC, Clients, spec_with
from tests.conftest import queued


def test_creating_queues_one_reconcile_after_commit(
    api: Clients, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    changes = broker.pubsub(ignore_subscribe_messages=True)
    changes.subscribe(redis_clients.changes_channel(broker))
    with django_capture_on_commit_callbacks() as callbacks:
        created = api.dave.post("deployments", {"slug": "chat", "spec": SPEC}).json()
        assert queued(broker) == []  # not before the transaction commits
    for callback in callbacks:
        callback()
    assert queued(broker) == [("deployments.reconcile_deployment", [created["id"]])]
    ours: list[dict[str, str]] = []
    deadline = time.monotonic() + 10  # a wait, not an assertion on time
    while time.monotonic() < deadline:
        note = changes.get_message(timeout=0.5)
        if note is None and ours:
            break  # quiet after our notification: no second one came
        if note is not None and created["id"] in str(note["data"]):
            ours.append(json.loads(note["data"]))
    assert ours == [{"kind": "deployment", "id": created["id"]}]
    changes.close()


def test_every_change_queues_exactly_one_reconcile(
    api: Clients, endpoint: Deployment, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    calls = [
        ("PATCH", "deployments/chat", {"spec": spec_with(parallelism={"tp": 2}),
                                       "base_revision": 1}),
        ("POST", "deployments/chat/rollback", {"to_revision": 1}),
        ("POST", "deployments/chat/scale", {"replicas": 2}),
        ("POST", "deployments/chat/stop", {}),
        ("POST", "deployments/chat/start", {}),
        ("DELETE", "deployments/chat", None),
    ]  # fmt: skip
    for method, path, body in calls:
        broker.delete(settings.CELERY_TASK_DEFAULT_QUEUE)
        with django_capture_on_commit_callbacks(execute=True):
            assert api.dave.request(method, path, body).status_code < 300, path
        assert queued(broker) == [("deployments.reconcile_deployment", [str(endpoint.pk)])], path


def test_refused_and_no_op_requests_queue_nothing(
    api: Clients, endpoint: Deployment, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    calls = [
        ("PATCH", "deployments/chat", {"spec": SPEC, "base_revision": 1}),  # identical settings
        ("PATCH", "deployments/chat", {"spec": SPEC, "base_revision": 7}),  # stale
        ("POST", "deployments/chat/rollback", {"to_revision": 1}),  # already the target
        ("POST", "deployments/chat/scale", {"replicas": 1}),  # already so
        ("POST", "deployments/chat/scale", {"replicas": 99}),  # refused
        ("POST", "deployments/chat/start", {}),  # already running
    ]
    with django_capture_on_commit_callbacks(execute=True):
        for method, path, body in calls:
            api.dave.request(method, path, body)
    assert queued(broker) == []


def test_the_queued_name_is_a_registered_task() -> None:
    from controlplane.celery import app

    app.autodiscover_tasks(force=True)
    # services send it by this name and never import the task (deployments-layers contract).
    assert reconcile_deployment.name == changes.RECONCILE_TASK
    assert reconcile_deployment.name in app.tasks
