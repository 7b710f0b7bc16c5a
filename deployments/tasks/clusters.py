"""What the worker observes of clusters as a whole: their GPU nodes (``deployments.inventory``)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from deployments import inventory

__all__: list[str] = ["observe_clusters"]


@shared_task(
    name="deployments.observe_clusters",
    ignore_result=True,
    # Two LISTs per cluster, each bounded by the client's timeout: well within one interval.
    soft_time_limit=max(1, settings.PLINTH_INVENTORY_INTERVAL_S * 3 // 4),
    time_limit=max(2, settings.PLINTH_INVENTORY_INTERVAL_S),
)
def observe_clusters() -> int:
    return inventory.observe_clusters()
