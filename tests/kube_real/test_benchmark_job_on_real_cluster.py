"""A benchmark's objects (Secret, tokenizer ConfigMap, AIPerf Job) on the real API server, applied
as ``deployments.drivers.kube.benchmark.run_job`` applies them, with the worker's own token; kwok
runs the Job's pod to completion. Reading the results back needs a kubelet's log endpoint, which
kwok's fake nodes do not serve here: that part stays with tests/benchmarks."""

from __future__ import annotations

from deployments.benchmark_profile import parse_profile
from deployments.drivers import base
from deployments.drivers.kube.benchmark_job import (
    benchmark_job,
    benchmark_secret,
    tokenizer_config_map,
)
from deployments.drivers.kube.client import KubeClient, kind_of
from tests.kube_real.conftest import SETTLE_S
from tests.waiting import wait_until


def test_a_benchmark_job_is_accepted_and_runs_to_completion(
    worker_client: KubeClient, ref: base.DeploymentRef
) -> None:
    ids = {
        "slug": ref.slug,
        "deployment_id": ref.id,
        "benchmark_id": "0123456789ab",
        "namespace": ref.namespace,
    }
    profile = parse_profile({"concurrency": [1, 8], "duration_s": 20, "shared_prefix": 0.5})
    job = benchmark_job(
        profile,
        url="https://gw.example/endpoints/chat",
        model="chat",
        deadline_s=900,
        revision=1,
        **ids,
    )
    for obj in (benchmark_secret(api_key="pk_inf_test", **ids), tokenizer_config_map(**ids), job):
        worker_client.apply(obj, force=True)
    jobs = kind_of("batch/v1", "Job")

    def succeeded() -> bool:
        current = worker_client.get(jobs, ref.namespace, job["metadata"]["name"]) or {}
        return bool((current.get("status") or {}).get("succeeded"))

    wait_until(succeeded, "the benchmark Job completes", SETTLE_S, interval=1.0)
