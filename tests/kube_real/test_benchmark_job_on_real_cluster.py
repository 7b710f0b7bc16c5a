"""A benchmark's objects (Secret, tokenizer ConfigMap, AIPerf Job) on the real API server, applied
as ``deployments.drivers.kube.benchmark.run_job`` applies them, with the worker's own token; the
real Job controller makes the pod and kwok runs it to completion. The cluster is set up as an
air-gapped one would be (AIPerf from a mirrored image behind a pull secret): the pod the
controller made runs that image and installs nothing. Reading the results back needs a kubelet's
log endpoint, which kwok's fake nodes do not serve here: that part stays with
tests/experiments/benchmark."""

from __future__ import annotations

from deployments.cluster_settings import parse_settings
from deployments.drivers import base
from deployments.drivers.kube.benchmark_job import (
    benchmark_job,
    benchmark_secret,
    tokenizer_config_map,
)
from deployments.drivers.kube.client import KubeClient, kind_of
from deployments.drivers.kube.driver import KubeDriver
from deployments.drivers.kube.labels import BENCHMARK
from deployments.experiments.benchmark.aiperf import aiperf_points
from deployments.experiments.benchmark.profile import parse_profile
from tests.drivers.reference_specs import load_spec, revision_plan
from tests.kube_real.conftest import SETTLE_S
from tests.waiting import wait_until

MIRROR = "registry.internal:5000/plinth/aiperf:0.13.0"
AIR_GAPPED = {
    "benchmark_aiperf": {"type": "image", "image": MIRROR},
    "image_pull_secrets": ["mirror-cred"],
    "labels": {"team": "ml"},
}


def test_a_benchmark_job_from_a_mirrored_image_is_accepted_and_runs_to_completion(
    worker_client: KubeClient, ref: base.DeploymentRef
) -> None:
    ids = {
        "slug": ref.slug,
        "deployment_id": ref.id,
        "benchmark_id": "0123456789ab",
        "namespace": ref.namespace,
    }
    profile = parse_profile({"concurrency": [1, 8], "duration_s": 20, "shared_prefix": 0.5})
    points = aiperf_points(
        profile,
        url="https://gw.example/endpoints/chat",
        model="chat",
        benchmark_id=ids["benchmark_id"],
        revision=1,
    )
    job = benchmark_job(
        points,
        deadline_s=900,
        cluster=parse_settings(AIR_GAPPED),
        **ids,
    )
    for obj in (benchmark_secret(api_key="pk_inf_test", **ids), tokenizer_config_map(**ids), job):
        worker_client.apply(obj, force=True)
    jobs = kind_of("batch/v1", "Job")
    name = job["metadata"]["name"]

    def succeeded() -> bool:
        current = worker_client.get(jobs, ref.namespace, name) or {}
        return bool((current.get("status") or {}).get("succeeded"))

    wait_until(succeeded, "the benchmark Job completes", SETTLE_S, interval=1.0)
    # The pod as the Job controller made it from what the API server kept.
    (pod,) = worker_client.list(kind_of("v1", "Pod"), ref.namespace, {BENCHMARK: "0123456789ab"})
    (container,) = pod["spec"]["containers"]
    assert container["image"] == MIRROR
    assert pod["spec"]["imagePullSecrets"] == [{"name": "mirror-cred"}]
    assert pod["metadata"]["labels"]["team"] == "ml"
    script = container["args"][0]
    assert "pip" not in script and script.splitlines()[1].startswith("aiperf profile")


def test_an_edit_during_a_benchmark_keeps_its_objects_and_its_pod_is_no_replica(
    driver: KubeDriver, worker_client: KubeClient, ref: base.DeploymentRef
) -> None:
    """The endpoint's apply prunes what its revision no longer renders; a benchmark's Job, Secret
    and ConfigMap are not the revision's, so an edit while one runs leaves them be, and the
    benchmark's pod is never counted as one of the endpoint's replicas. Deleting the endpoint
    takes them away with it."""
    first = revision_plan(load_spec("llama-3.1-8b-h100"))
    driver.apply(ref, first)
    ids = {
        "slug": ref.slug,
        "deployment_id": ref.id,
        "benchmark_id": "fedcba987654",
        "namespace": ref.namespace,
    }
    profile = parse_profile({"concurrency": [1], "duration_s": 20})
    points = aiperf_points(
        profile, url="https://gw.example/e", model="chat", benchmark_id=ids["benchmark_id"]
    )
    job = benchmark_job(points, deadline_s=900, **ids)
    objects = [benchmark_secret(api_key="pk_inf_test", **ids), tokenizer_config_map(**ids), job]
    for obj in objects:
        worker_client.apply(obj, force=True)

    def present() -> list[str]:
        """The benchmark's objects that exist and are not being deleted."""
        found = [
            worker_client.get(kind_of(o["apiVersion"], o["kind"]), ref.namespace, name)
            for o in objects
            if (name := o["metadata"]["name"])
        ]
        return [
            f["metadata"]["name"]
            for f in found
            if f is not None and not f["metadata"].get("deletionTimestamp")
        ]

    wait_until(
        lambda: worker_client.list(
            kind_of("v1", "Pod"), ref.namespace, {BENCHMARK: "fedcba987654"}
        ),
        "the benchmark's pod",
        SETTLE_S,
        interval=0.5,
    )
    edited = revision_plan(load_spec("llama-3.1-8b-ngram-h100"), number=2)
    driver.apply(ref, edited)
    assert len(present()) == len(objects)
    observed = driver.observe(ref)
    assert {r.revision for r in observed.replicas} <= {1, 2}
    assert all("bench" not in r.name for r in observed.replicas)
    wait_until(lambda: driver.delete(ref), "the endpoint is deleted", SETTLE_S, interval=1.0)
    assert present() == []
