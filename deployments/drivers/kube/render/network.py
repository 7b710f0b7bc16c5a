"""The endpoint's two NetworkPolicies: its engines take traffic from its own pods and the
worker's probe only, its router from the gateway and the worker only; the monitoring namespace,
when the cluster names one, may scrape metrics."""

from __future__ import annotations

from typing import Any

from deployments.drivers.base import DeploymentRef, RevisionPlan
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.render.metadata import object_meta
from deployments.drivers.kube.render.options import KubeOptions
from runtime.launch import RolePlan


def _platform_pods(options: KubeOptions, component: str) -> dict[str, Any]:
    namespace = {"kubernetes.io/metadata.name": options.cluster.platform_namespace}
    return {
        "namespaceSelector": {"matchLabels": namespace},
        "podSelector": {"matchLabels": L.platform_labels(component)},
    }


def _monitoring(options: KubeOptions, port: int) -> list[dict[str, Any]]:
    if not options.cluster.monitoring_namespace:
        return []
    namespace = {"kubernetes.io/metadata.name": options.cluster.monitoring_namespace}
    return [
        {
            "from": [{"namespaceSelector": {"matchLabels": namespace}}],
            "ports": [{"port": port, "protocol": "TCP"}],
        }
    ]


def engine_network_policy(
    ref: DeploymentRef, revision: RevisionPlan, port: int, options: KubeOptions
) -> dict[str, Any]:
    """Engines take traffic from this endpoint's own pods only (its router; its other ranks and
    pools, which use NCCL, bootstrap and KV-transfer ports of their own), plus the worker's
    probe on the HTTP port. Everything else is dropped before the API key is even asked for."""
    engines = {
        "matchLabels": {L.DEPLOYMENT: ref.id},
        "matchExpressions": [{"key": L.ROLE, "operator": "NotIn", "values": ["router"]}],
    }
    own = {"podSelector": {"matchLabels": {L.DEPLOYMENT: ref.id}}}
    http = [{"port": port, "protocol": "TCP"}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(ref, revision, L.object_name(ref.slug, "fence-engines"), "engine"),
        "spec": {
            "podSelector": engines,
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [own]},
                {"from": [_platform_pods(options, "worker")], "ports": http},
                *_monitoring(options, port),
            ],
        },
    }


def router_network_policy(
    ref: DeploymentRef, revision: RevisionPlan, router: RolePlan, options: KubeOptions
) -> dict[str, Any]:
    """The router takes requests from the gateway and the worker only; its metrics port also
    from the monitoring namespace when there is one."""
    callers = [_platform_pods(options, "gateway"), _platform_pods(options, "worker")]
    ports = [{"port": router.port, "protocol": "TCP"}]
    if router.metrics_port:
        ports.append({"port": router.metrics_port, "protocol": "TCP"})
    rules = [{"from": callers, "ports": ports}]
    if router.metrics_port:
        rules += _monitoring(options, router.metrics_port)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": object_meta(ref, revision, L.object_name(ref.slug, "fence-router"), "router"),
        "spec": {
            "podSelector": {"matchLabels": L.role_selector(ref.id, "router")},
            "policyTypes": ["Ingress"],
            "ingress": rules,
        },
    }
