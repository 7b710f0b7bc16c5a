"""A quantization run's objects (its job ConfigMap, the hub token Secret, the tool's Job) on the
real API server, applied by the kube driver with the worker's own token, as a run of a gated hub
model on an H100: the real Job controller makes the pod, the real scheduler puts it on a node of
that GPU type (tolerating the GPU taint), and the pod is what the renderer meant: the tool's
image and command, the job file from the ConfigMap, the model cache mounted where engines mount
it, the token only from the Secret (in no argument), least privilege. kwok's nodes have no GPU
and run no container, so the tool itself never runs here (tests/quantize runs it for real on
the local driver); this checks the shape the real API server accepts and schedules.
"""

from __future__ import annotations

from deployments.drivers import base
from deployments.drivers.kube.client import KubeClient, kind_of
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.labels import QUANTIZATION
from deployments.drivers.kube.render.quantize import CONTAINER, QUANTIZE_IMAGE
from runtime.catalog import GPU_PRODUCT_LABEL, get_gpu
from runtime.spec import MODEL_CACHE_PATH
from tests.kube_real.conftest import SETTLE_S, Admin
from tests.waiting import wait_until

RUN = "7c1e0d5a-0000-4000-8000-000000000031"
TOKEN = "hf_quantize_test_token"


def _job(namespace: str) -> base.QuantizationJob:
    out = f"{MODEL_CACHE_PATH}/plinth-quantized/{RUN}"
    return base.QuantizationJob(
        run_id=RUN,
        attempt=1,
        namespace=namespace,
        job={
            "source_path": f"{MODEL_CACHE_PATH}/plinth-sources/acme/gated-8b",
            "format": "fp8",
            "propose": True,
            "candidates": [],
            "calibration": {"path": None, "samples": 64, "max_seq_len": 512},
            "eval": {"path": None, "samples": 16},
            "output_dir": out,
        },
        gpu="H100-SXM",
        calibration=("a calibration text",),
        source_repo="acme/gated-8b",
        hf_token=TOKEN,
    )


def test_a_quantization_job_is_accepted_and_scheduled_on_a_gpu_node_of_its_type(
    driver: KubeDriver, worker_client: KubeClient, ref: base.DeploymentRef, admin: Admin
) -> None:
    job = _job(ref.namespace)
    driver.start_quantization(job)
    driver.start_quantization(job)  # a restarted worker applies it again: nothing changes
    pods = kind_of("v1", "Pod")

    def scheduled() -> list[dict[str, object]]:
        found = worker_client.list(pods, ref.namespace, {QUANTIZATION: RUN})
        return [p for p in found if (p.get("spec") or {}).get("nodeName")]

    wait_until(scheduled, "the quantization pod is scheduled", SETTLE_S, interval=1.0)
    (pod,) = scheduled()
    node = admin.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")  # type: ignore[index]
    assert node is not None
    assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] in get_gpu("H100-SXM").gpu_products
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False  # type: ignore[index]
    (container,) = spec["containers"]  # type: ignore[index]
    assert (container["name"], container["image"]) == (CONTAINER, QUANTIZE_IMAGE)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert MODEL_CACHE_PATH in mounts and mounts["/plinth/job"]["readOnly"] is True
    (download,) = spec["initContainers"]  # type: ignore[index]
    token_env = next(e for e in download["env"] if e["name"] == "HF_TOKEN")
    assert token_env["valueFrom"]["secretKeyRef"]["key"] == "token"
    everywhere = str([download["args"], container["args"], container["env"]])
    assert TOKEN not in everywhere and TOKEN not in str(pod)
    config = worker_client.get(kind_of("v1", "ConfigMap"), ref.namespace, job.name)
    assert config is not None and '"calibration.jsonl"' not in config["data"]["job.json"]
    assert "/plinth/job/calibration.jsonl" in config["data"]["job.json"]
    driver.remove_quantization(job)  # foreground deletion: the Job goes once its pod has
    wait_until(
        lambda: worker_client.get(kind_of("batch/v1", "Job"), ref.namespace, job.name) is None,
        "the Job is gone",
        SETTLE_S,
        interval=1.0,
    )
    assert worker_client.get(kind_of("v1", "Secret"), ref.namespace, f"{job.name}-hf") is None
