"""Every setting a person can change reaches the real cluster, including those that land on a
field Kubernetes never lets change (a Deployment's selector, a Job's pod template, a claim's
spec, a Service's cluster IP): the edit is applied (a new object where an update is refused), a
second pass writes nothing (no 422 retried forever), and every object of the endpoint ends at
the new revision (nothing left half-updated).

Writes are counted by a client that records what the driver sends and sends it: the API
server's answers are the real ones. LeaderWorkerSet (a replica becoming multi-node) is left to
the tests that run its controller; this cluster serves no LWS CRD.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from deployments.cluster_settings import ClusterSettings, SharedClaimCache
from deployments.drivers import base
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import KubeClient, kind_of
from deployments.drivers.kube.driver import OWNED_KINDS, KubeDriver
from deployments.drivers.kube.render import KubeOptions
from runtime import launch
from runtime.spec import RuntimeSpec
from tests.drivers.reference_specs import load_spec
from tests.kube_real.conftest import LOOPBACK, SETTLE_S, Admin
from tests.kube_real.test_endpoint_on_real_cluster import wait_ready
from tests.waiting import wait_until


class RecordingClient(KubeClient):
    """Plinth's client, recording each write it sends (kind, name) before sending it."""

    writes: list[tuple[str, str]]

    def apply(self, manifest: Mapping[str, Any], *, force: bool) -> dict[str, Any]:
        self.writes.append((manifest["kind"], manifest["metadata"]["name"]))
        return super().apply(manifest, force=force)

    def delete(
        self, kind: Any, namespace: str, name: str, *, propagation: str = "Foreground"
    ) -> bool:
        self.writes.append((f"delete {kind.kind}", name))
        return super().delete(kind, namespace, name, propagation=propagation)


@pytest.fixture
def client(worker_kubeconfig: str) -> Iterator[RecordingClient]:
    recording = RecordingClient.from_kubeconfig(worker_kubeconfig, policy=LOOPBACK)
    assert isinstance(recording, RecordingClient)
    recording.writes = []
    yield recording
    recording.close()


def driver_with(client: KubeClient, **settings: Any) -> KubeDriver:
    cluster = ClusterSettings(**settings)
    return KubeDriver(client, KubeOptions(cluster=cluster), has_lws=False)


def plan_of(spec: RuntimeSpec, number: int, hf_token: str | None = None) -> base.RevisionPlan:
    launch_plan = launch.plan(spec, deployment_labels={"deployment": "chat"})
    return base.RevisionPlan.for_spec(
        spec, launch_plan, number=number, replicas=1, hf_token=hf_token
    )


def with_model(spec: RuntimeSpec, **changes: Any) -> RuntimeSpec:
    return spec.model_copy(update={"model": spec.model.model_copy(update=changes)})


def live_objects(admin: Admin, ref: base.DeploymentRef) -> list[dict[str, Any]]:
    """Every object of the endpoint's kinds the API server holds with its labels."""
    found = []
    for api_version, kind_name in OWNED_KINDS:
        if kind_name == "LeaderWorkerSet":
            continue
        path = kind_of(api_version, kind_name).path(ref.namespace, None)
        found += [
            {**o, "kind": kind_name}
            for o in admin.call("GET", path).get("items") or []
            if L.is_ours(o, ref.id)
        ]
    return found


def settled_at(
    driver: KubeDriver,
    client: RecordingClient,
    ref: base.DeploymentRef,
    revision: base.RevisionPlan,
    admin: Admin,
) -> None:
    """A second pass writes nothing, and every live object is the revision's."""
    client.writes.clear()
    driver.apply(ref, revision)
    assert client.writes == [], "a second pass wrote again"
    behind = {
        f"{o['kind']} {o['metadata']['name']}": o["metadata"]["labels"].get(L.REVISION)
        for o in live_objects(admin, ref)
        if o["metadata"]["labels"].get(L.REVISION) != str(revision.number)
        and not o["metadata"].get("deletionTimestamp")  # on its way out
    }
    assert not behind, f"left at another revision: {behind}"


def test_another_gpu_type_rolls_the_same_deployment_onto_other_nodes(
    client: RecordingClient, ref: base.DeploymentRef, admin: Admin
) -> None:
    """The GPU type changes the pods' labels and node affinity, never the selector, which the
    API server refuses to change (422): the real Deployment controller moves the pods."""
    driver = driver_with(client)
    path = f"/apis/apps/v1/namespaces/{ref.namespace}/deployments/chat-engine"
    first = plan_of(load_spec("llama-3.3-70b-nvfp4-h100"), 1)
    driver.apply(ref, first)
    wait_ready(driver, ref, first)
    selector = admin.call("GET", path)["spec"]["selector"]
    second = plan_of(load_spec("llama-3.3-70b-nvfp4-b200"), 2)
    driver.apply(ref, second)
    wait_ready(driver, ref, second)
    assert admin.call("GET", path)["spec"]["selector"] == selector
    pods = admin.call("GET", f"/api/v1/namespaces/{ref.namespace}/pods")["items"]
    engines = [p for p in pods if p["metadata"]["labels"].get(L.ROLE) == "engine"]
    assert {p["spec"]["nodeName"] for p in engines} == {"kwok-b200-0"}
    settled_at(driver, client, ref, second, admin)


def weights_jobs(admin: Admin, ref: base.DeploymentRef) -> dict[str, dict[str, Any]]:
    jobs = admin.call("GET", f"/apis/batch/v1/namespaces/{ref.namespace}/jobs")["items"]
    return {j["metadata"]["name"]: j for j in jobs if L.is_ours(j, ref.id)}


SPEC = load_spec("llama-3.1-8b-h100")
CACHE = SharedClaimCache(storage_class="fast", size_gib=500)


@pytest.mark.parametrize(
    ("what", "second", "settings"),
    [
        ("the model's revision", plan_of(with_model(SPEC, revision="v2.0"), 2), {}),
        ("a hub token", plan_of(SPEC, 2, hf_token="hf_test_token_value"), {}),
        ("the cluster's extra labels", plan_of(SPEC, 2), {"labels": {"team": "search"}}),
    ],
    ids=["model-revision", "hub-token", "operator-labels"],
)
def test_a_change_to_the_download_makes_a_new_job(
    client: RecordingClient,
    ref: base.DeploymentRef,
    admin: Admin,
    what: str,
    second: base.RevisionPlan,
    settings: dict[str, Any],
) -> None:
    """A Job's pod template never changes once made (422): a change to what the download runs
    is a new Job, named by its template, and the old one goes."""
    driver_with(client, model_cache=CACHE).apply(ref, plan_of(SPEC, 1))
    (old,) = weights_jobs(admin, ref)
    driver = driver_with(client, model_cache=CACHE, **settings)
    driver.apply(ref, second)
    jobs = weights_jobs(admin, ref)
    assert old not in jobs or jobs[old]["metadata"].get("deletionTimestamp"), what
    assert [n for n in jobs if n != old], f"{what}: no new download Job"
    settled_at(driver, client, ref, second, admin)


def test_an_edit_that_keeps_the_weights_keeps_the_job(
    client: RecordingClient, ref: base.DeploymentRef, admin: Admin
) -> None:
    """The Job's template is the same, only its revision label moves: updated in place."""
    driver = driver_with(client, model_cache=CACHE)
    driver.apply(ref, plan_of(SPEC, 1))
    before = weights_jobs(admin, ref)
    second = plan_of(load_spec("llama-3.1-8b-ngram-h100"), 2)
    driver.apply(ref, second)
    after = weights_jobs(admin, ref)
    assert set(after) == set(before)
    assert [j["metadata"]["uid"] for j in after.values()] == [
        j["metadata"]["uid"] for j in before.values()
    ]
    settled_at(driver, client, ref, second, admin)


def test_services_keep_their_cluster_ip_across_edits(
    client: RecordingClient, ref: base.DeploymentRef, admin: Admin
) -> None:
    """The API server assigns a Service's cluster IP and never lets it change; Plinth never
    sends one, so an edit leaves it (and the Service's type) as they were."""
    driver = driver_with(client)
    driver.apply(ref, plan_of(SPEC, 1))
    path = f"/api/v1/namespaces/{ref.namespace}/services"
    ips = {s["metadata"]["name"]: s["spec"]["clusterIP"] for s in admin.call("GET", path)["items"]}
    second = plan_of(load_spec("llama-3.1-8b-ngram-h100"), 2)
    driver.apply(ref, second)
    after = {s["metadata"]["name"]: s for s in admin.call("GET", path)["items"]}
    assert {n: s["spec"]["clusterIP"] for n, s in after.items()} == ips
    assert {s["spec"]["type"] for s in after.values()} == {"ClusterIP"}
    settled_at(driver, client, ref, second, admin)


@pytest.mark.parametrize(
    ("first", "changed"),
    [
        (SharedClaimCache(size_gib=500), SharedClaimCache(storage_class="fast", size_gib=500)),
        (CACHE, SharedClaimCache(storage_class="fast", size_gib=100)),
        (CACHE, SharedClaimCache(storage_class=None, size_gib=500)),
    ],
    ids=["a-class-where-none-was", "smaller", "no-class"],
)
def test_a_changed_claim_setting_settles_on_the_live_claim(
    client: RecordingClient,
    ref: base.DeploymentRef,
    admin: Admin,
    first: SharedClaimCache,
    changed: SharedClaimCache,
) -> None:
    """A claim's class and size are refused on update (or, for a class where none was, would
    move a claim the cluster may have bound elsewhere): the endpoint keeps its claim as made,
    the next revision is applied all the same, and it settles."""
    driver_with(client, model_cache=first).apply(ref, plan_of(SPEC, 1))
    path = f"/api/v1/namespaces/{ref.namespace}/persistentvolumeclaims/chat-model-cache"
    made = admin.call("GET", path)["spec"]
    driver = driver_with(client, model_cache=changed)
    second = plan_of(load_spec("llama-3.1-8b-ngram-h100"), 2)
    driver.apply(ref, second)
    claim = admin.call("GET", path)
    assert claim["spec"].get("storageClassName") == made.get("storageClassName")
    assert claim["spec"]["resources"] == made["resources"]
    settled_at(driver, client, ref, second, admin)


def test_splitting_prefill_and_decode_and_back_leaves_nothing_of_the_other_layout(
    client: RecordingClient, ref: base.DeploymentRef, admin: Admin
) -> None:
    """Turning disaggregation on replaces the engine role's objects with a pool's each (other
    names, so nothing immutable is updated), and off again; the objects of the layout left go."""
    driver = driver_with(client)
    layouts = (
        plan_of(SPEC, 1),
        plan_of(load_spec("llama-3.1-70b-pd-h100"), 2),
        plan_of(SPEC, 3),
    )
    for revision in layouts:
        driver.apply(ref, revision)
        # The layout before last was deleted in the foreground one pass ago: a workload of the
        # same name may still be on its way out (its pods go first; slower on a loaded machine),
        # which a pass leaves to go and makes again in a later one.
        wait_until(
            lambda: (
                not any(o["metadata"].get("deletionTimestamp") for o in live_objects(admin, ref))
            ),
            "the other layout's objects are gone",
            SETTLE_S,
            interval=0.5,
        )
        driver.apply(ref, revision)
        settled_at(driver, client, ref, revision, admin)
        # A role's workload, Service and disruption budget are named after it.
        wanted = {f"chat-{r.role}" for r in revision.plan.roles}
        workloads = {
            o["metadata"]["name"]
            for o in live_objects(admin, ref)
            if o["kind"] in {"Deployment", "Service", "PodDisruptionBudget"}
            and not o["metadata"].get("deletionTimestamp")
        }
        assert workloads == wanted, f"revision {revision.number}"


def test_a_claim_still_being_deleted_is_made_again_once_gone(
    client: RecordingClient, ref: base.DeploymentRef, admin: Admin
) -> None:
    """The cluster's cache moves off a claim and back while the claim is still being deleted
    (Kubernetes keeps a claim that pods use: its pvc-protection finalizer; a finalizer of the
    test's own holds it here). An apply cannot bring back an object on its way out, so that
    pass is not the last: once the claim is gone, the next pass makes it again."""
    path = f"/api/v1/namespaces/{ref.namespace}/persistentvolumeclaims/chat-model-cache"
    driver_with(client, model_cache=CACHE).apply(ref, plan_of(SPEC, 1))
    admin.call(
        "PATCH",
        path,
        {"metadata": {"finalizers": ["test.plinth/hold"]}},
        content_type="application/merge-patch+json",
    )
    driver_with(client).apply(ref, plan_of(SPEC, 2))  # a host path cache: the claim is pruned
    assert admin.call("GET", path)["metadata"].get("deletionTimestamp")
    driver = driver_with(client, model_cache=CACHE)
    third = plan_of(SPEC, 3)
    driver.apply(ref, third)
    admin.call(
        "PATCH",
        path,
        {"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    wait_until(lambda: admin.get(path) is None, "the claim is gone", SETTLE_S, interval=0.5)
    driver.apply(ref, third)
    claim = admin.get(path)
    assert claim is not None and not claim["metadata"].get("deletionTimestamp")
    settled_at(driver, client, ref, third, admin)


def test_a_start_while_the_stop_is_still_deleting_starts_once_it_is_done(
    client: RecordingClient, ref: base.DeploymentRef, admin: Admin
) -> None:
    """Stop deletes the workloads in the foreground (each stays until its pods are gone: a
    finalizer of the test's own holds the engine Deployment here), and a start comes first:
    the Deployment is left to go and made again, not taken for started."""
    path = f"/apis/apps/v1/namespaces/{ref.namespace}/deployments/chat-engine"
    driver = driver_with(client)
    revision = plan_of(SPEC, 1)
    driver.apply(ref, revision)
    admin.call(
        "PATCH",
        path,
        {"metadata": {"finalizers": ["test.plinth/hold"]}},
        content_type="application/merge-patch+json",
    )
    driver.stop(ref)
    driver.apply(ref, revision)
    admin.call(
        "PATCH",
        path,
        {"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    deployments = f"/apis/apps/v1/namespaces/{ref.namespace}/deployments"
    wait_until(
        lambda: not admin.call("GET", deployments)["items"],
        "the stopped Deployments are gone",
        SETTLE_S,
        interval=0.5,
    )
    driver.apply(ref, revision)
    wait_ready(driver, ref, revision)
    settled_at(driver, client, ref, revision, admin)
