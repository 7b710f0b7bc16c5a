"""The driver of a cluster (the local driver for the built-in cluster, the kube driver
otherwise), and how an endpoint is named to it.

Options come from settings (``PLINTH_LOCAL_*``), so tests and ``make run`` can make simulated
engines fast without touching endpoints' settings.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from controlplane.crypto import engine_api_key
from controlplane.services import reveal_secret
from deployments.cluster_settings import SettingsInvalid, parse_settings
from deployments.drivers.base import DeploymentRef, Driver
from deployments.drivers.errors import PermanentDriverError
from deployments.drivers.kube.client import KubeClient
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.render import KubeOptions
from deployments.drivers.local.driver import LocalDriver, LocalOptions
from deployments.kubeconfig import kubeconfig_policy
from deployments.models import Cluster, ClusterKind, Deployment


def local_options() -> LocalOptions:
    return LocalOptions(
        run_dir=Path(settings.PLINTH_LOCAL_RUN_DIR),
        engine=settings.PLINTH_LOCAL_ENGINE,
        router_health_check_s=settings.PLINTH_LOCAL_ROUTER_HEALTH_CHECK_S,
        stop_grace_s=settings.PLINTH_LOCAL_STOP_GRACE_S,
    )


def driver_for(cluster: Cluster) -> Driver:
    if cluster.kind == ClusterKind.LOCAL:
        return LocalDriver(local_options())
    if cluster.kubeconfig is None:
        raise PermanentDriverError(f"cluster {cluster.name} has no kubeconfig")
    options = kube_options(cluster)
    client = KubeClient.from_kubeconfig(
        reveal_secret(cluster.kubeconfig), policy=kubeconfig_policy()
    )
    return KubeDriver(client, options)


def kube_options(cluster: Cluster) -> KubeOptions:
    """What the renderers need of ``cluster``: its operator settings, as saved."""
    try:
        return KubeOptions(cluster=parse_settings(cluster.operator_settings))
    except SettingsInvalid as exc:  # saved before a rule Plinth now makes: an admin must act
        raise PermanentDriverError(
            f"cluster {cluster.name}'s settings are invalid: {exc}"
        ) from None


def ref_for(deployment: Deployment) -> DeploymentRef:
    return DeploymentRef(
        id=str(deployment.pk),
        slug=deployment.slug,
        namespace=deployment.cluster.namespace,
        api_key=engine_api_key(str(deployment.pk)),
    )
