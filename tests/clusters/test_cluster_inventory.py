"""The worker's look at each Kubernetes cluster's GPU nodes (``deployments.clusters.inventory``).

The cluster's API is the emulator holding labelled Nodes and a pod using GPUs; the task stores
what it saw on the Cluster row, and an API server that refuses keeps the last figures with the
reason next to them.

Why the emulator (a stand-in, see tests/drivers/kube_emulator.py): its API server refuses the node
list with 403 on the test's word (a real one would need the worker's RBAC changed mid-session),
which is what keeps the last figures with the reason. The inventory counted on the real server is
test_gpu_inventory_counts_the_nodes_and_the_gpus_pods_hold in
tests/kube_real/test_worker_cache_on_real_cluster.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from controlplane import services as platform
from deployments.clusters import inventory, services
from deployments.clusters.models import Cluster
from deployments.clusters.tasks import observe_clusters
from tests.conftest import Cast
from tests.drivers.kube_emulator import RunningEmulator
from tests.drivers.test_gpu_placement import H100, H200, node
from tests.fixtures.endpoints import NS, kubeconfig


@pytest.fixture
def cluster(cast: Cast, emulator: RunningEmulator, settings: Any) -> Cluster:
    settings.PLINTH_KUBE_ALLOW_HTTP = True  # the emulator speaks plain http on loopback
    settings.PLINTH_KUBE_ALLOW_HOSTS = ["127.0.0.1"]
    actor = cast.actor(cast.alice, cast.acme)
    secret = platform.set_secret(actor, name="emu-kubeconfig", value=kubeconfig(emulator.url))
    return services.create_cluster(actor, name="emu", namespace=NS, kubeconfig_secret_id=secret.pk)


@pytest.mark.django_db
def test_the_worker_records_each_clusters_gpu_nodes(
    cluster: Cluster, emulator: RunningEmulator
) -> None:
    for obj in (node("h100-a", H100), node("h200-a", H200), node("cpu-1", None)):
        emulator.put("v1", "Node", None, obj)  # type: ignore[arg-type]  # cluster-scoped
    gpus = {"containers": [{"name": "x", "resources": {"requests": {"nvidia.com/gpu": "6"}}}]}
    emulator.put("v1", "Pod", "other", {"metadata": {"name": "p", "namespace": "other"},
                                        "spec": {**gpus, "nodeName": "h200-a"},
                                        "status": {"phase": "Running"}})  # fmt: skip
    assert observe_clusters.apply().get() == 1
    cluster.refresh_from_db()
    assert cluster.inventory_observed_at is not None
    assert cluster.gpu_inventory["error"] == ""
    assert cluster.gpu_inventory["gpus"] == {
        "H100-SXM": {"nodes": 1, "gpus": 8, "free": 8},
        "H200": {"nodes": 1, "gpus": 8, "free": 2},
    }
    assert [n["name"] for n in cluster.gpu_inventory["nodes"]] == ["h100-a", "h200-a"]

    emulator.inject("GET", "/api/v1/nodes", 403)  # the kubeconfig may not list nodes
    assert inventory.observe_cluster(cluster) is False
    cluster.refresh_from_db()
    assert cluster.gpu_inventory["error"] == (
        "nodes could not be listed: Kubernetes API 403: the kubeconfig's credentials may not do "
        "this (forbidden)"
    )
    assert cluster.gpu_inventory["gpus"]["H200"]["free"] == 2  # the last figures are kept
