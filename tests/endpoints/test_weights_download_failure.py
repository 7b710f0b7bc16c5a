"""A weights download Job that fails fails its revision's rollout (or aborts its canary), in
the Job's own words.

Against the Kubernetes API emulator, through the real reconcile pass: the cluster keeps its model
cache on a claim, so a Job downloads the weights and the engine pods wait in ``wait-for-weights``
for it. The emulator runs no controllers: the test plays the Job controller (the Job's Failed
condition, its failed pod with the last lines of its log as termination message) and the
kubelet (pods).

Why the emulator (a stand-in, see tests/drivers/kube_emulator.py): the failure's words are the
test's to choose (the Job's condition, its pod's termination message), and the engine pods stay in
``wait-for-weights`` (kwok runs no init containers) until the test says. A download Job succeeding
on the real Job controller is
tests/kube_real/test_endpoint_on_real_cluster.py::test_weights_download_job_into_a_claim_then_ready.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from controlplane import services as platform
from controlplane.models import Role
from deployments.clusters import services as cluster_services
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import KubeClient, kind_of
from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.status import ACTIVE, FAILED, STOPPED
from tests.conftest import Cast
from tests.drivers.kube_emulator import CLIENT_TIMEOUT_S, RunningEmulator
from tests.fixtures.endpoints import NS, refresh, small_spec

HUB_SAYS = (
    "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. Repository Not Found for "
    "url: https://huggingface.co/api/models/meta-llama/Llama-3.1-8B-Instruct/revision/main."
)
# What the Job controller labels each pod of a Job with (Kubernetes 1.27+).
JOB_UID = "batch.kubernetes.io/controller-uid"
GAVE_UP = {
    "type": "Failed",
    "status": "True",
    "reason": "BackoffLimitExceeded",
    "message": "Job has reached the specified backoff limit",
}


@pytest.fixture
def on_a_claim(cast: Cast, kube_endpoint: Deployment) -> Deployment:
    """The endpoint, on a cluster whose model cache is a claim: a Job downloads the weights."""
    actor = cast.actor(cast.alice, cast.acme)
    settings = {"model_cache": {"type": "claim", "claim_name": "models"}}
    cluster_services.update_cluster(actor, kube_endpoint.cluster_id, settings=settings)
    return kube_endpoint


def step(deployment: Deployment) -> Deployment:
    reconcile.reconcile(str(deployment.pk))
    return refresh(deployment)


def download_jobs(emulator: RunningEmulator) -> list[dict[str, Any]]:
    client = KubeClient.for_host(emulator.url, timeout=CLIENT_TIMEOUT_S)
    try:
        return client.list(kind_of("batch/v1", "Job"), NS)
    finally:
        client.close()


def the_job(emulator: RunningEmulator) -> dict[str, Any]:
    [job] = download_jobs(emulator)
    return job


def conditions(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list((job.get("status") or {}).get("conditions") or [])


def finish(emulator: RunningEmulator, job: dict[str, Any], condition: dict[str, Any]) -> None:
    """As the Job controller ends a Job: its condition in its status."""
    emulator.put("batch/v1", "Job", NS, {**job, "status": {"conditions": [condition]}})


def fail(emulator: RunningEmulator, job: dict[str, Any], condition: dict[str, Any]) -> None:
    """The Job gives up: its last pod failed with the hub's words (FallbackToLogsOnError)."""
    meta = job["metadata"]
    labels = {**job["spec"]["template"]["metadata"]["labels"], JOB_UID: meta["uid"]}
    terminated = {"exitCode": 1, "reason": "Error", "message": f"Traceback ...\n{HUB_SAYS}\n"}
    pod = {
        "metadata": {"name": f"{meta['name']}-x1", "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": "weights-0", "image": "x"}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "weights-0", "state": {"terminated": terminated}}],
        },
    }
    emulator.put("v1", "Pod", NS, pod)
    finish(emulator, job, condition)


def put_pod(
    emulator: RunningEmulator, deployment: Deployment, name: str, revision: int, *,
    ready: bool, role: str = "engine",
) -> None:  # fmt: skip
    labels = L.object_labels(deployment.slug, str(deployment.pk), revision, role)
    if ready:
        container = {"name": role, "ready": True, "started": True, "state": {"running": {}}}
        status = {"phase": "Running", "podIP": "10.1.2.3", "containerStatuses": [container]}
    else:  # held back by its init container until the download's markers are there
        waiting = {
            "name": role,
            "ready": False,
            "state": {"waiting": {"reason": "PodInitializing"}},
        }
        init = {"name": "wait-for-weights", "ready": False, "state": {"running": {}}}
        status = {
            "phase": "Pending",
            "initContainerStatuses": [init],
            "containerStatuses": [waiting],
        }
    pod = {
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": role, "image": "x", "ports": [{"containerPort": 30000}]}]},
        "status": status,
    }
    emulator.put("v1", "Pod", NS, pod)


def engine_template_revision(emulator: RunningEmulator) -> str:
    engine = emulator.get("apps/v1", "Deployment", NS, "kchat-engine")
    assert engine is not None
    return str(engine["spec"]["template"]["metadata"]["labels"][L.REVISION])


def assert_in_the_jobs_words(text: str) -> None:
    assert "BackoffLimitExceeded" in text, text
    assert "Job has reached the specified backoff limit" in text, text
    assert "weights-0 exited with code 1" in text and "Repository Not Found" in text, text


@pytest.mark.django_db
def test_a_failed_download_fails_the_first_deploy_and_an_edit_downloads_afresh(
    cast: Cast, on_a_claim: Deployment, emulator: RunningEmulator
) -> None:
    deployment = step(on_a_claim)
    job = the_job(emulator)
    put_pod(emulator, deployment, "kchat-engine-1", 1, ready=False)
    fail(emulator, job, GAVE_UP)

    # Failed at once, not after its startup window: nothing will make it ready.
    deployment = step(deployment)
    assert deployment.status == FAILED
    assert deployment.failure_reason.startswith("revision 1 will not become ready (")
    assert_in_the_jobs_words(deployment.failure_reason)
    failed = deployment.events.get(reason="Failed")
    assert failed.level == "error" and failed.message == deployment.failure_reason

    # Later passes neither retry the Job nor repeat the line.
    deployment = step(deployment)
    again = the_job(emulator)
    assert again["metadata"]["uid"] == job["metadata"]["uid"] and conditions(again) == [GAVE_UP]
    assert deployment.status == FAILED and deployment.events.filter(reason="Failed").count() == 1

    # What the API says, to a viewer.
    key = platform.create_api_key(
        cast.actor(cast.alice, cast.acme), name="viewer", kind="management", role=Role.VIEWER
    ).plaintext
    body = Client(HTTP_AUTHORIZATION=f"Bearer {key}").get(f"/api/v1/deployments/{deployment.pk}")
    assert body.status_code == 200
    assert_in_the_jobs_words(body.json()["failure_reason"])

    # An edit (the same model, so the same Job name) gets a download of its own.
    actor = cast.actor(cast.alice, cast.acme)
    services.update_settings(
        actor, deployment.pk, spec=small_spec(PLINTH_SIM_TIME_SCALE="2"), base_revision=1
    )
    deployment = step(deployment)
    fresh = the_job(emulator)
    assert fresh["metadata"]["name"] == job["metadata"]["name"]
    assert fresh["metadata"]["uid"] != job["metadata"]["uid"] and conditions(fresh) == []
    assert fresh["metadata"]["labels"][L.REVISION] == "2"
    assert deployment.status != FAILED and deployment.failure_reason == ""


@pytest.mark.django_db
def test_a_failed_download_rolls_back_to_the_serving_revision(
    cast: Cast, on_a_claim: Deployment, emulator: RunningEmulator
) -> None:
    deployment = step(on_a_claim)
    finish(emulator, the_job(emulator), {"type": "Complete", "status": "True"})
    put_pod(emulator, deployment, "kchat-engine-1", 1, ready=True)
    put_pod(emulator, deployment, "kchat-router-1", 1, ready=True, role="router")
    deployment = step(deployment)
    assert deployment.status == ACTIVE and deployment.current_revision.number == 1

    # Revision 2 pins another revision of the model: a Job of its own, which fails.
    actor = cast.actor(cast.alice, cast.acme)
    pinned = small_spec()
    pinned["model"]["revision"] = "0e9e39f"
    services.update_settings(actor, deployment.pk, spec=pinned, base_revision=1)
    deployment = step(deployment)
    assert engine_template_revision(emulator) == "2"
    job = the_job(emulator)  # revision 1's was pruned
    assert job["metadata"]["labels"][L.REVISION] == "2"
    put_pod(emulator, deployment, "kchat-engine-2", 2, ready=False)
    fail(emulator, job, GAVE_UP)

    deployment = step(deployment)
    rolled_back = deployment.events.get(reason="RolloutFailed", revision_number=2)
    assert rolled_back.message.startswith("revision 2 will not become ready (")
    assert rolled_back.message.endswith("; rolled back: revision 1 keeps serving")
    assert_in_the_jobs_words(rolled_back.message)
    assert deployment.status == ACTIVE and deployment.current_revision.number == 1
    assert deployment.target_revision.number == 2
    assert deployment.failure_reason == rolled_back.message  # why the target does not serve
    assert engine_template_revision(emulator) == "1"  # revision 1's pods, as they were

    # Not tried again: one line, and revision 1 stays placed.
    deployment = step(deployment)
    assert deployment.events.filter(reason="RolloutFailed").count() == 1
    assert engine_template_revision(emulator) == "1"
    assert [j["metadata"]["labels"][L.REVISION] for j in download_jobs(emulator)] == ["1"]


@pytest.mark.django_db
def test_a_stop_and_start_after_a_failed_download_tries_it_afresh(
    cast: Cast, on_a_claim: Deployment, emulator: RunningEmulator
) -> None:
    deployment = step(on_a_claim)
    job = the_job(emulator)
    fail(emulator, job, {**GAVE_UP, "reason": "DeadlineExceeded", "message": "too long"})
    deployment = step(deployment)
    assert deployment.status == FAILED and "DeadlineExceeded: " in deployment.failure_reason

    actor = cast.actor(cast.alice, cast.acme)
    services.stop(actor, deployment.pk)
    deployment = step(deployment)
    assert deployment.status == STOPPED
    assert emulator.get("apps/v1", "Deployment", NS, "kchat-engine") is None
    services.start(actor, deployment.pk)
    deployment = step(deployment)
    assert deployment.status != FAILED and deployment.failure_reason == ""
    assert engine_template_revision(emulator) == "1"  # the engines are back
    fresh = the_job(emulator)
    assert fresh["metadata"]["uid"] != job["metadata"]["uid"] and conditions(fresh) == []


@pytest.mark.django_db
def test_a_canary_whose_download_fails_is_aborted_in_the_jobs_words(
    cast: Cast, on_a_claim: Deployment, emulator: RunningEmulator
) -> None:
    from deployments.experiments.canary import services as canary_services
    from deployments.experiments.models import CanaryStatus
    from deployments.experiments.tasks import watch_canaries

    deployment = step(on_a_claim)
    finish(emulator, the_job(emulator), {"type": "Complete", "status": "True"})
    put_pod(emulator, deployment, "kchat-engine-1", 1, ready=True)
    put_pod(emulator, deployment, "kchat-router-1", 1, ready=True, role="router")
    deployment = step(deployment)
    assert deployment.status == ACTIVE

    # The canary pins another revision of the model: its pool downloads it, and that fails.
    pinned = small_spec()
    pinned["model"]["revision"] = "0e9e39f"
    actor = cast.actor(cast.alice, cast.acme)
    canary = canary_services.start_canary(actor, deployment.pk, spec=pinned, weight=20)
    deployment = step(deployment)
    pool = f"{deployment.pk}-r{canary.revision.number}"
    [job] = [j for j in download_jobs(emulator) if j["metadata"]["labels"][L.DEPLOYMENT] == pool]
    fail(emulator, job, GAVE_UP)
    deployment = step(deployment)
    # Aborted at the watcher's next pass, long before any startup window ends.
    assert watch_canaries(canary.started_at.isoformat())["aborted"] == 1
    canary.refresh_from_db()
    assert canary.status == CanaryStatus.ABORTED
    assert canary.reason.startswith("its pool will not become ready (")
    assert_in_the_jobs_words(canary.reason)
    deployment = refresh(deployment)
    assert deployment.status == ACTIVE and deployment.current_revision.number == 1
