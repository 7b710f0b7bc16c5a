"""The autoscaler task: one pass over running endpoints, applying what ``decide`` returns.

Beat runs ``deployments.autoscale`` every ``PLINTH_AUTOSCALE_INTERVAL_S`` (entry in
``CELERY_BEAT_SCHEDULE``). A pass reads running endpoints in batches ordered by id, with a few
queries per batch (``deployments.autoscaling.inputs``), and applies each decision that changes a
replica count through the system's scale asks (``deployments.autoscaling.services``):
``autoscale_to`` for an endpoint, ``autoscale_pool_to`` for a split endpoint's pool, either of
which refuses a decision if a person scaled meanwhile; a moved model correction is recorded with
``record_model_correction``. Running two passes at once is safe for the same reason, only
wasteful.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from controlplane.services import ServiceError
from deployments.autoscaling import inputs, services
from deployments.autoscaling.types import Decision

__all__: list[str] = ["autoscale"]

logger = logging.getLogger(__name__)
BATCH = 200


# No lock: two passes at once are safe (``autoscale_to`` refuses a stale decision), so the limits
# only end a stuck pass, well after beat's next ones were sent (and dropped if still queued).
@shared_task(
    name="deployments.autoscale",
    ignore_result=True,
    soft_time_limit=settings.PLINTH_AUTOSCALE_INTERVAL_S * 4,
    time_limit=settings.PLINTH_AUTOSCALE_INTERVAL_S * 5,
)
def autoscale(now: str | None = None) -> dict[str, int]:
    """One pass over running endpoints; ``now`` (ISO 8601) lets tests step time."""
    at = datetime.fromisoformat(now) if now else timezone.now()
    checked = scaled = 0
    after: uuid.UUID | None = None
    while True:
        batch = inputs.running_batch(after, BATCH)
        if not batch:
            break
        after = batch[-1].deployment.pk
        checked += len(batch)
        scaled += sum(_apply(d) for d in inputs.decisions_for(batch, at))
    return {"checked": checked, "scaled": scaled}


def _apply(item: tuple[inputs.Endpoint, Decision]) -> bool:
    endpoint, decision = item
    if decision.corrected is not None:
        target = endpoint.deployment.target_revision
        assert target is not None
        services.record_model_correction(
            endpoint.deployment.pk, target.number, decision.corrected, decision.inputs
        )
    if not decision.changed:
        return False
    try:
        if decision.pool is not None:
            return services.autoscale_pool_to(
                endpoint.deployment.pk,
                decision.pool,
                decision.desired,
                decision.reason,
                decision.inputs,
                expected=decision.current,
            )
        return services.autoscale_to(
            endpoint.deployment.pk,
            decision.desired,
            decision.reason,
            decision.inputs,
            expected=decision.current,
        )
    except ServiceError as exc:
        # The settings changed between the read and the write; the next pass decides again.
        logger.info("autoscale %s refused: %s", endpoint.deployment.slug, exc)
        return False
