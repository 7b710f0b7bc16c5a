"""Replica starts as Prometheus sees them: one histogram of seconds per start phase,
``plinth_replica_start_phase_seconds{phase}``, served from the control plane's ``/metrics``.

Starts are recorded by workers, so each one's phases are added to buckets kept in Redis (one
pipelined round trip per start) and read when Prometheus scrapes, as the reconcile histogram is
(``deployments.traffic.telemetry``). Not labelled by endpoint: installation-wide figures.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping

import redis
from django.conf import settings
from prometheus_client.core import HistogramMetricFamily

from controlplane import redis_clients
from runtime.startup import PHASES

log = logging.getLogger(__name__)

START_KEY = "plinth:metrics:replica-start"
# From an image already pulled (under a second) to a large model's download (tens of minutes).
START_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0)


def _le(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def record_start_phases(phases: Mapping[str, float]) -> None:
    """Add one start's phases to the shared histogram; a failed write is logged, never raised."""
    pipe = redis_clients.client(settings.REDIS_URL).pipeline(transaction=False)
    for phase, seconds in phases.items():
        bucket = next((b for b in START_BUCKETS if seconds <= b), math.inf)
        pipe.hincrbyfloat(START_KEY, f"{phase}|sum", seconds)
        pipe.hincrby(START_KEY, f"{phase}|le|{_le(bucket)}", 1)
    try:
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("replica start metrics not recorded: %s", exc)


def start_phase_histogram() -> HistogramMetricFamily:
    """Every recorded start's phases, one histogram per phase."""
    client = redis_clients.client(settings.REDIS_URL)
    stored = {
        redis_clients.as_text(key): float(value) for key, value in client.hgetall(START_KEY).items()
    }
    family = HistogramMetricFamily(
        "plinth_replica_start_phase_seconds",
        "Seconds of each phase of an engine replica's cold start (all endpoints).",
        labels=["phase"],
    )
    for phase in PHASES:
        cumulative = 0.0
        buckets: list[tuple[str, float]] = []
        for bound in (*START_BUCKETS, math.inf):
            cumulative += stored.get(f"{phase}|le|{_le(bound)}", 0.0)
            buckets.append((_le(bound), cumulative))
        family.add_metric([phase], buckets, stored.get(f"{phase}|sum", 0.0))
    return family
