"""The canary watcher: judge every running canary over its window, abort the ones that regressed.

Beat runs ``deployments.watch_canaries`` every ``PLINTH_CANARY_WATCH_INTERVAL_S``. A canary whose
pool is not ready within its revision's startup window is aborted too (as a rollout would be
abandoned). The reads and
the verdict are ``canary_watch``'s and ``canary``'s; the abort is ``canary_services``', which
re-checks under the row lock that the canary still runs (a person may have promoted it
meanwhile), so two passes at once are safe.
"""

from __future__ import annotations

import logging
from datetime import datetime

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from deployments import canary_services, canary_watch, reconcile
from deployments.canary import Verdict

__all__: list[str] = ["watch_canaries"]

logger = logging.getLogger(__name__)


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
