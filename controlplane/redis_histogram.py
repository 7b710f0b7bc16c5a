"""A Prometheus histogram that many processes add to: counts per bucket and a sum per label
value, kept in one Redis hash and turned into the cumulative buckets Prometheus expects when
``/metrics`` is read. The workers' reconcile passes and replicas' start phases are kept so."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import redis
from prometheus_client.core import HistogramMetricFamily

from controlplane.redis_clients import as_text

log = logging.getLogger(__name__)


def le(bound: float) -> str:
    """A bucket's bound as Prometheus writes it: ``0.25``, ``1.0``, ``+Inf``."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))


@dataclass(frozen=True)
class RedisHistogram:
    key: str  # the Redis hash
    name: str
    documentation: str
    label: str
    buckets: tuple[float, ...]

    def add(self, client: redis.Redis, observations: Mapping[str, float]) -> None:
        """Add one observation per label value, in one pipelined round trip; a failed write
        is logged, never raised (a metric is not worth failing the work it measures)."""
        pipe = client.pipeline(transaction=False)
        for value, seconds in observations.items():
            bucket = next((b for b in self.buckets if seconds <= b), math.inf)
            pipe.hincrbyfloat(self.key, f"{value}|sum", seconds)
            pipe.hincrby(self.key, f"{value}|le|{le(bucket)}", 1)
        try:
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("%s not recorded: %s", self.name, exc)

    def family(self, client: redis.Redis, values: Iterable[str]) -> HistogramMetricFamily:
        """What is stored, one histogram per label value of ``values``."""
        stored = {as_text(key): float(count) for key, count in client.hgetall(self.key).items()}
        family = HistogramMetricFamily(self.name, self.documentation, labels=[self.label])
        for value in values:
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for bound in (*self.buckets, math.inf):
                cumulative += stored.get(f"{value}|le|{le(bound)}", 0.0)
                buckets.append((le(bound), cumulative))
            family.add_metric([value], buckets, stored.get(f"{value}|sum", 0.0))
        return family
