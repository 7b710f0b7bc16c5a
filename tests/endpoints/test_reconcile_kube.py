"""Reconcile against a Kubernetes API emulator: rollouts simulated by writing pod status.

The emulator has no controllers, so the test plays the kubelet and scheduler: it writes the pods
a Deployment would have and their status, and reconcile must turn them into the right status and
timeline text.

Why the emulator (a stand-in, see tests/drivers/kube_emulator.py): reconcile's reading of pods is
checked on states written at the moment the test chooses (a crash loop beside ready pods, a pending
pod with the scheduler's message), on a foreign object under Plinth's name, on replies no real
server gives (a body and reason written to leak), and on no request reaching a refused address. The
driver on real controllers (the scheduler's own words, delete with garbage collection) is
tests/kube_real/test_endpoint_on_real_cluster.py.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from controlplane import services as platform
from controlplane.models import Role
from deployments.drivers.kube import labels as L
from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.status import ACTIVE, DEGRADED, DEPLOYING, FAILED
from tests.conftest import Cast
from tests.drivers.kube_emulator import RunningEmulator
from tests.fixtures.endpoints import NS, kubeconfig, refresh
from tests.waiting import wait_until


def put_pod(emulator: RunningEmulator, deployment: Deployment, name: str, status: dict[str, Any],
            role: str = "engine") -> None:  # fmt: skip
    labels = L.object_labels(deployment.slug, str(deployment.pk), 1, role)
    container = {"name": role, "image": "x", "ports": [{"containerPort": 30000}]}
    pod = {"metadata": {"name": name, "namespace": NS, "labels": labels},
           "spec": {"containers": [container]}, "status": status}  # fmt: skip
    emulator.put("v1", "Pod", NS, pod)


def running(ready: bool, role: str = "engine", **extra: Any) -> dict[str, Any]:
    state = extra.pop("state", {"running": {}})
    container = {"name": role, "ready": ready, "restartCount": 0, "state": state, **extra}
    return {"phase": "Running", "podIP": "10.1.2.3", "containerStatuses": [container]}


def gpu_event(pod: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{pod}.sched", "namespace": NS, "uid": "sched-1"},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": NS},
        "reason": "FailedScheduling",
        "type": "Warning",
        "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        "count": 1,
    }


def step(deployment: Deployment) -> Deployment:
    reconcile.reconcile(str(deployment.pk))
    return refresh(deployment)


@pytest.mark.django_db
def test_ready_pods_make_it_active_and_a_crash_loop_degraded(
    kube_endpoint: Deployment, emulator: RunningEmulator
) -> None:
    deployment = step(kube_endpoint)
    assert deployment.status == DEPLOYING
    assert emulator.get("apps/v1", "Deployment", NS, "kchat-engine") is not None
    put_pod(emulator, deployment, "kchat-engine-1", running(True))
    put_pod(emulator, deployment, "kchat-router-1", running(True, role="router"), role="router")
    deployment = step(deployment)
    assert deployment.status == ACTIVE
    assert deployment.router_url == f"http://kchat-router.{NS}.svc:8000"
    assert deployment.current_revision.number == 1

    crash = running(
        False,
        restartCount=3,
        state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting"}},
        lastState={"terminated": {"reason": "Error", "exitCode": 1}},
    )
    put_pod(emulator, deployment, "kchat-engine-1", crash)
    deployment = step(deployment)
    assert deployment.status == DEGRADED
    degraded = deployment.events.get(reason="Degraded")
    assert (
        "0/1 replicas ready (CrashLoopBackOff: back-off 40s restarting; last exit code 1)"
        in degraded.message
    )
    assert deployment.replica_facts[0]["restarts"] == 3


@pytest.mark.django_db
def test_an_unschedulable_first_revision_fails_with_the_schedulers_words(
    kube_endpoint: Deployment, emulator: RunningEmulator, settings: Any
) -> None:
    settings.PLINTH_STARTUP_WINDOW_S = 1
    deployment = step(kube_endpoint)
    pending = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            }
        ],
    }
    put_pod(emulator, deployment, "kchat-engine-1", pending)
    emulator.put("v1", "Event", NS, gpu_event("kchat-engine-1"))
    deployment = step(deployment)
    timeline = deployment.events.get(reason="FailedScheduling")
    assert "Insufficient nvidia.com/gpu" in timeline.message and timeline.level == "warning"
    assert deployment.replica_facts[0]["reason"] == "Unschedulable"

    wait_until(lambda: step(deployment).status == FAILED, "failed after its window", timeout=20)
    deployment = refresh(deployment)
    assert "not ready within its startup window" in deployment.failure_reason
    assert "Unschedulable: 0/3 nodes are available" in deployment.failure_reason
    assert deployment.events.filter(reason="FailedScheduling").count() == 1  # deduped


@pytest.mark.django_db
def test_a_foreign_object_fails_the_endpoint_with_a_reason(
    kube_endpoint: Deployment, emulator: RunningEmulator
) -> None:
    meta = {"name": "kchat-engine", "namespace": NS, "labels": {"team": "someone-else"}}
    emulator.put("apps/v1", "Deployment", NS, {"metadata": meta, "spec": {}})
    deployment = step(kube_endpoint)
    assert deployment.status == FAILED
    assert "not managed by Plinth" in deployment.failure_reason
    assert deployment.events.get(reason="Failed").level == "error"


@pytest.mark.django_db
def test_deleting_removes_every_object_then_the_row(
    cast: Cast, kube_endpoint: Deployment, emulator: RunningEmulator
) -> None:
    step(kube_endpoint)
    services.delete_deployment(cast.actor(cast.alice, cast.acme), kube_endpoint.pk)
    wait_until(lambda: not reconcile.reconcile(str(kube_endpoint.pk)), "deleted", timeout=90)
    assert not Deployment.objects.filter(pk=kube_endpoint.pk).exists()
    assert emulator.get("apps/v1", "Deployment", NS, "kchat-engine") is None
    assert emulator.get("v1", "Service", NS, "kchat-router") is None


@pytest.mark.django_db
def test_an_unusable_kubeconfig_fails_the_endpoint_without_echoing_it(
    cast: Cast, kube_endpoint: Deployment
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    platform.set_secret(actor, name="emu-kubeconfig", value="server: [not, a, kubeconfig")
    deployment = step(kube_endpoint)
    assert deployment.status == FAILED
    assert deployment.failure_reason.startswith("the cluster's kubeconfig is")
    assert "not, a, kubeconfig" not in deployment.failure_reason


@pytest.mark.django_db
def test_a_kubeconfig_that_runs_a_command_is_refused_and_nothing_runs(
    cast: Cast, kube_endpoint: Deployment, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    actor = cast.actor(cast.alice, cast.acme)
    hostile = f"""
apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://k8s.example.com"}}}}]
users:
- name: u
  user:
    exec: {{apiVersion: client.authentication.k8s.io/v1, command: touch, args: ["{marker}"]}}
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
"""
    # Swapped in after the cluster was attached, so only the worker's own check stands between.
    platform.set_secret(actor, name="emu-kubeconfig", value=hostile)
    deployment = step(kube_endpoint)
    assert deployment.status == FAILED
    assert "users[].user.exec is not allowed" in deployment.failure_reason
    assert not marker.exists()


SENTINEL = "SENTINEL-51c2-from-the-api-server"


@pytest.mark.django_db
@pytest.mark.parametrize("status", [403, 422])
def test_what_the_api_server_replies_is_never_shown_or_logged(
    cast: Cast,
    kube_endpoint: Deployment,
    emulator: RunningEmulator,
    status: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = f'{{"kind": "Status", "message": "{SENTINEL}", "reason": "{SENTINEL}"}}'
    emulator.inject("PATCH", "deployments/kchat-engine", status, body=body, reason=SENTINEL)
    with caplog.at_level(logging.DEBUG):
        deployment = step(kube_endpoint)
    assert deployment.status == FAILED
    assert deployment.failure_reason.startswith(f"Kubernetes API {status}: ")
    assert SENTINEL not in deployment.failure_reason
    assert not any(SENTINEL in e.message for e in deployment.events.all())
    assert SENTINEL not in caplog.text
    # What a viewer reads: the REST API and the console.
    key = platform.create_api_key(
        cast.actor(cast.alice, cast.acme), name="viewer", kind="management", role=Role.VIEWER
    ).plaintext
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    for path in (f"deployments/{deployment.pk}", f"deployments/{deployment.pk}/events"):
        response = api.get(f"/api/v1/{path}")
        assert response.status_code == 200 and SENTINEL.encode() not in response.content
    console = Client()
    console.force_login(cast.carol)
    page = console.get(f"/endpoints/{deployment.slug}/")
    assert page.status_code == 200 and SENTINEL.encode() not in page.content


@pytest.mark.django_db
@pytest.mark.parametrize("host", ["localhost", "2130706433", "169.254.169.254", "[::1]"])
def test_a_kubeconfig_swapped_to_a_refused_address_never_reaches_it(
    cast: Cast, kube_endpoint: Deployment, emulator: RunningEmulator, host: str
) -> None:
    port = emulator.url.rsplit(":", 1)[1]
    actor = cast.actor(cast.alice, cast.acme)
    # Swapped in after the cluster was saved, so only the worker's own checks stand between.
    platform.set_secret(actor, name="emu-kubeconfig", value=kubeconfig(f"http://{host}:{port}"))
    deployment = step(kube_endpoint)
    assert deployment.status == FAILED
    assert "clusters[].cluster.server: the host" in deployment.failure_reason
    assert host.strip("[]") not in deployment.failure_reason
    assert not emulator.emulator._requests
