"""A quantization run on Kubernetes: the tool as a Job on a GPU node of the run's type (pure
manifests).

Objects, each labelled as Plinth's and as the run's (``L.QUANTIZATION``): a ConfigMap holding
the tool's JOB.json (and the uploaded calibration texts), a Secret holding the hub token only
when the source is a gated hub repository, and the Job. The Job's container runs the tool once
(``python -m plinth_quantize run --job /plinth/job/job.json``), its events on standard output,
which the worker reads back from the pod's log. The checkpoints land in the cluster's model
cache (mounted at ``runtime.spec.MODEL_CACHE_PATH`` as engines mount it), where endpoints load
them. A hub source is first downloaded there by an init container (``hf download``); the token
reaches it only as an environment variable from the Secret, never in the manifest's args.

Least privilege: no service account token, no service links, no privilege escalation, every
capability dropped, a read-only root filesystem (writable: the cache and an emptyDir /tmp), the
user the cluster runs engines as (they share the cache's files). Only a cache every node reads
(a named claim, or a node's path) can serve what the Job writes, so a cluster whose model cache
is per endpoint or none is refused before anything is applied (``cache_volume``).
"""

from __future__ import annotations

from typing import Any

from deployments.cluster_settings import ClaimCache, ClusterSettings, HostPathCache
from deployments.drivers.base import HF_TOKEN_ENV, QuantizationJob
from deployments.drivers.errors import PermanentDriverError
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.render.metadata import with_operator_metadata
from deployments.drivers.kube.render.pods import container_security, pod_scheduling
from runtime.spec import MODEL_CACHE_PATH

# Plinth's image of the tool (tools/quantize, its pinned requirements installed).
QUANTIZE_IMAGE = "ghcr.io/plinth-project/quantize:llmcompressor-0.14.0.1"
CONTAINER = "quantize"
JOB_MOUNT = "/plinth/job"
TOKEN_FIELD = "token"


def quantize_labels(job: QuantizationJob) -> dict[str, str]:
    return {
        L.MANAGED_BY: L.PLINTH,
        L.NAME: "plinth-quantize",
        L.COMPONENT: "quantization",
        L.QUANTIZATION: job.run_id,
    }


def _meta(name: str, job: QuantizationJob) -> dict[str, Any]:
    return {"name": name, "namespace": job.namespace, "labels": quantize_labels(job)}


def cache_volume(cluster: ClusterSettings) -> dict[str, Any]:
    """The model cache as every node reads it; PermanentDriverError where there is none."""
    chosen = cluster.model_cache
    if isinstance(chosen, ClaimCache):
        return {"name": "model-cache", "persistentVolumeClaim": {"claimName": chosen.claim_name}}
    if isinstance(chosen, HostPathCache):
        return {
            "name": "model-cache",
            "hostPath": {"path": chosen.path, "type": "DirectoryOrCreate"},
        }
    raise PermanentDriverError(
        "this cluster's model cache is per endpoint or none, so no endpoint could load a "
        "quantized checkpoint from it: an admin sets model_cache to a claim or a host path"
    )


def job_config_map(job: QuantizationJob, job_json: str, calibration: str) -> dict[str, Any]:
    data = {"job.json": job_json}
    if calibration:
        data["calibration.jsonl"] = calibration
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(job.name, job),
        "data": data,
    }


def token_secret(job: QuantizationJob) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _meta(f"{job.name}-hf", job),
        "type": "Opaque",
        "stringData": {TOKEN_FIELD: job.hf_token or ""},
    }


def _mounts() -> list[dict[str, Any]]:
    return [
        {"name": "model-cache", "mountPath": MODEL_CACHE_PATH},
        {"name": "tmp", "mountPath": "/tmp"},  # noqa: S108 - a volume mount
        {"name": "job", "mountPath": JOB_MOUNT, "readOnly": True},
    ]


def _env(job: QuantizationJob, *, offline: bool) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "HF_HOME", "value": MODEL_CACHE_PATH},
        {"name": "HOME", "value": "/tmp"},  # noqa: S108 - the pod's emptyDir
    ]
    if offline:
        env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    elif job.hf_token:
        secret = {"name": f"{job.name}-hf", "key": TOKEN_FIELD}
        env.append({"name": HF_TOKEN_ENV, "valueFrom": {"secretKeyRef": secret}})
    return env


def _download(job: QuantizationJob, image: str, security: dict[str, Any]) -> dict[str, Any]:
    args = ["download", job.source_repo, "--local-dir", job.job["source_path"]]
    if job.source_revision:
        args += ["--revision", job.source_revision]
    return {
        "name": "download",
        "image": image,
        "command": ["hf"],
        "args": args,
        "env": _env(job, offline=False),
        "volumeMounts": _mounts(),
        "securityContext": security,
    }


def quantize_job(
    job: QuantizationJob, *, cluster: ClusterSettings, image: str = ""
) -> dict[str, Any]:
    """The Job that runs ``job``'s attempt once on a node of its GPU type (no retries: the
    worker starts the next attempt itself, so it knows which one it reads)."""
    image = image or QUANTIZE_IMAGE
    security = {
        **container_security(read_only=True, run_as_user=cluster.engine_run_as_user),
        "capabilities": {"drop": ["ALL"]},
    }
    container = {
        "name": CONTAINER,
        "image": image,
        "command": ["python", "-m", "plinth_quantize"],
        "args": ["run", "--job", f"{JOB_MOUNT}/job.json"],
        "env": _env(job, offline=True),
        "resources": {
            "requests": {"cpu": "4", "memory": "32Gi"},
            "limits": {"nvidia.com/gpu": str(job.gpus), "memory": "64Gi"},
        },
        "volumeMounts": _mounts(),
        "securityContext": security,
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,  # it reads and writes files, never the cluster
        "containers": [container],
        "volumes": [
            cache_volume(cluster),
            {"name": "tmp", "emptyDir": {}},
            {"name": "job", "configMap": {"name": job.name}},
        ],
        **pod_scheduling(cluster),
    }
    if job.source_repo:
        pod["initContainers"] = [_download(job, image, security)]
    tolerations = [t.manifest() for t in (*cluster.gpu_tolerations, *cluster.tolerations)]
    if tolerations:
        pod["tolerations"] = tolerations
    if job.gpu:
        term = cluster.gpu_selector(job.gpu).node_selector_term()
        pod["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
            }
        }
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(job.name, job),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": job.deadline_s,
            "ttlSecondsAfterFinished": 24 * 3600,
            "template": {"metadata": {"labels": quantize_labels(job)}, "spec": pod},
        },
    }
    return with_operator_metadata(manifest, cluster)
