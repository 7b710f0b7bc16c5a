"""The benchmark's Kubernetes objects: strict schemas, the pinned image, and the key kept out of
the manifest's command (it arrives from the Secret as an environment variable)."""

from __future__ import annotations

import subprocess

import kubernetes_validate
import pytest

from deployments.benchmark_profile import parse_profile
from deployments.drivers.kube.benchmark_job import (
    KEY_ENV,
    RESULT_MARKER,
    TOKENIZER_MOUNT,
    benchmark_job,
    benchmark_secret,
    tokenizer_config_map,
)
from deployments.tools_env import AIPERF_IMAGE, AIPERF_VERSION

VERSIONS = ["1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0"]
KEY = "pk_inf_sentinel_value_never_in_a_manifest"
IDS = {"slug": "chat", "deployment_id": "6f1c", "benchmark_id": "0123456789ab", "namespace": "t"}
PROFILE = parse_profile({"concurrency": [1, 8], "duration_s": 20, "shared_prefix": 0.5})


def _job() -> dict:
    return benchmark_job(
        PROFILE,
        url="https://gw.example/endpoints/chat",
        model="chat",
        deadline_s=900,
        revision=3,
        **IDS,
    )


def _objects() -> list[dict]:
    return [_job(), benchmark_secret(api_key=KEY, **IDS), tokenizer_config_map(**IDS)]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_objects_validate_strictly(version: str) -> None:
    for obj in _objects():
        kubernetes_validate.validate(obj, version, strict=True)


def test_the_job_runs_the_pinned_aiperf_once_per_point_without_the_key_in_its_command() -> None:
    job = _job()
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == AIPERF_IMAGE
    script = container["args"][0]
    assert f"aiperf=={AIPERF_VERSION}" in script
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
    assert labels["app.kubernetes.io/managed-by"] == "plinth" and labels["plinth.dev/deployment"]


def test_the_tokenizer_travels_in_a_config_map() -> None:
    config_map = tokenizer_config_map(**IDS)
    assert set(config_map["data"]) == {"tokenizer.json", "tokenizer_config.json"}
    assert sum(len(v) for v in config_map["data"].values()) < 1024 * 1024  # a ConfigMap's limit
    assert benchmark_secret(api_key=KEY, **IDS)["stringData"] == {"api-key": KEY}
