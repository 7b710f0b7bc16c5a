"""Running a quantization attempt's Job on a cluster and reading its events from the pod's log.

``start`` applies ``render.quantize``'s objects as Plinth's (server-side apply, field manager
``plinth``; applying again changes nothing, so a restarted worker may call it again). ``read``
tells the attempt's state from the Job's status, and its events from its pod's log (every
line; the caller skips those it has read). ``remove`` deletes the Job (its pods with it) and
the ConfigMap and Secret; the checkpoints in the model cache stay.
"""

from __future__ import annotations

import json

from deployments.drivers import base
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.client import KubeClient, kind_of
from deployments.drivers.kube.render import KubeOptions
from deployments.drivers.kube.render.quantize import (
    CONTAINER,
    JOB_MOUNT,
    job_config_map,
    quantize_job,
    token_secret,
)

LOG_LIMIT_BYTES = 4 * 1024 * 1024
_JOBS = ("batch/v1", "Job")


def objects(job: base.QuantizationJob, options: KubeOptions) -> list[dict[str, object]]:
    """The attempt's objects, the Job last."""
    spec = dict(job.job)
    calibration = "".join(json.dumps({"text": t}) + "\n" for t in job.calibration)
    if calibration:
        spec["calibration"] = {**spec["calibration"], "path": f"{JOB_MOUNT}/calibration.jsonl"}
    made = [job_config_map(job, json.dumps(spec), calibration)]
    if job.source_repo and job.hf_token:
        made.append(token_secret(job))
    made.append(quantize_job(job, cluster=options.cluster, image=options.quantize_image))
    return made


def start(client: KubeClient, options: KubeOptions, job: base.QuantizationJob) -> None:
    for obj in objects(job, options):
        client.apply(obj, force=True)


def read(client: KubeClient, job: base.QuantizationJob) -> base.QuantizationProgress:
    found = client.get(kind_of(*_JOBS), job.namespace, job.name)
    output = str(job.job["output_dir"])
    if found is None:
        return base.QuantizationProgress(base.QUANTIZE_GONE, output_dir=output)
    status = found.get("status") or {}
    lines = tuple(_log_lines(client, job))
    if status.get("succeeded"):
        return base.QuantizationProgress(base.QUANTIZE_SUCCEEDED, lines, "", output)
    if status.get("failed"):
        reason = _condition(status)
        message = f"the quantization Job {job.name} failed{reason} (see its pod's log)"
        return base.QuantizationProgress(base.QUANTIZE_FAILED, lines, message, output)
    return base.QuantizationProgress(base.QUANTIZE_RUNNING, lines, "", output)


def _condition(status: dict[str, object]) -> str:
    for condition in status.get("conditions") or []:  # type: ignore[attr-defined]
        if condition.get("type") == "Failed" and condition.get("status") == "True":
            return f": {condition.get('reason', '')} {condition.get('message', '')}".rstrip()
    return ""


def _log_lines(client: KubeClient, job: base.QuantizationJob) -> list[str]:
    pods = client.list(kind_of("v1", "Pod"), job.namespace, {L.QUANTIZATION: job.run_id})
    mine = [p for p in pods if p["metadata"].get("labels", {}).get("job-name") == job.name]
    if not mine:
        return []
    running = (mine[-1].get("status") or {}).get("containerStatuses") or []
    if not running:  # still pulling or downloading the source: no log yet
        return []
    pod = mine[-1]["metadata"]["name"]
    log = client.pod_log(job.namespace, pod, container=CONTAINER, limit_bytes=LOG_LIMIT_BYTES)
    return [line for line in log.split("\n")[:-1] if line.strip()]


def remove(client: KubeClient, job: base.QuantizationJob) -> bool:
    gone = client.delete(kind_of(*_JOBS), job.namespace, job.name)
    client.delete(kind_of("v1", "ConfigMap"), job.namespace, job.name)
    client.delete(kind_of("v1", "Secret"), job.namespace, f"{job.name}-hf")
    return bool(gone)
