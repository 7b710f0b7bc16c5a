"""Why an endpoint does not serve, in the real system's own words, from the cluster to what a
person reads: the real scheduler's verdict on a taint no toleration covers, the real Deployment
controller's ``ProgressDeadlineExceeded``, and a crash loop (kwok, playing the kubelet, writes it
for pods carrying a test label: tests/kube_real/kwok-test-stages.yaml). Each goes through the
worker's own reconcile pass (the driver as the worker's ServiceAccount) into the endpoint's
failure reason and timeline, and out through the REST API's detail and events and the console's
page. (Not enough GPUs and no node of the GPU type: test_endpoint_on_real_cluster.py.)
"""

from __future__ import annotations

import html
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from controlplane import services as platform
from controlplane.models import Role
from deployments.clusters import services as cluster_services
from deployments.drivers import base
from deployments.drivers.kube.client import KubeClient
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.render import KubeOptions
from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.status import FAILED
from tests.conftest import Cast
from tests.kube_real.conftest import GPU_NODES, SETTLE_S, Admin
from tests.kube_real.test_endpoint_on_real_cluster import numbered
from tests.waiting import wait_until

SPEC: dict[str, Any] = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "chat"},
    "hardware": {"gpu": "H100-SXM"},
}
# Labels that make kwok's test stages fail an engine pod (the stages file says how).
CRASH_LOOP = {"test.plinth/crash-loop": "true"}
NEVER_READY = {"test.plinth/never-ready": "true"}


@pytest.fixture
def on_real_cluster(settings: Any) -> None:
    # The API server listens on loopback, which tenants' kubeconfigs may not reach otherwise.
    settings.PLINTH_KUBE_ALLOW_HOSTS = ["127.0.0.1"]
    # Long: a test ends a rollout's window itself (``window_passes``) once the cause is seen.
    settings.PLINTH_STARTUP_WINDOW_S = 3600


def endpoint_on(
    cast: Cast, kubeconfig: str, namespace: str, cluster_settings: dict[str, Any]
) -> Deployment:
    """An endpoint on the real cluster, reached with the worker's ServiceAccount token, with the
    cluster's operator settings ``cluster_settings``."""
    actor = cast.actor(cast.alice, cast.acme)
    secret = platform.set_secret(actor, name="real-kubeconfig", value=kubeconfig)
    cluster = cluster_services.create_cluster(
        actor,
        name="real",
        namespace=namespace,
        kubeconfig_secret_id=secret.pk,
        settings=cluster_settings,
    )
    return services.create_deployment(
        actor, slug="chat", name="Chat", spec=SPEC, cluster_id=cluster.pk, replicas=1
    )


def step(deployment: Deployment) -> Deployment:
    """One reconcile pass, as the worker runs it; the row as it left it."""
    reconcile.reconcile(str(deployment.pk))
    return Deployment.objects.select_related("target_revision", "current_revision").get(
        pk=deployment.pk
    )


def step_until(deployment: Deployment, holds: Any, what: str) -> Deployment:
    def passed() -> Deployment | None:
        after = step(deployment)
        return after if holds(after) else None

    found = wait_until(passed, what, SETTLE_S, interval=1.0)
    assert isinstance(found, Deployment)
    return found


def replica_says(reason: str) -> Any:
    def holds(deployment: Deployment) -> bool:
        return any(r.get("reason") == reason for r in deployment.replica_facts or [])

    return holds


def window_passes(deployment: Deployment) -> Deployment:
    """The rollout's startup window ends now (a clock moved on, not waited for): the next pass
    judges the first revision as it would past its window."""
    Deployment.objects.filter(pk=deployment.pk).update(rollout_deadline=timezone.now())
    return step(deployment)


def shown(cast: Cast, deployment: Deployment) -> dict[str, str]:
    """What a viewer reads about the endpoint: the API's detail and events, the console page."""
    key = platform.create_api_key(
        cast.actor(cast.alice, cast.acme), name="viewer", kind="management", role=Role.VIEWER
    ).plaintext
    api = Client(HTTP_AUTHORIZATION=f"Bearer {key}")
    detail = api.get(f"/api/v1/deployments/{deployment.pk}")
    events = api.get(f"/api/v1/deployments/{deployment.pk}/events")
    console = Client()
    console.force_login(cast.carol)
    page = console.get(f"/endpoints/{deployment.slug}/")
    assert detail.status_code == events.status_code == page.status_code == 200
    return {
        "reason": detail.json()["failure_reason"],
        "events": " | ".join(f"{e['reason']}: {e['message']}" for e in events.json()["items"]),
        "page": html.unescape(page.content.decode()),
    }


TAINTED = f"{sum(GPU_NODES.values())} node(s) had untolerated taint(s)"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("cluster_settings", "scheduler", "hint"),
    [
        # The GPU nodes carry the device plugin's taint, which the settings no longer tolerate:
        # the scheduler (this release names no taint) passes them over, Plinth says where
        # tolerations are set.
        ({"gpu_tolerations": []}, TAINTED, "gpu_tolerations"),
        # The cluster maps H100 to a product no node carries.
        (
            {"gpu_map": {"H100-SXM": {"values": ["NVIDIA-H100-NONE"]}}},
            "didn't match Pod's node affinity/selector",
            "no node with 1 free H100-SXM GPU(s)",
        ),
    ],
    ids=["untolerated-taint", "no-node-of-the-type"],
)
def test_an_unschedulable_first_revision_fails_in_the_schedulers_words(
    cast: Cast,
    worker_kubeconfig: str,
    namespace: str,
    on_real_cluster: None,
    cluster_settings: dict[str, Any],
    scheduler: str,
    hint: str,
) -> None:
    endpoint = endpoint_on(cast, worker_kubeconfig, namespace, cluster_settings)
    step_until(endpoint, replica_says("Unschedulable"), "the scheduler's verdict is observed")
    failed = window_passes(endpoint)
    assert failed.status == FAILED
    said = shown(cast, failed)
    assert scheduler in said["reason"] and "nodes are available" in said["reason"]
    assert hint in said["reason"]
    assert "FailedScheduling: " in said["events"] and scheduler in said["events"]
    assert scheduler in said["page"] and hint in said["page"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("ended", "exit_code", "reason"),
    [("Error", "3", "CrashLoopBackOff"), ("OOMKilled", "137", "OOMKilled")],
)
def test_a_crash_loop_shows_the_kubelets_words_and_the_exit_code(
    cast: Cast,
    worker_kubeconfig: str,
    namespace: str,
    on_real_cluster: None,
    ended: str,
    exit_code: str,
    reason: str,
) -> None:
    annotations = {"test.plinth/exit-code": exit_code, "test.plinth/crash-reason": ended}
    settings = {"labels": CRASH_LOOP, "annotations": annotations}
    endpoint = endpoint_on(cast, worker_kubeconfig, namespace, settings)
    seen = step_until(endpoint, replica_says(reason), "the crash loop is observed")
    engine = next(r for r in seen.replica_facts if r["reason"] == reason)
    assert engine["restarts"] == 3 and engine["phase"] == "failed"
    failed = window_passes(endpoint)
    assert failed.status == FAILED
    said = shown(cast, failed)
    words = f"{reason}: back-off 40s restarting failed container=engine; last exit code {exit_code}"
    assert words in said["reason"]
    assert "BackOff: " in said["events"]
    assert "Back-off restarting failed container engine" in said["events"]
    assert words in said["page"]


@pytest.mark.django_db
def test_a_progress_deadline_exceeded_fails_the_rollout_in_the_controllers_words(
    cast: Cast, worker_kubeconfig: str, namespace: str, admin: Admin, on_real_cluster: None
) -> None:
    """The engines run but never become ready (loading without end); Plinth's own window is
    long, so the Deployment controller's deadline (made short here) is what ends the rollout."""
    endpoint = endpoint_on(cast, worker_kubeconfig, namespace, {"labels": NEVER_READY})
    step(endpoint)
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/chat-engine"
    live = admin.call("GET", path)
    assert live["spec"]["progressDeadlineSeconds"] >= 600  # as rendered: minutes, not seconds
    admin.call(
        "PATCH",
        path,
        {"spec": {"progressDeadlineSeconds": 1}},
        content_type="application/merge-patch+json",
    )
    failed = step_until(endpoint, lambda d: d.status == FAILED, "the rollout is given up")
    said = shown(cast, failed)
    assert "ProgressDeadlineExceeded" in said["reason"]
    assert 'ReplicaSet "chat-engine-' in said["reason"]
    assert "has timed out progressing" in said["reason"]
    assert "ProgressDeadlineExceeded: chat-engine: ReplicaSet" in said["events"]
    assert "has timed out progressing" in said["page"]


def test_a_stalled_revision_does_not_fail_the_next_one(
    worker_client: KubeClient, ref: base.DeploymentRef, admin: Admin
) -> None:
    """The controller's verdict is about the template it last saw: another revision applied
    (which also puts the rendered deadline back) starts afresh. The moment between the apply
    and the controller's look is too short to catch here: tests/drivers/
    test_kube_stalled_rollouts.py holds that case."""
    cluster = KubeOptions().cluster.model_copy(update={"labels": NEVER_READY})
    driver = KubeDriver(worker_client, KubeOptions(cluster=cluster), has_lws=False)
    driver.apply(ref, numbered("llama-3.1-8b-h100", 1))
    path = f"/apis/apps/v1/namespaces/{ref.namespace}/deployments/chat-engine"
    admin.call(
        "PATCH",
        path,
        {"spec": {"progressDeadlineSeconds": 1}},
        content_type="application/merge-patch+json",
    )
    stalled = wait_until(
        lambda: driver.observe(ref).failure(1), "revision 1 stalls", SETTLE_S, interval=1.0
    )
    assert stalled is not None and stalled.reason == "ProgressDeadlineExceeded"
    driver.apply(ref, numbered("llama-3.1-8b-ngram-h100", 2))
    assert driver.observe(ref).failure(2) is None

    def seen_by_controller() -> bool:
        live = admin.call("GET", path)
        return bool(live["status"].get("observedGeneration") == live["metadata"]["generation"])

    wait_until(seen_by_controller, "the controller sees revision 2", SETTLE_S, interval=0.5)
    assert driver.observe(ref).failure(2) is None
