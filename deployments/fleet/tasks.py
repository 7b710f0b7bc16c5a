"""The fleet's periodic work: each Kubernetes cluster's availability (``fleet.health``)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from deployments.fleet import health

__all__: list[str] = ["check_clusters"]


@shared_task(
    name="deployments.check_clusters",
    ignore_result=True,
    # One LIST per cluster, bounded by the client's timeout; a late check is dropped (expires).
    soft_time_limit=max(20, settings.PLINTH_CLUSTER_CHECK_INTERVAL_S * 4),
    time_limit=max(30, settings.PLINTH_CLUSTER_CHECK_INTERVAL_S * 6),
)
def check_clusters() -> int:
    return health.check_clusters()
