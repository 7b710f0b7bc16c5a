"""The benchmark's Kubernetes objects: strict schemas, the pinned image, and the key kept out of
the manifest's command (it arrives from the Secret as an environment variable); where AIPerf
comes from (an image, by default: no package index needed) and the cluster's settings for every
pod."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest

from deployments.aiperf import AIPERF_IMAGE, AIPERF_VERSION, PYTHON_IMAGE
from deployments.cluster_settings import ClusterSettings, parse_settings
from deployments.drivers.kube.benchmark_job import (
    KEY_ENV,
    RESULT_MARKER,
    TOKENIZER_MOUNT,
    benchmark_job,
    benchmark_secret,
    tokenizer_config_map,
)
from deployments.experiments.benchmark.aiperf import aiperf_points
from deployments.experiments.benchmark.profile import parse_profile

VERSIONS = ["1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0"]
KEY = "pk_inf_sentinel_value_never_in_a_manifest"
IDS = {"slug": "chat", "deployment_id": "6f1c", "benchmark_id": "0123456789ab", "namespace": "t"}
PROFILE = parse_profile({"concurrency": [1, 8], "duration_s": 20, "shared_prefix": 0.5})


DOCKERFILE = Path(__file__).resolve().parents[3] / "docker" / "aiperf" / "Dockerfile"
# An air-gapped cluster's settings: a mirrored AIPerf image behind a pull secret, and pods kept
# to a pool.
AIR_GAPPED = {
    "benchmark_aiperf": {"type": "image", "image": "registry.internal:5000/plinth/aiperf:0.13.0"},
    "image_pull_secrets": ["mirror-cred"],
    "node_selector": {"pool": "cpu"},
    "tolerations": [{"key": "dedicated", "value": "bench", "effect": "NoSchedule"}],
    "priority_class_name": "batch",
    "labels": {"team": "ml"},
    "annotations": {"example.com/owner": "ml-platform"},
}
FROM_INDEX = {"benchmark_aiperf": {"type": "pip", "index_url": "https://pypi.internal/simple"}}


def _job(cluster: ClusterSettings | None = None, platform_image: str = "") -> dict:
    return benchmark_job(
        aiperf_points(
            PROFILE,
            url="https://gw.example/endpoints/chat",
            model="chat",
            benchmark_id=IDS["benchmark_id"],
            revision=3,
        ),
        deadline_s=900,
        cluster=cluster,
        platform_image=platform_image,
        **IDS,
    )


def _container(job: dict) -> dict:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


def _objects() -> list[dict]:
    return [
        _job(),
        _job(parse_settings(AIR_GAPPED)),
        _job(parse_settings(FROM_INDEX)),
        benchmark_secret(api_key=KEY, **IDS),
        tokenizer_config_map(**IDS),
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_objects_validate_strictly(version: str) -> None:
    for obj in _objects():
        kubernetes_validate.validate(obj, version, strict=True)


def test_by_default_the_job_runs_aiperf_from_plinths_image_and_installs_nothing() -> None:
    container = _container(_job())
    assert container["image"] == AIPERF_IMAGE == f"ghcr.io/plinth-project/aiperf:{AIPERF_VERSION}"
    script = container["args"][0]
    # Nothing fetched: no installer, and the only address the pod is given is the gateway's.
    assert "pip" not in script and "install" not in script
    assert re.findall(r"https?://[^\s'\"]+", script) == ["https://gw.example/endpoints/chat"] * 2
    assert script.splitlines()[1].startswith("aiperf profile")
    # The platform's default (PLINTH_BENCHMARK_IMAGE) comes next, and a cluster's choice first.
    assert _container(_job(platform_image="mirror.example/aiperf:1"))["image"] == (
        "mirror.example/aiperf:1"
    )
    mirrored = _container(_job(parse_settings(AIR_GAPPED), platform_image="mirror.example/a:1"))
    assert mirrored["image"] == "registry.internal:5000/plinth/aiperf:0.13.0"
    assert "pip" not in mirrored["args"][0]


def test_pip_from_a_package_index_is_only_an_operators_explicit_choice() -> None:
    assert ClusterSettings().benchmark_aiperf.type == "image"
    container = _container(_job(parse_settings(FROM_INDEX)))
    assert container["image"] == PYTHON_IMAGE
    install = container["args"][0].splitlines()[1]
    assert "pip install" in install and f"aiperf=={AIPERF_VERSION}" in install
    assert "--index-url https://pypi.internal/simple" in install


def test_the_pod_takes_the_clusters_settings_for_every_pod_but_no_gpu_placement() -> None:
    job = _job(parse_settings(AIR_GAPPED))
    pod = job["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "mirror-cred"}]
    assert pod["nodeSelector"] == {"pool": "cpu"} and pod["priorityClassName"] == "batch"
    assert pod["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "bench", "effect": "NoSchedule"}
    ]  # the cluster's own, not the GPU nodes' (the pod needs no GPU)
    assert "affinity" not in pod and "nvidia.com/gpu" not in str(pod["containers"])
    for meta in (job["metadata"], job["spec"]["template"]["metadata"]):
        assert meta["labels"]["team"] == "ml" and meta["labels"]["plinth.dev/benchmark"]
        assert meta["annotations"] == {"example.com/owner": "ml-platform"}


def test_plinths_aiperf_image_is_built_with_the_pinned_version_and_python() -> None:
    text = DOCKERFILE.read_text()
    assert f"ARG AIPERF_VERSION={AIPERF_VERSION}\n" in text
    assert f"ARG PYTHON_IMAGE={PYTHON_IMAGE}\n" in text
    assert f"aiperf:{AIPERF_VERSION} docker/aiperf" in text  # the build line names the tag


def test_the_job_runs_the_pinned_aiperf_once_per_point_without_the_key_in_its_command() -> None:
    job = _job()
    container = _container(job)
    script = container["args"][0]
    assert script.count("aiperf profile") == 2 and script.count(RESULT_MARKER) == 2
    assert "--concurrency 1\n" in script and "--concurrency 8\n" in script
    assert f"--tokenizer {TOKENIZER_MOUNT}" in script and "--use-server-token-count" in script
    assert f'--api-key "${KEY_ENV}"' in script
    assert "--header X-Plinth-Revision:03" in script  # pinned to the benchmarked revision
    assert "--extra-inputs ignore_eos:true --extra-inputs min_tokens:" in script  # answer length
    assert KEY not in str(job)
    (env,) = [e for e in container["env"] if e["name"] == KEY_ENV]
    assert env["valueFrom"]["secretKeyRef"]["name"] == job["metadata"]["name"]
    settings = {e["name"]: e.get("value") for e in container["env"]}
    assert settings["AIPERF_METRICS_OSL_MISMATCH_PCT_THRESHOLD"] == "0"  # as on the local runner
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] == 900
    assert subprocess.run(["sh", "-n", "-c", script], check=False).returncode == 0
    labels = job["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "plinth" and labels["plinth.dev/benchmark-of"]


def test_the_tokenizer_travels_in_a_config_map() -> None:
    config_map = tokenizer_config_map(**IDS)
    assert set(config_map["data"]) == {"tokenizer.json", "tokenizer_config.json"}
    assert sum(len(v) for v in config_map["data"].values()) < 1024 * 1024  # a ConfigMap's limit
    assert benchmark_secret(api_key=KEY, **IDS)["stringData"] == {"api-key": KEY}
