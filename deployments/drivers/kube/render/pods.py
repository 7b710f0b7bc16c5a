"""The parts of a pod that engines, the router and the weight downloads share: text as
Kubernetes passes it on, the API key on a command line, security contexts, probes and ports, the
model cache's environment, mounts and volume, images, and where a pod may be scheduled."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deployments.cluster_settings import (
    ClaimCache,
    ClusterSettings,
    HostPathCache,
    SharedClaimCache,
)
from deployments.drivers.base import DeploymentRef, RevisionPlan
from deployments.drivers.kube import labels as L
from runtime.launch import ROUTER_IMAGE, Probe, RolePlan, with_flag
from runtime.secret_flags import API_KEY_REF, container_command
from runtime.spec import MODEL_CACHE_PATH, default_engine_image


def literal(text: str) -> str:
    """``text`` as Kubernetes passes it on: it expands ``$(VAR)`` in container args and env values,
    so a spec value such as ``$(HF_TOKEN)`` in a served name would become the Secret's value and be
    listed by ``/v1/models``. ``$$`` is Kubernetes' escape for a literal ``$``."""
    return text.replace("$", "$$")


def literal_args(args: list[str]) -> list[str]:
    return [literal(arg) for arg in args]


def with_api_key(ref: DeploymentRef, args: list[str]) -> list[str]:
    """``args`` (already escaped) with ``--api-key`` naming the variable the Secret fills. The
    reference is escaped too: were the kubelet to expand it, the key would be on the container's
    command line, which every process on the node may read. ``start_command`` expands it inside
    the process instead (``runtime.secret_flags``)."""
    return with_flag(args, "--api-key", literal(API_KEY_REF)) if ref.api_key else args


def start_command(ref: DeploymentRef, command: Sequence[str]) -> list[str]:
    """A keyed container's program, started through ``runtime.secret_flags``'s own source."""
    return literal_args(container_command(command)) if ref.api_key else list(command)


def container_security(*, read_only: bool, run_as_user: int | None) -> dict[str, Any]:
    security: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": read_only,
    }
    if run_as_user is not None:
        security.update(runAsNonRoot=True, runAsUser=run_as_user, runAsGroup=run_as_user)
    return security


def probe_manifest(probe: Probe) -> dict[str, Any]:
    return {
        "httpGet": {"path": probe.path, "port": probe.port},
        "initialDelaySeconds": probe.initial_delay_s,
        "periodSeconds": probe.period_s,
        "timeoutSeconds": probe.timeout_s,
        "failureThreshold": probe.failure_threshold,
    }


def container_ports(role: RolePlan) -> list[dict[str, Any]]:
    ports = [{"name": "http", "containerPort": role.port, "protocol": "TCP"}]
    if role.metrics_port and role.metrics_port != role.port:
        ports.append({"name": "metrics", "containerPort": role.metrics_port, "protocol": "TCP"})
    for name, port in sorted(role.extra_ports.items()):
        ports.append(
            {"name": name.replace("_", "-")[:15], "containerPort": port, "protocol": "TCP"}
        )
    return ports


def cache_env() -> list[dict[str, Any]]:
    # The root filesystem is read-only: huggingface_hub, Triton, FlashInfer and torch write
    # under $HOME, which /tmp (an emptyDir) stands in for.
    return [
        {"name": "HF_HOME", "value": MODEL_CACHE_PATH},
        {"name": "HOME", "value": "/tmp"},  # noqa: S108 - an emptyDir, not shared
    ]


def cache_mounts() -> list[dict[str, Any]]:
    return [
        {"name": "model-cache", "mountPath": MODEL_CACHE_PATH},
        {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - a volume mount
    ]


def cache_volume(ref: DeploymentRef, cluster: ClusterSettings) -> dict[str, Any]:
    chosen = cluster.model_cache
    if isinstance(chosen, ClaimCache):
        return {"name": "model-cache", "persistentVolumeClaim": {"claimName": chosen.claim_name}}
    if isinstance(chosen, SharedClaimCache):
        claim = L.object_name(ref.slug, "model-cache")
        return {"name": "model-cache", "persistentVolumeClaim": {"claimName": claim}}
    if isinstance(chosen, HostPathCache):
        return {
            "name": "model-cache",
            "hostPath": {"path": chosen.path, "type": "DirectoryOrCreate"},
        }
    return {"name": "model-cache", "emptyDir": {}}  # the pod's own: gone with it


def engine_image(role: RolePlan, revision: RevisionPlan, cluster: ClusterSettings) -> str:
    """The spec's own image where the operator allows it; else the cluster's image for the
    SGLang version; else the public one (``role.image`` when the plan knows no version)."""
    if revision.engine_image and cluster.allows("engine_image"):
        return revision.engine_image
    if not revision.sglang_version:
        return role.image
    own = cluster.engine_images.get(revision.sglang_version)
    return own or default_engine_image(revision.sglang_version)


def router_image(revision: RevisionPlan, cluster: ClusterSettings) -> str:
    """As ``engine_image``: the spec's where allowed, else the cluster's, else smg's own."""
    if revision.router_image and cluster.allows("router_image"):
        return revision.router_image
    return cluster.router_image or ROUTER_IMAGE


def gpu_affinity(
    ref: DeploymentRef, revision: RevisionPlan, role: RolePlan, cluster: ClusterSettings
) -> dict[str, Any]:
    """Engine pods only on nodes of the spec's GPU type (required: an H100 endpoint never lands
    on an H200 node). The pods of one multi-node replica share that affinity, so a group is all
    one type; with a topology label they also prefer the domain (rack, NVLink clique) of the
    rest of their group (``matchLabelKeys``: the same LWS group; where that is not enabled,
    the endpoint's other pods of the role)."""
    if not revision.gpu:
        return {}
    selector = cluster.gpu_selector(revision.gpu)
    affinity: dict[str, Any] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [selector.node_selector_term()]
            }
        }
    }
    if role.multi_node and cluster.topology_label:
        term = {
            "labelSelector": {"matchLabels": L.role_selector(ref.id, role.role)},
            "matchLabelKeys": [L.LWS_GROUP_KEY],
            "topologyKey": cluster.topology_label,
        }
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        }
    return affinity


def pod_scheduling(cluster: ClusterSettings) -> dict[str, Any]:
    """What every pod of the cluster gets: node selector, priority class, pull secrets."""
    spec: dict[str, Any] = {}
    if cluster.node_selector:
        spec["nodeSelector"] = dict(cluster.node_selector)
    if cluster.priority_class_name:
        spec["priorityClassName"] = cluster.priority_class_name
    if cluster.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in cluster.image_pull_secrets]
    return spec


def cpu_pod_scheduling(cluster: ClusterSettings) -> dict[str, Any]:
    """A CPU pod's share of the cluster's settings (a benchmark's): what every pod gets, and
    the cluster's tolerations, none of the GPU placement."""
    spec = pod_scheduling(cluster)
    if cluster.tolerations:
        spec["tolerations"] = [t.manifest() for t in cluster.tolerations]
    return spec
