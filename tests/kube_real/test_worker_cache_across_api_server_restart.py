"""The API server restarted under a running worker: its list+watch caches recover (watches opened
again, every kind the watch cache serves listed again after its 410), and hold what the server
holds, endpoints gone, added and changed just after it came back included; the next passes write
nothing and nothing was deleted or made twice.

The module has a control plane of its own: restarting the session's would make whatever test
runs next wait on controllers and kwok finding the API server again.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from deployments.drivers import base
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import KubeClient
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.informer import ClusterCache
from deployments.drivers.kube.render import render_revision
from tests.drivers.reference_specs import REF
from tests.kube_real.conftest import (
    LOOPBACK,
    SETTLE_S,
    Admin,
    grant_worker_token,
    running_cluster,
    worker_kubeconfig_for,
)
from tests.kube_real.control_plane import ControlPlane
from tests.kube_real.test_endpoint_on_real_cluster import numbered, path_of, wait_ready
from tests.kube_real.test_informer_watch_on_real_cluster import holds_what_the_server_holds
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with running_cluster(tmp_path_factory.mktemp("kube-restart")) as plane:
        yield plane


@pytest.fixture
def worker(own_cluster: ControlPlane) -> Iterator[tuple[str, str]]:
    """(namespace, the worker's kubeconfig for it) on the module's cluster."""
    admin = Admin(own_cluster)
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    admin.call("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    wait_until(
        lambda: admin.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default"),
        "the namespace's default ServiceAccount",
        SETTLE_S,
        interval=0.3,
    )
    token = grant_worker_token(admin)
    yield namespace, worker_kubeconfig_for(own_cluster, admin, namespace, token)


def endpoint(namespace: str, slug: str) -> base.DeploymentRef:
    return replace(REF, id=str(uuid.uuid4()), slug=slug, namespace=namespace)


def written(admin: Admin, ref: base.DeploymentRef, revision: base.RevisionPlan) -> dict[str, Any]:
    """What a write to each of the endpoint's objects would change: a Deployment's generation
    (its status changes on its own), every other object's resourceVersion."""
    marks: dict[str, Any] = {}
    for manifest in render_revision(ref, revision):
        meta = admin.call("GET", path_of(manifest))["metadata"]
        marks[path_of(manifest)] = meta[
            "generation" if manifest["kind"] == "Deployment" else "resourceVersion"
        ]
    return marks


def engine_pods(admin: Admin, ref: base.DeploymentRef) -> list[dict[str, Any]]:
    pods = admin.call("GET", f"/api/v1/namespaces/{ref.namespace}/pods").get("items") or []
    return [
        p
        for p in pods
        if L.is_ours(p, ref.id)
        and p["metadata"]["labels"].get(L.ROLE) != "router"
        and not p["metadata"].get("deletionTimestamp")
    ]


def test_the_workers_caches_recover_when_the_api_server_restarts(
    own_cluster: ControlPlane, worker: tuple[str, str]
) -> None:
    namespace, kubeconfig = worker
    admin = Admin(own_cluster)
    # The worker's cache as it runs in production (watches of 300 s: the restart breaks them).
    cache = ClusterCache(
        KubeClient.from_kubeconfig(kubeconfig, policy=LOOPBACK), namespace, has_lws=False
    )
    told: set[str] = set()
    cache.on_change(told.update, debounce_s=0.2)
    cache.start()
    client = KubeClient.from_kubeconfig(kubeconfig, policy=LOOPBACK)
    try:
        driver = KubeDriver(client, has_lws=False, cache=cache)
        revision = numbered("llama-3.1-8b-h100", 1)
        kept, dropped, added = (endpoint(namespace, s) for s in ("kept", "dropped", "added"))
        for ref in (kept, dropped):
            driver.apply(ref, revision)
            wait_ready(driver, ref, revision)
        watches = {kind: informer.watches for kind, informer in cache.informers.items()}

        own_cluster.restart_api_server()
        told.clear()
        # Just after it is back, while the caches' watches are not open again yet: an endpoint
        # deleted, another made, a pod of a third replaced by its ReplicaSet.
        wait_until(
            lambda: driver.delete(dropped), "the dropped endpoint is gone", SETTLE_S, interval=1.0
        )
        driver.apply(added, revision)
        replaced = engine_pods(admin, kept)[0]["metadata"]["name"]
        admin.call("DELETE", f"/api/v1/namespaces/{namespace}/pods/{replaced}")

        wait_until(
            lambda: all(holds_what_the_server_holds(admin, i) for i in cache.informers.values()),
            "every cache holds what the server holds",
            SETTLE_S,
            interval=1.0,
            output=own_cluster.logs,
        )
        # Every watch was opened again (those the server answered 410 after listing again:
        # which kinds is the server's choice, by what its watch cache kept).
        assert all(i.watches > watches[k] for k, i in cache.informers.items())
        for ref in (kept, added):
            wait_ready(driver, ref, revision)  # read from the recovered caches
        assert len(engine_pods(admin, kept)) == revision.replicas  # nothing made twice
        assert {kept.id, dropped.id, added.id} <= told  # each made due by what changed

        before = {
            **written(admin, kept, revision),
            **written(admin, added, revision),
        }  # nothing deleted
        for ref in (kept, added):  # the passes of settled endpoints
            driver.apply(ref, revision)
            driver.observe(ref)
        after = {**written(admin, kept, revision), **written(admin, added, revision)}
        assert after == before
    finally:
        cache.stop()
        client.close()
