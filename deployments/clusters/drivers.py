"""The driver of a cluster (the local driver for the built-in cluster, the kube driver
otherwise), and how an endpoint is named to it.

Options come from settings (``PLINTH_LOCAL_*``, ``PLINTH_TOOLS_DIR``, ``PLINTH_BENCHMARK_IMAGE``,
``PLINTH_MODEL_CACHE_DIR``, ``PLINTH_QUANTIZE_*``),
so tests and ``make run`` can make simulated engines fast without touching endpoints' settings.

In a Celery worker (``watch_clusters``, called as the worker starts) a Kubernetes cluster's
driver reads through this process's list+watch cache of the cluster (``informer.cache_for``,
one per cluster and kubeconfig+namespace), so a settled pass asks the API nothing, and a change
on the cluster to an endpoint's objects is handed to ``on_change`` with the endpoint's id. Web
processes (log reads, validation) never watch anything: their drivers read the API directly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from controlplane.crypto import engine_api_key
from controlplane.services import reveal_secret
from deployments.cluster_settings import SettingsInvalid, parse_settings
from deployments.clusters.models import Cluster, ClusterKind
from deployments.drivers.base import DeploymentRef, Driver
from deployments.drivers.errors import PermanentDriverError
from deployments.drivers.kube import informer
from deployments.drivers.kube.client import KubeClient
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.informer import ClusterCache
from deployments.drivers.kube.kubeconfig import kubeconfig_policy
from deployments.drivers.kube.render import KubeOptions
from deployments.drivers.local.driver import LocalDriver, LocalOptions
from deployments.endpoints.models import Deployment


def local_options() -> LocalOptions:
    return LocalOptions(
        run_dir=Path(settings.PLINTH_LOCAL_RUN_DIR),
        engine=settings.PLINTH_LOCAL_ENGINE,
        router_health_check_s=settings.PLINTH_LOCAL_ROUTER_HEALTH_CHECK_S,
        stop_grace_s=settings.PLINTH_LOCAL_STOP_GRACE_S,
        tools_dir=Path(settings.PLINTH_TOOLS_DIR),
        model_cache_dir=Path(settings.PLINTH_MODEL_CACHE_DIR),
        quantize_python=settings.PLINTH_QUANTIZE_PYTHON,
    )


# Set in a worker: what to call with the ids of endpoints whose objects changed on a cluster.
# None: this process does not watch clusters (web processes, management commands, most tests).
_on_change: Callable[[set[str]], None] | None = None
# Changes within this many seconds of the first of a burst are handed over together.
DEBOUNCE_S = 1.0


def watch_clusters(on_change: Callable[[set[str]], None] | None) -> None:
    """From now on this process's kube drivers read through its clusters' list+watch caches,
    and a changed object of an endpoint calls ``on_change({id, ...})``; None: no more caches
    (and the running ones stop)."""
    global _on_change
    _on_change = on_change
    if on_change is None:
        informer.stop_all()


def driver_for(cluster: Cluster) -> Driver:
    if cluster.kind == ClusterKind.LOCAL:
        return LocalDriver(local_options())
    if cluster.kubeconfig is None:
        raise PermanentDriverError(f"cluster {cluster.name} has no kubeconfig")
    options = kube_options(cluster)
    kubeconfig = reveal_secret(cluster.kubeconfig)
    client = KubeClient.from_kubeconfig(kubeconfig, policy=kubeconfig_policy())
    cache = _cache_of(cluster, kubeconfig) if _on_change is not None else None
    return KubeDriver(client, options, cache=cache)


def _cache_of(cluster: Cluster, kubeconfig: str) -> ClusterCache:
    """This worker's cache of ``cluster``: a new kubeconfig or namespace gets a new one (the
    key holds a digest of them, never the kubeconfig itself)."""
    access = hashlib.sha256(f"{cluster.namespace}\0{kubeconfig}".encode()).hexdigest()
    on_change = _on_change

    def build() -> ClusterCache:
        # A client of its own: a pass's driver closes its client when the pass ends.
        client = KubeClient.from_kubeconfig(kubeconfig, policy=kubeconfig_policy())
        cache = ClusterCache(client, cluster.namespace)
        if on_change is not None:
            cache.on_change(on_change, debounce_s=DEBOUNCE_S)
        return cache

    return informer.cache_for((str(cluster.pk), access), build)


def kube_options(cluster: Cluster) -> KubeOptions:
    """What the renderers need of ``cluster``: its operator settings, as saved, and the
    installation's default AIPerf image for benchmark Jobs."""
    try:
        return KubeOptions(
            cluster=parse_settings(cluster.operator_settings),
            benchmark_image=settings.PLINTH_BENCHMARK_IMAGE,
            quantize_image=settings.PLINTH_QUANTIZE_IMAGE,
        )
    except SettingsInvalid as exc:  # saved before a rule Plinth now makes: an admin must act
        raise PermanentDriverError(
            f"cluster {cluster.name}'s settings are invalid: {exc}"
        ) from None


def ref_for(deployment: Deployment, cluster: Cluster | None = None) -> DeploymentRef:
    """How ``deployment`` is named to a driver of ``cluster`` (its home cluster by default)."""
    return DeploymentRef(
        id=str(deployment.pk),
        slug=deployment.slug,
        namespace=(cluster or deployment.cluster).namespace,
        api_key=engine_api_key(str(deployment.pk)),
    )
