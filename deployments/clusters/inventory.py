"""Each Kubernetes cluster's GPU nodes, as observed: the writer of ``Cluster.gpu_inventory``.

Beat runs ``observe_clusters`` every ``PLINTH_INVENTORY_INTERVAL_S``: per cluster the nodes
(from the worker's watch of them once it is synced, else a LIST) and one LIST of every
namespace's unfinished pods, summarised by ``placement.gpu_inventory`` with the cluster's GPU map.
The API and the console show it; ``deployments.clusters.checks.inventory_issues`` warns from it
before a deploy. A cluster that cannot be read keeps its last nodes with the error next to them (and
validation then stays quiet rather than warn from stale figures).
"""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from deployments.clusters.drivers import driver_for
from deployments.clusters.models import Cluster, ClusterKind
from deployments.drivers.errors import DriverError
from deployments.drivers.kube.driver import KubeDriver

log = logging.getLogger(__name__)


def observe_clusters() -> int:
    """Observe every Kubernetes cluster; the number observed without an error."""
    clusters = Cluster.objects.filter(kind=ClusterKind.KUBERNETES).select_related("kubeconfig")
    return sum(observe_cluster(cluster) for cluster in clusters)


def observe_cluster(cluster: Cluster) -> bool:
    """Store ``cluster``'s GPU inventory now; False when it could not be read."""
    inventory: dict[str, Any]
    try:
        driver = driver_for(cluster)
    except DriverError as exc:
        return _store(cluster, _failed(cluster, exc.message))
    try:
        if not isinstance(driver, KubeDriver):
            return False  # the local cluster has no nodes to list
        inventory = {**driver.gpu_inventory(), "error": ""}
    except DriverError as exc:
        inventory = _failed(cluster, exc.message)
    finally:
        driver.close()
    return _store(cluster, inventory)


def _failed(cluster: Cluster, message: str) -> dict[str, Any]:
    # Messages of the kube client are fixed text by status code, never the server's words.
    log.info("GPU inventory of cluster %s not read: %s", cluster.pk, message)
    previous = cluster.gpu_inventory or {}
    return {
        "nodes": previous.get("nodes", []),
        "gpus": previous.get("gpus", {}),
        "error": f"nodes could not be listed: {message}",
    }


def _store(cluster: Cluster, inventory: dict[str, Any]) -> bool:
    Cluster.objects.filter(pk=cluster.pk).update(
        gpu_inventory=inventory, inventory_observed_at=timezone.now()
    )
    return not inventory["error"]
