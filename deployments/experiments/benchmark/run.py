"""Running one benchmark: claim it, mint its key, run AIPerf per load point, store, revoke.

Called by the ``deployments.run_benchmark`` task. The claim is a conditional UPDATE (queued ->
running) that must change exactly one row, so a message delivered twice runs the benchmark once.
The run calls the endpoint's gateway URL with a temporary inference key limited to that endpoint
and expiring soon after the run's longest possible end; the key is revoked when the run ends,
whatever the outcome. Its usage rows are the benchmark's traffic (``Benchmark.api_key``), which is
how usage labels it. Every request pins the benchmark's revision at the gateway
(``X-Plinth-Revision``), so a canary's revision is measured alone. Each point's figures are
stored as soon as it ends, so a long sweep shows progress, and a failed point keeps the ones
before it.

The sweep runs through the cluster's driver (``deployments.clusters.drivers.driver_for``), like
every other cluster action, given AIPerf's command lines as plain values (``BenchmarkRun``). The
local driver runs AIPerf as a subprocess from the tools environment, point by point; the kube
driver runs the whole sweep as one Job in the endpoint's namespace and reads the results from the
pod's log, so its points are stored when the Job ends.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from controlplane import audit
from controlplane import services as platform
from controlplane.access import system_actor
from deployments.aiperf import AIPERF_VERSION
from deployments.clusters.drivers import driver_for
from deployments.drivers.base import BenchmarkPoint, BenchmarkRun
from deployments.drivers.errors import DriverError
from deployments.endpoints.timeline import record_event
from deployments.experiments.benchmark.aiperf import GRACE_S, aiperf_points, parse_export
from deployments.experiments.benchmark.profile import (
    MAX_POINTS,
    MAX_TOTAL_S,
    PointResult,
    TrafficProfile,
    load_points,
    profile_from_dict,
)
from deployments.experiments.models import Benchmark, BenchmarkStatus
from deployments.experiments.queries import running_canary_numbers
from runtime.spec import RuntimeSpec

logger = logging.getLogger(__name__)
STARTUP_ALLOWANCE_S = 180  # AIPerf's own start-up (and, the first time, the tools env's install)
# The longest a run may take (the task's hard limit): a benchmark "running" for longer lost its
# worker, and one "queued" for longer lost its message.
RUN_LIMIT_S = MAX_TOTAL_S + MAX_POINTS * (STARTUP_ALLOWANCE_S + GRACE_S + 30)


def _budget_s(profile: TrafficProfile) -> float:
    per_point = profile.duration_s + GRACE_S + STARTUP_ALLOWANCE_S
    return per_point * len(load_points(profile))


def gateway_base_url(slug: str) -> str:
    """The endpoint's URL as callers see it, without ``/v1`` (AIPerf appends the path)."""
    return f"{settings.GATEWAY_PUBLIC_URL.rstrip('/')}/endpoints/{slug}"


def run_benchmark(benchmark_id: str) -> str:
    """Run a queued benchmark to its end; the status it ended in ("skipped" if not queued)."""
    now = timezone.now()
    claimed = Benchmark.objects.filter(pk=benchmark_id, status=BenchmarkStatus.QUEUED).update(
        status=BenchmarkStatus.RUNNING, started_at=now
    )
    if claimed != 1:
        return "skipped"
    benchmark = Benchmark.objects.select_related(
        "deployment__organization", "deployment__cluster", "revision"
    ).get(pk=benchmark_id)
    deployment = benchmark.deployment
    actor = system_actor(deployment.organization)
    profile = profile_from_dict(benchmark.profile)
    created = platform.create_api_key(
        actor,
        name=f"benchmark {str(benchmark.pk)[:8]}",
        kind="inference",
        allowed_deployment_ids=[deployment.pk],
        expires_at=now + timedelta(seconds=_budget_s(profile) + 60),
        temporary=True,  # hidden from key lists; capped at an hour (profiles are kept shorter)
    )
    benchmark.api_key = created.api_key
    benchmark.runner = deployment.cluster.kind
    benchmark.tool_version = AIPERF_VERSION
    benchmark.served_revisions = _serving_revisions(benchmark)
    benchmark.save(update_fields=["api_key", "runner", "tool_version", "served_revisions"])
    record_event(
        deployment,
        "info",
        "BenchmarkStarted",
        f"benchmark {_label(benchmark)} started: AIPerf {AIPERF_VERSION}, "
        f"{len(load_points(profile))} load point(s) of {profile.duration_s} s",
        revision_number=benchmark.revision.number,
        data={"benchmark": str(benchmark.pk)},
    )
    try:
        _run(benchmark, profile, created.plaintext)
        status, error = BenchmarkStatus.SUCCEEDED, ""
    except DriverError as exc:
        status, error = BenchmarkStatus.FAILED, exc.message
    except Exception as exc:  # never leave a benchmark running with a live key
        logger.exception("benchmark %s failed", benchmark_id)
        status, error = BenchmarkStatus.FAILED, f"the run failed: {type(exc).__name__}"
    finally:
        platform.revoke_api_key(actor, key_id=created.api_key.pk)
    _finish(benchmark, status, error)
    return str(status)


def _model(benchmark: Benchmark) -> str:
    spec = RuntimeSpec.model_validate(benchmark.revision.spec)
    return spec.model.served_name or str(spec.model.source)


def _store(benchmark: Benchmark, result: PointResult) -> None:
    benchmark.results = [*benchmark.results, result.as_dict()]
    benchmark.save(update_fields=["results"])


def _run(benchmark: Benchmark, profile: TrafficProfile, api_key: str) -> None:
    """The sweep on the endpoint's cluster; each point stored as soon as the driver has it."""
    points = load_points(profile)

    def store(index: int, export: dict[str, Any]) -> None:
        point = points[index]
        _store(benchmark, parse_export(export, point, output_tokens=profile.output_tokens))

    driver = driver_for(benchmark.deployment.cluster)
    try:
        driver.run_benchmark(_benchmark_run(benchmark, profile, api_key), store)
    finally:
        driver.close()


def _benchmark_run(benchmark: Benchmark, profile: TrafficProfile, api_key: str) -> BenchmarkRun:
    """What the driver is given: AIPerf's command lines against the endpoint's gateway URL, each
    request pinned to the benchmark's revision."""
    deployment = benchmark.deployment
    argvs = aiperf_points(
        profile, url=gateway_base_url(deployment.slug), model=_model(benchmark),
        benchmark_id=str(benchmark.pk), revision=benchmark.revision.number,
    )  # fmt: skip
    points = tuple(
        BenchmarkPoint(name=f"{point.kind}-{point.value:g}", argv=tuple(argv))
        for point, argv in zip(load_points(profile), argvs, strict=True)
    )
    return BenchmarkRun(
        slug=deployment.slug,
        deployment_id=str(deployment.pk),
        benchmark_id=str(benchmark.pk),
        namespace=deployment.cluster.namespace,
        points=points,
        artifact_dir=str(_artifact_dir(benchmark)),
        point_timeout_s=profile.duration_s + GRACE_S + STARTUP_ALLOWANCE_S,
        deadline_s=_budget_s(profile),
        api_key=api_key,
    )


def _artifact_dir(benchmark: Benchmark) -> Path:
    return Path(settings.DATA_DIR) / "benchmarks" / str(benchmark.pk)


def _serving_revisions(benchmark: Benchmark) -> list[int]:
    """Revisions the run's requests reach: the one asked for, which every request pins
    (``X-Plinth-Revision``) when it serves; else (it stopped serving before the run started)
    whatever the gateway splits between, the serving revision and a running canary's."""
    deployment = benchmark.deployment
    numbers = {deployment.current_revision.number} if deployment.current_revision else set()
    numbers.update(running_canary_numbers(deployment))
    target = benchmark.revision.number
    return [target] if target in numbers else sorted(numbers)


def _label(benchmark: Benchmark) -> str:
    return benchmark.name or str(benchmark.pk)[:8]


def _finish(benchmark: Benchmark, status: str, error: str) -> None:
    before = {"status": BenchmarkStatus.RUNNING}
    benchmark.status = status
    benchmark.error = error
    benchmark.finished_at = timezone.now()
    benchmark.save(update_fields=["status", "error", "finished_at"])
    deployment = benchmark.deployment
    ok = status == BenchmarkStatus.SUCCEEDED
    record_event(
        deployment,
        "info" if ok else "error",
        "BenchmarkSucceeded" if ok else "BenchmarkFailed",
        f"benchmark {_label(benchmark)} "
        + (
            f"finished: {len(benchmark.results)} load point(s) stored" if ok else f"failed: {error}"
        ),
        revision_number=benchmark.revision.number,
        data={"benchmark": str(benchmark.pk)},
    )
    audit.record(
        system_actor(deployment.organization),
        "benchmark.finish",
        benchmark,
        before=before,
        after={"status": status, "points": len(benchmark.results)},
    )
