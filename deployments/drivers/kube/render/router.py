"""The endpoint's router (smg): the ServiceAccount, Role and RoleBinding that let it discover
engine pods by label, its Deployment and Service, and the URL the gateway forwards to."""

from __future__ import annotations

from typing import Any

from deployments.cluster_settings import ClusterSettings
from deployments.drivers.base import DeploymentRef, RevisionPlan
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.render.engines import serving_selector
from deployments.drivers.kube.render.metadata import api_key_env, object_meta, template_meta
from deployments.drivers.kube.render.options import KubeOptions
from deployments.drivers.kube.render.pods import (
    container_ports,
    container_security,
    literal_args,
    pod_scheduling,
    probe_manifest,
    router_image,
    start_command,
    with_api_key,
)
from runtime.launch import RolePlan

ROUTER_USER = 65532  # smg needs no user of its own: any non-root id


def router_rbac(ref: DeploymentRef, revision: RevisionPlan) -> list[dict[str, Any]]:
    """smg's service discovery lists and watches pods in the endpoint's namespace, nothing more."""
    name = L.object_name(ref.slug, "router")
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": object_meta(ref, revision, name, "router"),
        "automountServiceAccountToken": True,
    }
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": object_meta(ref, revision, name, "router"),
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": object_meta(ref, revision, name, "router"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ref.namespace}],
    }
    return [account, role, binding]


def router_args(ref: DeploymentRef, router: RolePlan, engine_roles: list[RolePlan]) -> list[str]:
    """The plan's smg flags plus pod discovery by this endpoint's labels."""
    port = "30000"
    args = [*with_api_key(ref, literal_args(router.args)), "--service-discovery"]
    args += ["--service-discovery-namespace", ref.namespace]
    args += ["--service-discovery-port", port]
    for role in engine_roles:
        flag = "--selector" if role.role == "engine" else f"--{role.role}-selector"
        args += [flag, *(f"{k}={v}" for k, v in serving_selector(ref, role).items())]
    return args


def _router_container(
    ref: DeploymentRef,
    revision: RevisionPlan,
    router: RolePlan,
    engine_roles: list[RolePlan],
    cluster: ClusterSettings,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "router",
        "image": router_image(revision, cluster),
        "imagePullPolicy": "IfNotPresent",
        "command": start_command(ref, router.command),
        "args": router_args(ref, router, engine_roles),
        "ports": container_ports(router),
        # smg sends its --api-key to every worker it discovers: one key both ways.
        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}, *api_key_env(ref)],
        "resources": {
            "requests": {"cpu": "500m", "memory": "512Mi"},
            "limits": {"memory": "2Gi"},
        },
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 5"]}}},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],  # noqa: S108 - a volume mount
        "securityContext": {
            **container_security(read_only=True, run_as_user=ROUTER_USER),
            "capabilities": {"drop": ["ALL"]},
        },
    }
    probes = (("readinessProbe", router.readiness_probe), ("livenessProbe", router.liveness_probe))
    for key, probe in probes:
        if probe is not None:
            container[key] = probe_manifest(probe)
    return container


def router_deployment(
    ref: DeploymentRef,
    revision: RevisionPlan,
    router: RolePlan,
    engine_roles: list[RolePlan],
    options: KubeOptions | None = None,
) -> dict[str, Any]:
    cluster = (options or KubeOptions()).cluster
    meta = object_meta(ref, revision, L.object_name(ref.slug, "router"), "router")
    pod: dict[str, Any] = {
        # Its own account (pod discovery), never the operator's engine account.
        "serviceAccountName": meta["name"],
        "containers": [_router_container(ref, revision, router, engine_roles, cluster)],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
        "terminationGracePeriodSeconds": router.drain_seconds + 5,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        # CPU only: the cluster's node selector and tolerations, not the GPU affinity.
        **pod_scheduling(cluster),
    }
    if cluster.tolerations:
        pod["tolerations"] = [t.manifest() for t in cluster.tolerations]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": router.replicas,
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": L.role_selector(ref.id, "router")},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {"metadata": template_meta(ref, meta["labels"]), "spec": pod},
        },
    }


def router_service(ref: DeploymentRef, revision: RevisionPlan, router: RolePlan) -> dict[str, Any]:
    ports = [{"name": "http", "port": router.port, "targetPort": "http", "protocol": "TCP"}]
    if router.metrics_port:
        ports.append(
            {
                "name": "metrics",
                "port": router.metrics_port,
                "targetPort": "metrics",
                "protocol": "TCP",
            }
        )
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(ref, revision, L.object_name(ref.slug, "router"), "router"),
        "spec": {
            "type": "ClusterIP",
            "selector": L.role_selector(ref.id, "router"),
            "ports": ports,
        },
    }


def router_url(ref: DeploymentRef, port: int) -> str:
    """What the gateway forwards to: the router Service's cluster DNS name."""
    return f"http://{L.object_name(ref.slug, 'router')}.{ref.namespace}.svc:{port}"
