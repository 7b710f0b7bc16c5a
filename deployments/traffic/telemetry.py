"""What the deployments domain tells Prometheus: reconcile passes, endpoints by status, and the
depth of the task queues, served from the control plane's ``/metrics`` (``controlplane.metrics``).

Reconcile passes run in Celery workers (several processes, often on several machines) while
the console/API process answers ``/metrics``. So each pass adds its duration and outcome to one
histogram kept in Redis (one pipelined round trip per pass), and the serving process reads it
when Prometheus scrapes. The other families are measured at scrape time too: endpoints by
status in one query, queue depth from the broker's own count. Nothing is labelled by
organization or endpoint. These are installation-wide figures, so every web replica reports the
same values: aggregate them with ``max``, never ``sum``.

A source that fails during a scrape (the database, Redis, the broker) leaves its family out
and sets ``plinth_metrics_source_up{source}`` to 0 rather than failing the whole answer. A
failed write of a pass's figures is logged and never fails the pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db.models import Count
from kombu.exceptions import ChannelError
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from controlplane import metrics, redis_clients
from controlplane.celery import app as celery_app
from controlplane.redis_histogram import RedisHistogram
from deployments.drivers.errors import TemporaryDriverError
from deployments.endpoints.models import Deployment
from deployments.starts.telemetry import start_phase_histogram
from deployments.status import ALL_STATUSES

__all__ = ["OUTCOMES", "DeploymentsCollector", "record_reconcile", "register", "timed_reconcile"]

log = logging.getLogger(__name__)

# Outcomes of one pass. A permanent driver error is not among them: reconcile marks the
# endpoint failed and the pass itself ends normally (plinth_endpoints{status="failed"} shows it).
OK = "ok"
TEMPORARY_ERROR = "temporary_error"  # retried by the task with backoff
TIME_LIMIT = "time_limit"  # interrupted at PLINTH_RECONCILE_TIME_LIMIT_S, retried
ERROR = "error"  # anything else: a bug, the database gone
OUTCOMES = (OK, TEMPORARY_ERROR, TIME_LIMIT, ERROR)
# A settled pass takes tens of ms; an apply on a slow API server, seconds; the time limit ends
# the longest.
RECONCILE = RedisHistogram(
    key="plinth:metrics:reconcile",
    name="plinth_reconcile_duration_seconds",
    documentation="Time of one reconcile pass of one endpoint, by outcome (all workers).",
    label="outcome",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)


def _redis() -> redis.Redis:
    return redis_clients.client(settings.REDIS_URL)


# --- written by the workers ------------------------------------------------------------------


@contextmanager
def timed_reconcile() -> Iterator[None]:
    """Time the reconcile pass run inside, and record it with its outcome."""
    started = time.perf_counter()
    outcome = OK
    try:
        yield
    except BaseException as exc:
        outcome = _outcome(exc)
        raise
    finally:
        record_reconcile(outcome, time.perf_counter() - started)


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, TemporaryDriverError):
        return TEMPORARY_ERROR
    if isinstance(exc, SoftTimeLimitExceeded):
        return TIME_LIMIT
    return ERROR


def record_reconcile(outcome: str, seconds: float) -> None:
    """Add one pass to the shared histogram: its time and its bucket (counted per bucket; the
    cumulative counts Prometheus expects, and the total, are summed when read)."""
    RECONCILE.add(_redis(), {outcome: seconds})


# --- read at scrape time ---------------------------------------------------------------------


class DeploymentsCollector:
    """The domain's families, computed when ``/metrics`` is read."""

    def collect(self) -> Iterable[Metric]:
        up = GaugeMetricFamily(
            "plinth_metrics_source_up",
            "1 if the source of a family answered this scrape; 0 if it failed and its family "
            "was left out.",
            labels=["source"],
        )
        for source, family in (
            ("database", endpoints_by_status),
            ("broker", task_queue_depth),
            ("redis", reconcile_histogram),
            ("redis (replica starts)", start_phase_histogram),
        ):
            try:
                yield family()
            except Exception as exc:  # one source down must not fail the whole answer
                log.warning("metrics: the %s did not answer: %s", source, exc)
                up.add_metric([source], 0)
            else:
                up.add_metric([source], 1)
        yield up


def endpoints_by_status() -> GaugeMetricFamily:
    """Endpoints of every organization by status: one aggregated query (GROUP BY the stored
    status, which every writer keeps equal to ``derive_status``). Every status is present,
    zero included, so a status that empties shows 0 rather than vanishing."""
    counts = dict(
        Deployment.objects.order_by()
        .values("status")
        .annotate(n=Count("pk"))
        .values_list("status", "n")
    )
    family = GaugeMetricFamily(
        "plinth_endpoints", "Endpoints by status (all organizations).", labels=["status"]
    )
    for status in ALL_STATUSES:
        family.add_metric([status], counts.get(status, 0))
    return family


def task_queue_depth() -> GaugeMetricFamily:
    """Messages waiting in each Celery queue, as the broker counts them (every priority)."""
    family = GaugeMetricFamily(
        "plinth_task_queue_depth",
        "Celery messages waiting to be taken by a worker, by queue.",
        labels=["queue"],
    )
    # The workers' broker connection has no timeouts (it blocks on its queue by design); a
    # scrape must not hang on a Redis that stopped answering.
    timeouts = {
        "socket_timeout": redis_clients.COMMAND_TIMEOUT_S,
        "socket_connect_timeout": redis_clients.COMMAND_TIMEOUT_S,
    }
    with celery_app.connection_for_read(transport_options=timeouts) as connection:
        channel: Any = connection.default_channel  # kombu's stubs lack queue_declare
        for queue in queue_names():
            try:
                depth = channel.queue_declare(queue=queue, passive=True).message_count
            except ChannelError:  # the broker drops an emptied queue's key: nothing waits
                depth = 0
            family.add_metric([queue], depth)
    return family


def queue_names() -> list[str]:
    """The queues tasks are sent to: the default one, declared ones, and routes' targets."""
    names = {settings.CELERY_TASK_DEFAULT_QUEUE, *celery_app.amqp.queues.keys()}
    routes: Any = celery_app.conf.task_routes or {}
    if isinstance(routes, dict):
        for route in routes.values():
            queue = route.get("queue") if isinstance(route, dict) else None
            if isinstance(queue, str):
                names.add(queue)
    return sorted(names)


def reconcile_histogram() -> HistogramMetricFamily:
    """The passes the workers recorded (``record_reconcile``), as one histogram by outcome."""
    return RECONCILE.family(_redis(), OUTCOMES)


def register() -> None:
    """Serve these families from the control plane's ``/metrics`` (called by the app's ready)."""
    metrics.register_collector("deployments", DeploymentsCollector())
