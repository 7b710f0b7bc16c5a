"""What the worker observes of clusters as a whole: their GPU nodes
(``deployments.clusters.inventory``), and, in every worker process, the list+watch caches its kube
drivers read through.

A starting worker turns the caches on (``registry.watch_clusters``), with watch events making
the endpoints they concern due (``due.make_due``); each process stops its caches as it
shuts down. Caches start lazily, on a process's first pass on a cluster: the prefork pool's
parent runs no passes, so its children never inherit a started one.
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_init, worker_process_shutdown, worker_shutdown
from django.conf import settings
from django.db import DatabaseError, connections

from deployments.clusters import drivers as registry
from deployments.clusters import inventory
from deployments.endpoints import due

__all__: list[str] = ["observe_clusters"]

logger = logging.getLogger(__name__)


@shared_task(
    name="deployments.observe_clusters",
    ignore_result=True,
    # Two LISTs per cluster, each bounded by the client's timeout: well within one interval.
    soft_time_limit=max(1, settings.PLINTH_INVENTORY_INTERVAL_S * 3 // 4),
    time_limit=max(2, settings.PLINTH_INVENTORY_INTERVAL_S),
)
def observe_clusters() -> int:
    return inventory.observe_clusters()


def make_due_from_watch(deployment_ids: set[str]) -> None:
    """A cache's batch of endpoints whose objects changed (on the cache's own thread)."""
    try:
        due.make_due(deployment_ids)
    except DatabaseError:
        logger.warning("%d endpoints changed but were not made due", len(deployment_ids))
    finally:
        connections.close_all()  # this thread's only: it holds none between batches


@worker_init.connect
def _watch_clusters(**_: object) -> None:
    registry.watch_clusters(make_due_from_watch)


@worker_process_shutdown.connect
@worker_shutdown.connect
def _stop_watching(**_: object) -> None:
    registry.watch_clusters(None)
