"""Model weights in the cluster's cache: the endpoint's own claim (an ``rwx`` cache), the Job
that downloads into a shared claim once, and the init containers of an engine pod (download
per node into a hostPath cache, or wait for the Job's markers)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from deployments.cluster_settings import (
    ClaimCache,
    ClusterSettings,
    HostPathCache,
    NoCache,
    SharedClaimCache,
)
from deployments.drivers.base import DeploymentRef, RevisionPlan
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.render.metadata import (
    hf_token_env,
    object_meta,
    with_operator_metadata,
)
from deployments.drivers.kube.render.options import KubeOptions
from deployments.drivers.kube.render.pods import (
    cache_env,
    cache_mounts,
    cache_volume,
    container_security,
    engine_image,
    literal,
    pod_scheduling,
)
from deployments.drivers.kube.weights import DOWNLOAD_SCRIPT, WAIT_SCRIPT, Weights, weights_of
from runtime.launch import RolePlan
from runtime.spec import MODEL_CACHE_PATH


def download_by_job(cluster: ClusterSettings) -> bool:
    """A claim is shared by every node: one Job downloads for all of them."""
    return isinstance(cluster.model_cache, ClaimCache | SharedClaimCache)


def engine_downloads(cluster: ClusterSettings) -> bool:
    """No shared cache: the engine downloads (and needs the hub token) itself."""
    return isinstance(cluster.model_cache, NoCache)


def model_cache_claim(
    ref: DeploymentRef, revision: RevisionPlan, cache: SharedClaimCache
) -> dict[str, Any]:
    """The endpoint's own ReadWriteMany claim for weights: every replica, on any node, reads
    what the first one downloaded. Removed with the endpoint."""
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": f"{cache.size_gib}Gi"}},
    }
    if cache.storage_class:
        spec["storageClassName"] = cache.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": object_meta(ref, revision, L.object_name(ref.slug, "model-cache"), "engine"),
        "spec": spec,
    }


def _weights_container(
    ref: DeploymentRef,
    revision: RevisionPlan,
    name: str,
    weights: Weights,
    image: str,
    cluster: ClusterSettings,
) -> dict[str, Any]:
    """Downloads ``weights`` into the cache unless its marker is there; the one container of
    the endpoint that gets the hub token when a cache is shared."""
    env = [
        *cache_env(),
        {"name": "PLINTH_WEIGHTS_REPO", "value": literal(weights.repo)},
        {"name": "PLINTH_WEIGHTS_MARKER", "value": literal(weights.marker)},
    ]
    if weights.revision:
        env.append({"name": "PLINTH_WEIGHTS_REVISION", "value": literal(weights.revision)})
    if revision.hf_token:
        env.append(hf_token_env(ref))
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", literal(DOWNLOAD_SCRIPT)],
        "env": env,
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "8Gi"}},
        "volumeMounts": cache_mounts(),
        "securityContext": container_security(
            read_only=cluster.read_only_root, run_as_user=cluster.engine_run_as_user
        ),
    }


def _wait_container(weights: list[Weights], image: str, cluster: ClusterSettings) -> dict[str, Any]:
    """Holds the engine back until the download Job has filled the shared cache: no token,
    no network, the cache read-only."""
    markers = " ".join(w.marker for w in weights)
    return {
        "name": "wait-for-weights",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", literal(WAIT_SCRIPT)],
        "env": [{"name": "PLINTH_WEIGHTS_MARKERS", "value": literal(markers)}],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "volumeMounts": [{"name": "model-cache", "mountPath": MODEL_CACHE_PATH, "readOnly": True}],
        "securityContext": container_security(
            read_only=True, run_as_user=cluster.engine_run_as_user
        ),
    }


def engine_init_containers(
    ref: DeploymentRef, revision: RevisionPlan, role: RolePlan, cluster: ClusterSettings
) -> list[dict[str, Any]]:
    """Per node (a hostPath cache): download unless there already. Per claim: wait for the
    Job. Without a shared cache: nothing, the engine downloads itself."""
    weights = weights_of(revision)
    if not weights or engine_downloads(cluster):
        return []
    image = engine_image(role, revision, cluster)
    if download_by_job(cluster):
        return [_wait_container(weights, image, cluster)]
    return [
        _weights_container(ref, revision, f"weights-{at}", w, image, cluster)
        for at, w in enumerate(weights)
    ]


def prestages(revision: RevisionPlan, cluster: ClusterSettings) -> bool:
    """Pre-staging asked for, where it helps: a per-node cache (hostPath) and a GPU type to
    find the nodes by. A claim is shared by every node already (its Job downloads once); without
    a cache there is nowhere to keep the weights."""
    return (
        revision.prestage_weights
        and bool(revision.gpu)
        and isinstance(cluster.model_cache, HostPathCache)
        and bool(weights_of(revision))
    )


def prestage_daemonset(
    ref: DeploymentRef, revision: RevisionPlan, options: KubeOptions
) -> dict[str, Any]:
    """Keeps the endpoint's weights in the model cache of every node of its GPU type: per node,
    init containers download what is missing (the same steps as an engine pod's, which then
    find the marker and skip), then a container that only sleeps holds the node's place, so a
    node that joins gets the weights too. It runs the engine's image, which pulling also
    pre-stages. Its pods carry no endpoint label (never taken for replicas) and ask for no GPU.
    """
    cluster = options.cluster
    engines = [r for r in revision.plan.roles if r.role != "router"]
    image = engine_image(engines[0], revision, cluster)
    inits = [
        _weights_container(ref, revision, f"weights-{at}", w, image, cluster)
        for at, w in enumerate(weights_of(revision))
    ]
    hold = {
        "name": "hold",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait; done"],
        "resources": {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"memory": "32Mi"}},
        "securityContext": container_security(
            read_only=True, run_as_user=cluster.engine_run_as_user
        ),
    }
    selector = cluster.gpu_selector(revision.gpu)
    pod: dict[str, Any] = {
        "initContainers": inits,
        "containers": [hold],
        "volumes": [cache_volume(ref, cluster), {"name": "tmp", "emptyDir": {}}],
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 5,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [selector.node_selector_term()]
                }
            }
        },
        **pod_scheduling(cluster),
    }
    # On the GPU nodes, with the engines' tolerations for their taints (the cluster's).
    tolerations = [t.manifest() for t in (*cluster.gpu_tolerations, *cluster.tolerations)]
    if tolerations:
        pod["tolerations"] = tolerations
    match = {L.MANAGED_BY: L.PLINTH, L.PRESTAGE_OF: ref.id}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": object_meta(ref, revision, L.object_name(ref.slug, "prestage"), L.PRESTAGE),
        "spec": {
            "selector": {"matchLabels": match},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {"metadata": {"labels": match}, "spec": pod},
        },
    }


def weights_job(
    ref: DeploymentRef, revision: RevisionPlan, weights: list[Weights], options: KubeOptions
) -> dict[str, Any]:
    """Downloads the weights into the shared claim once; engine pods wait for its markers.

    Named by a digest of its pod template, which Kubernetes never lets change: other models
    (or other download settings) make a new Job, and the old one is pruned. Its pods carry no
    endpoint label, so they are never taken for replicas; deleting the Job (foreground) takes
    them with it.

    A failed download is reported in its own words (``observe.download_failures``): each try is
    a pod of its own (``Never`` restarts in place), kept once failed with its last log lines as
    its termination message. Five tries (about 2.5 min of back-off between them) fit well inside
    the shortest startup window (10 min), so the rollout fails with the download's reason
    rather than with a window that ran out while it was still retrying.
    """
    cluster = options.cluster
    engines = [r for r in revision.plan.roles if r.role != "router"]
    image = engine_image(engines[0], revision, cluster)
    containers = [
        {
            **_weights_container(ref, revision, f"weights-{at}", w, image, cluster),
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }
        for at, w in enumerate(weights)
    ]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": containers,
        "volumes": [cache_volume(ref, cluster), {"name": "tmp", "emptyDir": {}}],
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,  # it calls the hub, never the cluster
        **pod_scheduling(cluster),
    }
    if cluster.tolerations:
        pod["tolerations"] = [t.manifest() for t in cluster.tolerations]
    if cluster.engine_run_as_user is not None:
        pod["securityContext"] = {"fsGroup": cluster.engine_run_as_user}
    labels = {
        k: v
        for k, v in L.object_labels(ref.slug, ref.id, revision.number, L.WEIGHTS).items()
        if k not in (L.DEPLOYMENT, L.REVISION, L.ROLE)
    }
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        # Its revision label says which revision's rollout a failure of it fails.
        "metadata": object_meta(ref, revision, "", L.WEIGHTS),
        "spec": {"backoffLimit": 4, "template": {"metadata": {"labels": labels}, "spec": pod}},
    }
    job = with_operator_metadata(job, cluster)
    digest = hashlib.sha256(json.dumps(job["spec"], sort_keys=True).encode()).hexdigest()[:10]
    job["metadata"]["name"] = L.object_name(ref.slug, f"weights-{digest}")
    return job
