"""When an endpoint's next reconcile pass is due, asked outside a pass: a watch on a cluster saw
its objects change (``make_due``), or a committed change no finished pass has acted on yet
(``change_pending``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db.models import F, Q
from django.utils import timezone

from deployments.endpoints.models import Deployment


def make_due(deployment_ids: Iterable[str]) -> int:
    """Something changed on a cluster to these endpoints' objects (a worker's watch saw it): each
    is due now, unless it already is. One UPDATE for a batch; how many rows it made due.

    A pass that is queued already (its row claimed by a sweep) may get a second one: harmless,
    passes are idempotent and one on a synced cache with nothing to do asks the API nothing."""
    # Labels on a cluster are anyone's to write: only ids that can be endpoints' are looked up.
    ids = [i for i in deployment_ids if _is_uuid(i)]
    if not ids:
        return 0
    now = timezone.now()
    later = Q(next_reconcile_at__isnull=True) | Q(next_reconcile_at__gt=now)
    return Deployment.objects.filter(later, pk__in=ids).update(next_reconcile_at=now)


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def change_pending(deployment_id: str) -> bool:
    """A change was committed that no finished pass has acted on (the endpoint still exists)."""
    return Deployment.objects.filter(
        pk=deployment_id, observed_generation__lt=F("generation")
    ).exists()
