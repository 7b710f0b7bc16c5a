"""The experiments' tasks: run a benchmark, watch the running canaries, run a quality gate.

``run_benchmark`` is sent by name from ``deployments.experiments.benchmark.services`` after
commit; a benchmark runs for minutes, so its limits follow the longest profile a benchmark may
have. ``watch_canaries`` is beat's. ``run_quality_gate`` is sent by name from
``deployments.experiments.quality.services``.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from deployments.endpoints import reconcile
from deployments.experiments.benchmark import run as benchmark_run
from deployments.experiments.canary import services as canary_services
from deployments.experiments.canary import watch as canary_watch
from deployments.experiments.canary.rules import Verdict
from deployments.experiments.quality import run as quality_run

__all__: list[str] = ["run_benchmark", "run_quality_gate", "watch_canaries"]

logger = logging.getLogger(__name__)

_BENCHMARK_LIMIT_S = benchmark_run.RUN_LIMIT_S


@shared_task(
    name="deployments.run_benchmark",
    ignore_result=True,
    soft_time_limit=_BENCHMARK_LIMIT_S,
    time_limit=_BENCHMARK_LIMIT_S + 60,
)
def run_benchmark(benchmark_id: str) -> str:
    return benchmark_run.run_benchmark(benchmark_id)


@shared_task(
    name="deployments.watch_canaries",
    ignore_result=True,
    soft_time_limit=settings.PLINTH_CANARY_WATCH_INTERVAL_S * 4,
    time_limit=settings.PLINTH_CANARY_WATCH_INTERVAL_S * 5,
)
def watch_canaries(now: str | None = None) -> dict[str, int]:
    """One pass; ``now`` (ISO 8601) lets tests step time."""
    at = datetime.fromisoformat(now) if now else timezone.now()
    aborted = 0
    for canary in canary_watch.never_ready(at, reconcile.startup_window_s):
        window = reconcile.startup_window_s(canary.revision)
        why = f"its pool had no replica ready within its startup window ({window} s)"
        aborted += canary_services.abort_automatically(canary.pk, Verdict(True), message=why)
    for canary in canary_watch.failed_pools():
        why = f"its pool will not become ready ({canary.pool_failure})"
        aborted += canary_services.abort_automatically(canary.pk, Verdict(True), message=why)
    judged = canary_watch.judge_running(at)
    for item in judged:
        if item.verdict.abort:
            canary, why = item.canary, item.verdict.message
            logger.warning("canary of %s aborted: %s", canary.deployment_id, why)
            aborted += canary_services.abort_automatically(item.canary.pk, item.verdict)
    return {"checked": len(judged), "aborted": aborted}


_QUALITY_LIMIT_S = 30 * 60
_RETRY_S = 10
_MAX_WAITS = 2 * 3600 // _RETRY_S  # the longest startup window reconcile allows a revision


@shared_task(
    bind=True,
    name="deployments.run_quality_gate",
    ignore_result=True,
    soft_time_limit=_QUALITY_LIMIT_S,
    time_limit=_QUALITY_LIMIT_S + 60,
    max_retries=_MAX_WAITS,
)
def run_quality_gate(self: Any, gate_id: str) -> str:
    waiting = self.request.retries < _MAX_WAITS
    status = quality_run.run_gate(gate_id, wait=waiting)
    if status == quality_run.WAITING:
        raise self.retry(countdown=_RETRY_S)
    return status
