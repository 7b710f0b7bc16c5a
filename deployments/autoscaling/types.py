"""What the autoscaler's decision reads and returns, and the few figures every rule shares.

``Sample``, ``Observations`` and ``State`` are the inputs of ``deployments.autoscaling.decide``
(gathered by ``deployments.autoscaling.inputs``), ``Decision`` its answer, and ``Rule`` how one
scaled thing (an endpoint, or a pool) turns samples into replicas: the concurrency policy's rule
is built in ``decide``, the SLO policy's in ``deployments.autoscaling.slo``, and both are applied
by ``deployments.autoscaling.load``. Pure: no database, no clock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from deployments import status as statuses
from deployments.autoscaling import correction as slo_correction
from runtime.capacity import ReplicaModel

__all__ = [
    "BREACH_STEP",
    "KV_TARGET",
    "POOLS",
    "UNSCALABLE",
    "Decision",
    "Observations",
    "Rule",
    "Sample",
    "State",
    "decision_to",
    "in_window",
    "rounded",
]

# Statuses in which the replica count is not the autoscaler's to change.
UNSCALABLE = frozenset({statuses.PENDING, statuses.FAILED, statuses.DELETING, statuses.STOPPED})
POOLS = ("prefill", "decode")
# KV-cache usage a replica should stay under: near full, SGLang queues and retracts requests.
KV_TARGET = 0.85
# An observed p90 over its target asks for at most this many times the replicas it ran on.
BREACH_STEP = 2.0


@dataclass(frozen=True)
class Sample:
    """One probe of the endpoint (or of one pool): requests in flight (running + queued, over all
    replicas), and what the SLO policy reads besides. Latencies in seconds."""

    ts: datetime
    in_flight: float
    requests_per_s: float = 0.0
    queued: float = 0.0
    queued_prefill_tokens: float = 0.0
    kv_usage: float | None = None  # mean over the replicas, 0..1
    ttft_p90: float | None = None
    itl_p90: float | None = None
    ready: int = 0  # replicas the probe read


@dataclass(frozen=True)
class Observations:
    """Samples reaching back ``window_seconds + scale_down_delay_seconds``, any order.

    ``pools``: a disaggregated endpoint's samples per pool. ``models``: the performance model of
    one replica per role ("engine", "prefill", "decode"), for the SLO policy."""

    samples: Sequence[Sample] = ()
    last_request_at: datetime | None = None
    pools: Mapping[str, Sequence[Sample]] = field(default_factory=dict)
    models: Mapping[str, ReplicaModel | None] = field(default_factory=dict)
    # The corrections applied to each role's model so far ({"ttft": x, "itl": y}, only the
    # latencies that had evidence): the starting point of this pass's hysteresis.
    corrections: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class State:
    """What the endpoint is now, and whether it may be scaled at all."""

    replicas: int
    last_scaled_at: datetime | None = None
    desired_state: str = "running"
    status: str = statuses.ACTIVE
    rollout_in_progress: bool = False
    disaggregated: bool = False
    # When it first served; with the last scale and request, the start of an idle period.
    first_ready_at: datetime | None = None
    # A disaggregated endpoint's pool sizes, and when the autoscaler last changed each.
    pools: Mapping[str, int] = field(default_factory=dict)
    pools_scaled_at: Mapping[str, datetime | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    current: int
    desired: int
    reason: str
    inputs: dict[str, Any] = field(default_factory=dict)
    pool: str | None = None  # "prefill" or "decode" for a pool's decision
    # Set when this pass moved the model correction of ``role`` (the SLO policy): the new
    # corrections, which the task records as a ``ModelCorrected`` event with the inputs.
    corrected: slo_correction.Correction | None = None

    @property
    def changed(self) -> bool:
        return self.desired != self.current


@dataclass(frozen=True)
class Rule:
    """How one scaled thing (an endpoint, or a pool) turns samples into replicas."""

    floor: int
    ceiling: int
    per_replica: float
    load: Callable[[Sample], float]
    unit: str  # what the load counts, as the reason says it
    # (current replicas, last scaled) of what is being scaled
    replicas: int
    last_scaled_at: datetime | None
    corrected: slo_correction.Correction | None = (
        None  # the SLO policy moved its model's correction
    )


def in_window(samples: Sequence[Sample], end: datetime, seconds: float) -> list[Sample]:
    """The samples of the ``seconds`` up to ``end``."""
    start = end - timedelta(seconds=seconds)
    return [s for s in samples if start < s.ts <= end]


def decision_to(
    current: int, replicas: int, reason: str, inputs: dict[str, Any], pool: str | None = None
) -> Decision:
    """A decision for ``replicas``, its reason saying the move when there is one."""
    text = f"{reason}: {current} -> {replicas}" if replicas != current else reason
    return Decision(current, replicas, text, inputs, pool)


def rounded(value: float | None) -> float | None:
    """A figure as the decision's inputs record it."""
    return round(value, 3) if value is not None else None
