"""Django's models module of the ``deployments`` app: it imports every package's records so the
app registry (app label ``deployments``, migrations 0001-0017) sees them. Nothing imports it."""

from __future__ import annotations

from deployments.api.models import IdempotencyRecord
from deployments.clusters.models import Cluster, ClusterKind
from deployments.costs.models import ReplicaSpan
from deployments.endpoints.models import (
    Deployment,
    DeploymentEvent,
    DesiredState,
    EventLevel,
    Revision,
)
from deployments.experiments.models import (
    Benchmark,
    BenchmarkStatus,
    Canary,
    CanaryStatus,
    QualityGate,
    QualityGateStatus,
)
from deployments.fleet.models import Placement, PlacementPolicy, PlacementState
from deployments.quantization.models import (
    Artifact,
    CalibrationSet,
    Candidate,
    QuantizationRun,
    RunEvent,
)
from deployments.quotas.models import Quota
from deployments.starts.models import ReplicaStart
from deployments.traffic.models import MetricSample, UsageFlushBatch, UsageRecord

__all__ = [
    "Artifact",
    "Benchmark",
    "BenchmarkStatus",
    "CalibrationSet",
    "Canary",
    "CanaryStatus",
    "Candidate",
    "Cluster",
    "ClusterKind",
    "Deployment",
    "DeploymentEvent",
    "DesiredState",
    "EventLevel",
    "IdempotencyRecord",
    "MetricSample",
    "Placement",
    "PlacementPolicy",
    "PlacementState",
    "QualityGate",
    "QualityGateStatus",
    "QuantizationRun",
    "Quota",
    "ReplicaSpan",
    "ReplicaStart",
    "Revision",
    "RunEvent",
    "UsageFlushBatch",
    "UsageRecord",
]
