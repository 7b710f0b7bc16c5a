"""An engine role's objects: its pods (the engine container, its volumes, the pod spec), the
Deployment that rolls them one surge at a time (a LeaderWorkerSet when one replica spans nodes),
the Service of the pods that serve HTTP, and the PodDisruptionBudget."""

from __future__ import annotations

from typing import Any

from deployments.drivers.base import DeploymentRef, RevisionPlan
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.render.metadata import (
    api_key_env,
    hf_token_env,
    object_meta,
    template_meta,
)
from deployments.drivers.kube.render.options import KubeOptions
from deployments.drivers.kube.render.pods import (
    cache_env,
    cache_mounts,
    cache_volume,
    container_ports,
    container_security,
    engine_image,
    gpu_affinity,
    literal,
    literal_args,
    pod_scheduling,
    probe_manifest,
    start_command,
    with_api_key,
)
from deployments.drivers.kube.render.warm import (
    agent_container,
    agent_volumes,
    has_warm_pool,
    live_through_agent,
)
from deployments.drivers.kube.render.weights import engine_downloads, engine_init_containers
from runtime.launch import DIST_INIT_PORT, HICACHE_STORAGE_PATH, RolePlan, with_flag

PRESTOP_SLEEP_S = 15  # lets the router see the pod go unready before the engine drains
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
# Host memory an engine needs besides a HiCache host tier (tokenizer, scheduler, weight staging):
# requested only with a host tier, where the request matters for placement.
ENGINE_HOST_MEMORY_GIB = 16


def _env(
    ref: DeploymentRef, revision: RevisionPlan, role: RolePlan, options: KubeOptions
) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [{"name": k, "value": literal(v)} for k, v in role.env.items()]
    if engine_downloads(options.cluster):
        if revision.hf_token:
            env.append(hf_token_env(ref))
    elif "HF_HUB_OFFLINE" not in role.env:
        # A download step filled the cache before the engine starts: it loads from there
        # without asking the hub, which it has no token for.
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    return env + cache_env() + api_key_env(ref)


def _engine_container(
    ref: DeploymentRef,
    revision: RevisionPlan,
    role: RolePlan,
    options: KubeOptions,
    *,
    args: list[str],
    probes: bool,
) -> dict[str, Any]:
    gpus = str(role.gpus_per_node)
    resource = options.cluster.gpu_resource
    container: dict[str, Any] = {
        "name": "engine",
        "image": engine_image(role, revision, options.cluster),
        "imagePullPolicy": "IfNotPresent",
        "command": start_command(ref, role.command),
        "args": args,
        "ports": container_ports(role),
        "env": _env(ref, revision, role, options),
        "resources": {
            "requests": {resource: gpus, **_host_memory_request(role)},
            "limits": {resource: gpus},
        },
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 - a volume mount, not a temp file
            *cache_mounts(),
            *_kv_storage_mounts(role),
        ],
        "lifecycle": {
            "preStop": {"exec": {"command": ["/bin/sh", "-c", f"sleep {PRESTOP_SLEEP_S}"]}}
        },
        "securityContext": container_security(
            read_only=options.cluster.read_only_root, run_as_user=options.cluster.engine_run_as_user
        ),
    }
    if probes:
        for key, probe in (
            ("startupProbe", role.startup_probe),
            ("readinessProbe", role.readiness_probe),
            ("livenessProbe", role.liveness_probe),
        ):
            if probe is not None:
                container[key] = probe_manifest(probe)
    return container


def _host_memory_request(role: RolePlan) -> dict[str, str]:
    """HiCache's host tier is pinned host memory: request it (plus the engine's own), so the
    scheduler places the pod on a node that has it; no limit, as before, since an engine killed
    for memory mid-load costs more than one that borrows."""
    if not role.host_tier_gib_per_node:
        return {}
    return {"memory": f"{role.host_tier_gib_per_node + ENGINE_HOST_MEMORY_GIB}Gi"}


def _kv_storage_mounts(role: RolePlan) -> list[dict[str, Any]]:
    if role.kv_storage is None:
        return []
    return [{"name": "hicache-storage", "mountPath": HICACHE_STORAGE_PATH}]


def _kv_storage_volumes(role: RolePlan) -> list[dict[str, Any]]:
    """HiCache's file storage tier: the node's directory (created if missing) or the claim."""
    storage = role.kv_storage
    if storage is None:
        return []
    if storage.claim is not None:
        return [{"name": "hicache-storage", "persistentVolumeClaim": {"claimName": storage.claim}}]
    host_path = {"path": storage.node_path, "type": "DirectoryOrCreate"}
    return [{"name": "hicache-storage", "hostPath": host_path}]


def _engine_volumes(
    ref: DeploymentRef, role: RolePlan, options: KubeOptions
) -> list[dict[str, Any]]:
    shm: dict[str, Any] = {"medium": "Memory"}
    if role.shm_size_gib:
        shm["sizeLimit"] = f"{role.shm_size_gib}Gi"
    return [
        {"name": "dshm", "emptyDir": shm},
        cache_volume(ref, options.cluster),
        {"name": "tmp", "emptyDir": {}},
        *_kv_storage_volumes(role),
    ]


def _pod_spec(
    ref: DeploymentRef,
    revision: RevisionPlan,
    role: RolePlan,
    options: KubeOptions,
    container: dict[str, Any],
) -> dict[str, Any]:
    cluster = options.cluster
    tolerations = [t.manifest() for t in (*cluster.gpu_tolerations, *cluster.tolerations)]
    containers, volumes = [container], _engine_volumes(ref, role, options)
    if has_warm_pool(revision, role):
        containers.append(agent_container(ref, role, container["image"], options))
        volumes += agent_volumes(ref)
        if "livenessProbe" in container:
            container["livenessProbe"] = live_through_agent(container["livenessProbe"])
    spec: dict[str, Any] = {
        "containers": containers,
        "volumes": volumes,
        "terminationGracePeriodSeconds": role.drain_seconds + PRESTOP_SLEEP_S,
        "enableServiceLinks": False,
        **pod_scheduling(cluster),
    }
    affinity = gpu_affinity(ref, revision, role, cluster)
    if affinity:
        spec["affinity"] = affinity
    if tolerations:
        spec["tolerations"] = tolerations
    if cluster.runtime_class_name:
        spec["runtimeClassName"] = cluster.runtime_class_name
    if cluster.service_account_name:
        # The operator's account for engine pods (a cloud workload identity, say): whether its
        # token is mounted is that account's own setting.
        spec["serviceAccountName"] = cluster.service_account_name
    else:
        # Least privilege: nothing in an engine pod (engine, weights init, warm agent, the
        # nodes of a multi-node group) calls the Kubernetes API, so the namespace's default
        # ServiceAccount's token is not mounted.
        spec["automountServiceAccountToken"] = False
    init = engine_init_containers(ref, revision, role, cluster)
    if init:
        spec["initContainers"] = init
    if options.cluster.engine_run_as_user is not None:
        # The cache volume and emptyDirs become writable by the engine's group.
        spec["securityContext"] = {"fsGroup": options.cluster.engine_run_as_user}
    return spec


def engine_workload(
    ref: DeploymentRef, revision: RevisionPlan, role: RolePlan, options: KubeOptions
) -> dict[str, Any]:
    if role.multi_node:
        return leader_worker_set(ref, revision, role, options)
    meta = object_meta(ref, revision, L.object_name(ref.slug, role.role), role.role)
    args = with_api_key(ref, literal_args(role.args))
    container = _engine_container(ref, revision, role, options, args=args, probes=True)
    # The Deployment controller's progress deadline: the startup probe's window (download,
    # load, warm-up) plus 10 minutes to schedule and pull an image of tens of GB. Past it the
    # controller reports ProgressDeadlineExceeded, which fails the revision in its words
    # (``observe.stalled_rollouts``) when Plinth's own startup window has not done so first.
    startup = role.startup_probe
    deadline = startup.period_s * startup.failure_threshold + 600 if startup else 1800
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": revision.replicas_of(role),
            "revisionHistoryLimit": 5,
            "progressDeadlineSeconds": deadline,
            "selector": {"matchLabels": L.role_selector(ref.id, role.role)},
            # Surge one new replica at a time and never remove a ready one first: the previous
            # revision keeps serving until the new one is ready.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "template": {
                "metadata": template_meta(ref, _engine_pod_labels(revision, meta["labels"])),
                "spec": _pod_spec(ref, revision, role, options, container),
            },
        },
    }


def _engine_pod_labels(revision: RevisionPlan, labels: dict[str, str]) -> dict[str, str]:
    """Engine pods name their GPU type, which an unschedulable pod's reason then names."""
    return {**labels, L.GPU: revision.gpu} if revision.gpu else labels


def _multi_node_args(ref: DeploymentRef, role: RolePlan) -> list[str]:
    # Escaped first: the LWS variables and the API key below are the only references Kubernetes
    # should expand.
    args = with_api_key(ref, literal_args(role.args))
    args = with_flag(args, "--dist-init-addr", f"$(LWS_LEADER_ADDRESS):{DIST_INIT_PORT}")
    args = with_flag(args, "--nnodes", "$(LWS_GROUP_SIZE)")
    return with_flag(args, "--node-rank", "$(LWS_WORKER_INDEX)")


def _lws_template(
    ref: DeploymentRef,
    revision: RevisionPlan,
    role: RolePlan,
    options: KubeOptions,
    *,
    leader: bool,
) -> dict[str, Any]:
    container = _engine_container(
        ref, revision, role, options, args=_multi_node_args(ref, role), probes=leader
    )
    # LWS <= 0.5 does not inject the index; the Downward API label works on every version.
    index = {"fieldRef": {"fieldPath": f"metadata.labels['{L.LWS_WORKER_INDEX}']"}}
    container["env"] = [*container["env"], {"name": "LWS_WORKER_INDEX", "valueFrom": index}]
    labels = _engine_pod_labels(
        revision, L.object_labels(ref.slug, ref.id, revision.number, role.role)
    )
    return {
        "metadata": template_meta(ref, labels),
        "spec": _pod_spec(ref, revision, role, options, container),
    }


def leader_worker_set(
    ref: DeploymentRef, revision: RevisionPlan, role: RolePlan, options: KubeOptions
) -> dict[str, Any]:
    """One replica = one group of ``nodes_per_replica`` pods; only the leader serves HTTP."""
    return {
        "apiVersion": LWS_API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": object_meta(ref, revision, L.object_name(ref.slug, role.role), role.role),
        "spec": {
            "replicas": revision.replicas_of(role),
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "leaderWorkerTemplate": {
                "size": role.nodes_per_replica,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _lws_template(ref, revision, role, options, leader=True),
                "workerTemplate": _lws_template(ref, revision, role, options, leader=False),
            },
        },
    }


def engine_service_name(ref: DeploymentRef, role: RolePlan) -> str:
    """A multi-node role's Service is named for the leaders it selects: the LWS controller
    names its own headless Service after the LeaderWorkerSet (the group's DNS, which
    LWS_LEADER_ADDRESS names), and one Plinth Service of that name would keep it from being made
    (or be refused as not Plinth's, had LWS made its own first)."""
    if role.multi_node:
        return L.object_name(ref.slug, f"{role.role}-leaders")
    return L.object_name(ref.slug, role.role)


def serving_selector(ref: DeploymentRef, role: RolePlan) -> dict[str, str]:
    """The pods of ``role`` that serve HTTP, for its Service and the router's discovery: all of
    them, or a multi-node role's group leaders (ranks >= 1 run no HTTP server; their pods carry
    the role's labels all the same, from the LeaderWorkerSet's worker template)."""
    selector = L.role_selector(ref.id, role.role)
    if role.multi_node:
        selector[L.LWS_WORKER_INDEX] = "0"
    return selector


def engine_service(ref: DeploymentRef, revision: RevisionPlan, role: RolePlan) -> dict[str, Any]:
    selector = serving_selector(ref, role)
    ports = [{"name": "http", "port": role.port, "targetPort": "http", "protocol": "TCP"}]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_meta(ref, revision, engine_service_name(ref, role), role.role),
        "spec": {"type": "ClusterIP", "selector": selector, "ports": ports},
    }


def disruption_budget(ref: DeploymentRef, revision: RevisionPlan, role: RolePlan) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(ref, revision, L.object_name(ref.slug, role.role), role.role),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": L.role_selector(ref.id, role.role)},
        },
    }
