"""Endpoints at rest cost nothing until something changes, and the gateway hears of a pass only
when the pass changed what it routes by.

A stopped or scaled-to-zero endpoint that a pass found at rest gets no next pass: the sweep
never queues it again until a change (a person's, the autoscaler's, a wake-up) makes it due. A
running endpoint keeps its settled pass (its engines can fail by themselves). Reconcile runs
against the Kubernetes API emulator, the sweep against the real broker, and notifications are
read from the real Redis channel the gateway subscribes to.

Why the emulator (a stand-in, see tests/drivers/kube_emulator.py): the test plays the kubelet,
making the endpoint's pods ready, crashed or gone at the moment it chooses, and counts the passes
and notifications around each change; the real Deployment controller and kwok would recreate and
ready pods on their own time. An endpoint becoming ready, stopping and starting on real controllers
is tests/kube_real/test_endpoint_on_real_cluster.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings
from django.utils import timezone

from controlplane import redis_clients
from deployments.autoscaling import services as autoscaler
from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.endpoints.tasks import make_local_endpoints_due, sweep
from deployments.status import ACTIVE, SCALED_TO_ZERO, STOPPED
from tests.conftest import Cast, priority_lists, queued
from tests.drivers.kube_emulator import RunningEmulator
from tests.endpoints.test_reconcile_kube import put_pod, running
from tests.fixtures.endpoints import NS, refresh, small_spec

RECONCILE = "deployments.reconcile_deployment"
pytestmark = pytest.mark.django_db


def step(deployment: Deployment) -> Deployment:
    reconcile.reconcile(str(deployment.pk))
    return refresh(deployment)


def serve(emulator: RunningEmulator, deployment: Deployment) -> Deployment:
    """Reconciled until active: the emulator plays the kubelet with one ready engine and router."""
    deployment = step(deployment)
    put_pod(emulator, deployment, "kchat-engine-1", running(True))
    put_pod(emulator, deployment, "kchat-router-1", running(True, role="router"), role="router")
    deployment = step(deployment)
    assert deployment.status == ACTIVE and deployment.settled
    return deployment


def remove_pods(emulator: RunningEmulator) -> None:
    """The kubelet's part of a stop: the pods go once their workloads are deleted."""
    for name in ("kchat-engine-1", "kchat-router-1"):
        url = f"{emulator.url}/api/v1/namespaces/{NS}/pods/{name}"
        httpx.delete(url, headers={"Authorization": "Bearer x"}).raise_for_status()


def swept(broker: redis.Redis) -> set[str]:
    """Ids the sweep queued now."""
    sweep()
    return {args[0] for name, args in queued(broker) if name == RECONCILE}


def make_due(deployment: Deployment) -> None:
    """As if its next pass were due now (time passing, without waiting for it)."""
    Deployment.objects.filter(pk=deployment.pk, next_reconcile_at__isnull=False).update(
        next_reconcile_at=timezone.now()
    )


def test_a_stopped_endpoint_at_rest_gets_no_pass_until_it_is_started(
    cast: Cast, kube_endpoint: Deployment, emulator: RunningEmulator, broker: redis.Redis
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    serve(emulator, kube_endpoint)
    services.stop(actor, kube_endpoint.pk)
    remove_pods(emulator)
    stopped = step(kube_endpoint)
    assert stopped.status == STOPPED and stopped.settled
    assert stopped.next_reconcile_at is None

    make_due(stopped)
    assert str(stopped.pk) not in swept(broker)  # however often the sweep runs
    broker.delete(*priority_lists(settings.CELERY_TASK_DEFAULT_QUEUE))

    services.start(actor, kube_endpoint.pk)  # a change makes it due at once
    due = refresh(kube_endpoint).next_reconcile_at
    assert due is not None and due <= timezone.now()
    assert str(kube_endpoint.pk) in swept(broker)


def test_a_scaled_to_zero_endpoint_at_rest_gets_no_pass_until_it_is_woken(
    kube_endpoint: Deployment, emulator: RunningEmulator, broker: redis.Redis
) -> None:
    serve(emulator, kube_endpoint)
    assert autoscaler.autoscale_to(kube_endpoint.pk, 0, "idle", {}, expected=1)
    remove_pods(emulator)
    idle = step(kube_endpoint)
    assert idle.status == SCALED_TO_ZERO and idle.settled
    assert idle.next_reconcile_at is None
    assert str(idle.pk) not in swept(broker)

    assert autoscaler.wake(kube_endpoint.pk)
    assert str(kube_endpoint.pk) in swept(broker)


def test_a_running_endpoint_keeps_its_settled_pass(
    kube_endpoint: Deployment, emulator: RunningEmulator
) -> None:
    active = serve(emulator, kube_endpoint)
    assert active.next_reconcile_at is not None and active.observed_at is not None
    wait = (active.next_reconcile_at - active.observed_at).total_seconds()
    assert wait == settings.PLINTH_SETTLED_RECONCILE_S


@pytest.fixture
def notifications() -> Iterator[redis.client.PubSub]:
    """A subscriber to the gateway's change channel on the real Redis."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(redis_clients.changes_channel(client))
    pubsub.get_message(timeout=1)  # the subscription's confirmation
    yield pubsub
    pubsub.close()
    client.close()


def heard(pubsub: redis.client.PubSub, deployment: Deployment) -> int:
    """Notifications naming this endpoint received so far. Other tests may share the channel:
    tests/controlplane/test_redis_clients.py, run beside this side on the next database, sends
    a plain-text fence on this one's channel; only this endpoint's notifications count."""
    count = 0
    while (message := pubsub.get_message(timeout=0.2)) is not None:
        try:
            body: Any = json.loads(message["data"])
        except ValueError:
            continue  # not a change notification: another test's marker
        count += body == {"kind": "deployment", "id": str(deployment.pk)}
    return count


def test_a_pass_notifies_the_gateway_only_when_what_it_routes_by_changed(
    kube_endpoint: Deployment,
    emulator: RunningEmulator,
    notifications: redis.client.PubSub,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        active = serve(emulator, kube_endpoint)
    assert heard(notifications, active) >= 1  # deploying, then serving: the routes changed

    with django_capture_on_commit_callbacks(execute=True):
        for _ in range(5):
            step(active)  # settled passes that find everything as it was
    assert heard(notifications, active) == 0

    crashed = running(False, state={"waiting": {"reason": "CrashLoopBackOff", "message": "x"}})
    put_pod(emulator, active, "kchat-engine-1", crashed)
    with django_capture_on_commit_callbacks(execute=True):
        degraded = step(active)
    assert degraded.ready_replicas == 0
    assert heard(notifications, active) == 1


def test_a_change_that_leaves_the_routes_as_they_were_notifies_no_one(
    cast: Cast,
    kube_endpoint: Deployment,
    emulator: RunningEmulator,
    notifications: redis.client.PubSub,
    django_capture_on_commit_callbacks: Any,
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    active = serve(emulator, kube_endpoint)
    assert active.target_revision is not None
    spec = active.target_revision.spec
    with django_capture_on_commit_callbacks(execute=True):
        services.update_settings(actor, active.pk, spec=spec, base_revision=1, name="Renamed")
    assert heard(notifications, active) == 0  # a new name: nothing the gateway routes by
    with django_capture_on_commit_callbacks(execute=True):
        services.stop(actor, active.pk)
    assert heard(notifications, active) == 1


def test_a_starting_worker_leaves_local_endpoints_at_rest_alone(cast: Cast) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    resting, busy = (
        services.create_deployment(actor, slug=slug, name=slug, spec=small_spec())
        for slug in ("resting", "busy")
    )
    later = timezone.now() + timedelta(hours=1)
    Deployment.objects.filter(pk=resting.pk).update(next_reconcile_at=None)
    Deployment.objects.filter(pk=busy.pk).update(next_reconcile_at=later)

    assert make_local_endpoints_due() == 1
    assert refresh(resting).next_reconcile_at is None  # nothing of it ran to be stopped
    due = refresh(busy).next_reconcile_at
    assert due is not None and due <= timezone.now()  # observed at once after a restart
