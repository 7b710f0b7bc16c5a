"""The worker's list+watch caches and GPU inventory against a real API server, with the worker's
own ServiceAccount token: its RBAC lets it list and watch what the caches hold, watches resume
after the server ends them, and the nodes and pods the real scheduler placed add up."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from deployments.drivers import base
from deployments.drivers.kube.client import KubeClient
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.informer import ClusterCache
from tests.kube_real.conftest import GPU_NODES, GPUS_PER_NODE, LOOPBACK, SETTLE_S, Admin
from tests.kube_real.test_endpoint_on_real_cluster import numbered, wait_ready
from tests.waiting import wait_until


@pytest.fixture
def cache(worker_kubeconfig: str, namespace: str) -> Iterator[ClusterCache]:
    client = KubeClient.from_kubeconfig(worker_kubeconfig, policy=LOOPBACK)
    # Watches the server ends every few seconds: each resumes from the last version it saw.
    cache = ClusterCache(client, namespace, has_lws=False, watch_s=3)
    yield cache
    cache.stop()


def test_the_workers_cache_follows_an_endpoint_on_the_real_server(
    cache: ClusterCache, worker_client: KubeClient, ref: base.DeploymentRef, admin: Admin
) -> None:
    changed: list[set[str]] = []
    cache.on_change(changed.append, debounce_s=0.2)
    cache.start()
    for kind, informer in cache.informers.items():
        assert informer.wait_synced(SETTLE_S), f"the {kind} cache syncs"
    driver = KubeDriver(worker_client, has_lws=False, cache=cache)
    revision = numbered("llama-3.1-8b-h100", 1)
    driver.apply(ref, revision)
    wait_ready(driver, ref, revision)  # observed from the cache
    wait_until(
        lambda: any(ref.id in ids for ids in changed),
        "a change names the endpoint",
        SETTLE_S,
        interval=0.5,
    )
    # The next pass reads the anchor from the cache: settled, it writes nothing.
    services = cache.informers["Service"]
    before = wait_until(
        lambda: services.get(ref.namespace, "chat-router"),
        "the cache holds the anchor Service",
        SETTLE_S,
        interval=0.5,
    )
    assert before is not None
    version = before["metadata"]["resourceVersion"]
    driver.apply(ref, revision)
    path = f"/api/v1/namespaces/{ref.namespace}/services/chat-router"
    assert admin.call("GET", path)["metadata"]["resourceVersion"] == version


def test_gpu_inventory_counts_the_nodes_and_the_gpus_pods_hold(
    driver: KubeDriver, ref: base.DeploymentRef
) -> None:
    revision = numbered("llama-3.1-8b-h100", 1, replicas=2)
    driver.apply(ref, revision)
    wait_ready(driver, ref, revision)
    gpus = driver.gpu_inventory()["gpus"]
    assert gpus["H100-SXM"]["nodes"] == GPU_NODES["H100-SXM"]
    assert gpus["H100-SXM"]["gpus"] == GPU_NODES["H100-SXM"] * GPUS_PER_NODE
    # Other tests' endpoints may hold GPUs too, but never this one's two.
    assert gpus["H100-SXM"]["free"] <= gpus["H100-SXM"]["gpus"] - 2
    assert gpus["B200"]["gpus"] == GPU_NODES["B200"] * GPUS_PER_NODE
