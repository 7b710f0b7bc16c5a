"""Replica starts as Prometheus sees them: one histogram of seconds per start phase,
``plinth_replica_start_phase_seconds{phase}``, served from the control plane's ``/metrics``.

Starts are recorded by workers, so each one's phases are added to buckets kept in Redis (one
pipelined round trip per start) and read when Prometheus scrapes, as the reconcile histogram is
(``deployments.traffic.telemetry``). Not labelled by endpoint: installation-wide figures.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.conf import settings
from prometheus_client.core import HistogramMetricFamily

from controlplane import redis_clients
from controlplane.redis_histogram import RedisHistogram
from runtime.startup import PHASES

# From an image already pulled (under a second) to a large model's download (tens of minutes).
START_PHASES = RedisHistogram(
    key="plinth:metrics:replica-start",
    name="plinth_replica_start_phase_seconds",
    documentation="Seconds of each phase of an engine replica's cold start (all endpoints).",
    label="phase",
    buckets=(0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0),
)


def record_start_phases(phases: Mapping[str, float]) -> None:
    """Add one start's phases to the shared histogram; a failed write is logged, never raised."""
    START_PHASES.add(redis_clients.client(settings.REDIS_URL), phases)


def start_phase_histogram() -> HistogramMetricFamily:
    """Every recorded start's phases, one histogram per phase."""
    return START_PHASES.family(redis_clients.client(settings.REDIS_URL), PHASES)
