"""The writer of benchmark requests, and the reads the API and console share.

``create_benchmark`` validates the traffic profile (a ``ServiceError`` names the field), checks the
endpoint serves the revision asked for, stores the benchmark as queued with the optimizer's
prediction for the same profile, records an AuditEvent and a timeline line, and sends the
``deployments.run_benchmark`` task by name after commit. The run itself, and everything it
observes, is ``deployments.experiments.benchmark.run``'s.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from controlplane import audit
from controlplane.access import Actor, NotFound, require_role
from controlplane.celery import app as celery_app
from controlplane.models import Role
from controlplane.services import Conflict, ServiceError
from deployments.endpoints import fields
from deployments.endpoints.models import Deployment, DesiredState, Revision
from deployments.endpoints.queries import get_deployment
from deployments.endpoints.timeline import record_event
from deployments.experiments.benchmark.profile import ProfileError, compare, parse_profile, predict
from deployments.experiments.benchmark.run import RUN_LIMIT_S
from deployments.experiments.models import Benchmark, BenchmarkStatus
from deployments.experiments.queries import benchmarks_of, running_canary
from runtime.spec import RuntimeSpec

__all__ = ["compare_benchmarks", "create_benchmark", "get_benchmark", "list_benchmarks"]

logger = logging.getLogger(__name__)
RUN_TASK = "deployments.run_benchmark"
ACTIVE = (BenchmarkStatus.QUEUED, BenchmarkStatus.RUNNING)


def snapshot(benchmark: Benchmark) -> dict[str, Any]:
    return {
        "name": benchmark.name,
        "revision": benchmark.revision.number,
        "profile": benchmark.profile,
        "status": benchmark.status,
    }


def _revision(deployment: Deployment, number: int | None) -> Revision:
    """The revision to benchmark: the serving one, or a running canary's when named."""
    current = deployment.current_revision
    if deployment.desired_state != DesiredState.RUNNING or current is None:
        raise Conflict(
            f"endpoint {deployment.slug} is not serving; a benchmark needs a serving revision",
            code="not_serving",
        )
    if number is None or number == current.number:
        return current
    canary = running_canary(deployment, number=number)
    if canary is None:
        raise ServiceError(
            f"revision {number} is not serving: name the serving revision ({current.number}) "
            "or a running canary's",
            field="revision",
        )
    return canary.revision


@transaction.atomic
def create_benchmark(
    actor: Actor,
    deployment_id: uuid.UUID | str,
    *,
    profile: dict[str, Any],
    name: str = "",
    revision: int | None = None,
) -> Benchmark:
    """A queued benchmark of the endpoint; one runs at a time per endpoint."""
    require_role(actor, Role.DEVELOPER)
    name = fields.clean_text(name, "name", 100)
    try:
        traffic = parse_profile(profile)
    except ProfileError as exc:
        raise ServiceError(str(exc), field=f"profile.{exc.field}") from exc
    deployment = get_deployment(actor, deployment_id)
    deployment = Deployment.objects.select_for_update().get(pk=deployment.pk)
    target = _revision(deployment, revision)
    _expire_lost(deployment)
    if deployment.benchmarks.filter(status__in=ACTIVE).exists():
        raise Conflict(
            f"endpoint {deployment.slug} already has a benchmark queued or running",
            code="benchmark_running",
        )
    spec = RuntimeSpec.model_validate(target.spec)
    benchmark = Benchmark.objects.create(
        deployment=deployment,
        revision=target,
        name=name,
        profile=traffic.as_dict(),
        prediction=predict(spec, traffic, deployment.desired_replicas),
        created_by=actor.label,
    )
    audit.record(actor, "benchmark.create", benchmark, after=snapshot(benchmark))
    record_event(
        deployment,
        "info",
        "BenchmarkQueued",
        f"benchmark {name or str(benchmark.pk)[:8]} queued by {actor.label}",
        revision_number=target.number,
        data={"benchmark": str(benchmark.pk), "profile": benchmark.profile},
    )
    transaction.on_commit(lambda: _send_run(str(benchmark.pk)))
    return benchmark


def _expire_lost(deployment: Deployment) -> None:
    """Fail the endpoint's benchmarks that can no longer finish: queued or running for longer
    than any run may take (the message or the worker was lost), so they block no new one."""
    now = timezone.now()
    cutoff = now - timedelta(seconds=RUN_LIMIT_S + 60)
    lost = deployment.benchmarks.filter(status__in=ACTIVE, created_at__lt=cutoff)
    for benchmark in lost:
        benchmark.status, benchmark.finished_at = BenchmarkStatus.FAILED, now
        benchmark.error = "the run was lost (its worker or its message); nothing was measured after"
        benchmark.save(update_fields=["status", "finished_at", "error"])
        record_event(
            deployment, "warning", "BenchmarkLost", benchmark.error,
            revision_number=benchmark.revision.number, data={"benchmark": str(benchmark.pk)},
        )  # fmt: skip


def _send_run(benchmark_id: str) -> None:
    try:
        celery_app.send_task(RUN_TASK, args=[benchmark_id])
    except Exception as exc:  # the broker is down: the benchmark stays queued, shown as such
        logger.warning("benchmark %s not queued (%s)", benchmark_id, exc)


def list_benchmarks(actor: Actor, deployment_id: uuid.UUID | str) -> QuerySet[Benchmark]:
    return benchmarks_of(get_deployment(actor, deployment_id))


def get_benchmark(
    actor: Actor, deployment_id: uuid.UUID | str, benchmark_id: uuid.UUID | str
) -> Benchmark:
    deployment = get_deployment(actor, deployment_id)
    try:
        return deployment.benchmarks.select_related("revision").get(pk=benchmark_id)
    except (Benchmark.DoesNotExist, ValueError, ValidationError) as exc:
        raise NotFound("benchmark not found") from exc


def compare_benchmarks(
    actor: Actor, deployment_id: uuid.UUID | str, a: str, b: str
) -> dict[str, Any]:
    """Two benchmarks of the endpoint side by side: per shared load point, b minus a."""
    first = get_benchmark(actor, deployment_id, a)
    second = get_benchmark(actor, deployment_id, b)
    return {"a": first, "b": second, "points": compare(first.results, second.results)}
