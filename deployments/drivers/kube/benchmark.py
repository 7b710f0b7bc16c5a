"""Running a benchmark's Job on a cluster and reading its results back from the pod's log.

``run_benchmark`` is the kube driver's: the whole sweep as one Job in the endpoint's namespace,
its points handed on when the Job ends. The objects are ``benchmark_job``'s. They are applied
as Plinth's (server-side apply, field manager ``plinth``), the Job is watched by polling until it
succeeds, fails or runs past its deadline, and each ``PLINTH-RESULT <index> <json>`` line of the
pod's log is one load point's AIPerf export. The Secret (it holds the run's key) and the
ConfigMap are deleted whatever the outcome; the finished Job removes itself
(``ttlSecondsAfterFinished``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from deployments.cluster_settings import image_ref
from deployments.drivers.base import BenchmarkRun
from deployments.drivers.errors import PermanentDriverError
from deployments.drivers.kube import labels as L
from deployments.drivers.kube.benchmark_job import (
    RESULT_MARKER,
    benchmark_job,
    benchmark_secret,
    tokenizer_config_map,
)
from deployments.drivers.kube.client import KubeClient, kind_of
from deployments.drivers.kube.render import KubeOptions

LOG_LIMIT_BYTES = 8 * 1024 * 1024  # a few exports of a few kB each, with AIPerf's own output


def run_benchmark(
    client: KubeClient,
    options: KubeOptions,
    run: BenchmarkRun,
    on_point: Callable[[int, dict[str, Any]], None],
) -> None:
    """The sweep as one Job on ``options``' cluster settings; each export to ``on_point`` once
    the Job has ended."""
    ids = {
        "slug": run.slug,
        "deployment_id": run.deployment_id,
        "benchmark_id": run.benchmark_id,
        "namespace": run.namespace,
    }
    points = [point.argv for point in run.points]
    objects = [
        benchmark_secret(api_key=run.api_key, **ids),
        tokenizer_config_map(**ids),
        benchmark_job(
            points,
            deadline_s=int(run.deadline_s),
            cluster=options.cluster,
            platform_image=_platform_image(options.benchmark_image),
            **ids,
        ),
    ]
    exports = run_job(client, objects, points=len(points), deadline_s=run.deadline_s + 60)
    for index, export in enumerate(exports):
        on_point(index, export)


def _platform_image(image: str) -> str:
    """The installation's default AIPerf image (``PLINTH_BENCHMARK_IMAGE``; "" for Plinth's)."""
    try:
        return image_ref(image) if image else ""
    except ValueError:  # a deployment's mistake, named to whoever reads the benchmark's error
        raise PermanentDriverError(
            f"PLINTH_BENCHMARK_IMAGE={image!r} is not an image reference"
        ) from None


def run_job(
    client: KubeClient,
    objects: list[dict[str, Any]],
    *,
    points: int,
    deadline_s: float,
    poll_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[dict[str, Any]]:
    """Apply ``objects`` (the Job last), wait for the Job; the ``points`` exports, in order."""
    job = objects[-1]
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    try:
        for obj in objects:
            client.apply(obj, force=True)
        _wait(client, namespace, name, deadline_s, poll_s, clock, sleep)
        return _results(client, job, points)
    finally:
        for obj in objects[:-1]:
            kind = kind_of(obj["apiVersion"], obj["kind"])
            client.delete(kind, namespace, obj["metadata"]["name"])


def _wait(
    client: KubeClient,
    namespace: str,
    name: str,
    deadline_s: float,
    poll_s: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    jobs = kind_of("batch/v1", "Job")
    until = clock() + deadline_s
    while True:
        current = client.get(jobs, namespace, name) or {}
        status = current.get("status") or {}
        if status.get("succeeded"):
            return
        if status.get("failed"):
            raise PermanentDriverError(f"the benchmark Job {name} failed (see its pod's log)")
        if clock() > until:
            raise PermanentDriverError(f"the benchmark Job {name} ran past {deadline_s:.0f} s")
        sleep(poll_s)


def _results(client: KubeClient, job: dict[str, Any], points: int) -> list[dict[str, Any]]:
    namespace = job["metadata"]["namespace"]
    selector = {L.BENCHMARK: job["metadata"]["labels"][L.BENCHMARK]}
    pods = client.list(kind_of("v1", "Pod"), namespace, selector)
    if not pods:
        raise PermanentDriverError("the benchmark Job's pod is gone before its log was read")
    pod = pods[-1]["metadata"]["name"]
    log = client.pod_log(namespace, pod, container="aiperf", limit_bytes=LOG_LIMIT_BYTES)
    found: dict[int, dict[str, Any]] = {}
    for line in log.splitlines():
        if line.startswith(RESULT_MARKER + " "):
            _, index, body = line.split(" ", 2)
            try:
                found[int(index)] = json.loads(body)
            except ValueError:
                continue  # a malformed line counts as a missing point below
    missing = [i for i in range(points) if i not in found]
    if missing:
        raise PermanentDriverError(f"the benchmark Job's log has no result for point(s) {missing}")
    return [found[i] for i in range(points)]
