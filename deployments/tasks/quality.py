"""The quality gate task: take the id, run it (``deployments.quality_run``).

Sent by name from ``deployments.quality_services.start_gate`` after commit. A gate started with
its canary waits for the canary's pool: the task asks again every ``_RETRY_S`` while the pool
starts, up to a large model's startup window, then runs it anyway (and it ends in error, saying
the pool is not ready). The built-in set is ~20 prompts of 64 tokens scored by both revisions:
minutes at most on real engines.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from deployments import quality_run

__all__: list[str] = ["run_quality_gate"]

_LIMIT_S = 30 * 60
_RETRY_S = 10
_MAX_WAITS = 2 * 3600 // _RETRY_S  # the longest startup window reconcile allows a revision


@shared_task(
    bind=True,
    name="deployments.run_quality_gate",
    ignore_result=True,
    soft_time_limit=_LIMIT_S,
    time_limit=_LIMIT_S + 60,
    max_retries=_MAX_WAITS,
)
def run_quality_gate(self: Any, gate_id: str) -> str:
    waiting = self.request.retries < _MAX_WAITS
    status = quality_run.run_gate(gate_id, wait=waiting)
    if status == quality_run.WAITING:
        raise self.retry(countdown=_RETRY_S)
    return status
