"""What the autoscaler decides from, gathered per batch of running endpoints, and the decisions.

``decisions_for`` reads, for one batch: the endpoints with their target revisions (one query,
``running_batch``), their recent MetricSamples (one query, ``sample_rows``), the gateway's
last-request times (one Redis HMGET, ``gateway_last_requests``: fresher than
``Deployment.last_request_at``, which is flushed every few seconds) and each SLO endpoint's
latest model corrections (one query, ``model_corrections``), then asks ``decide`` (and
``decide_pools`` for a split endpoint's pools) for each.

A split (prefill/decode) endpoint's per-pool samples are built from the per-replica figures the
probe stores with each replica's role (``pool_samples``). The SLO policy's performance model
comes from ``runtime.capacity`` for the target revision's spec and the workload the samples show
(mean prompt and output length, prefix-cache share); the default profile when they show none
(``replica_models``).
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from django.conf import settings
from django.db.models import Q
from django.db.models.fields.json import KeyTextTransform

from controlplane import redis_clients
from deployments.autoscaling.correction import MODEL_CORRECTED
from deployments.autoscaling.decide import decide, decide_pools
from deployments.autoscaling.types import POOLS, Decision, Observations, Sample, State
from deployments.endpoints.models import Deployment, DeploymentEvent, DesiredState
from deployments.endpoints.queries import REVISION_FIELDS
from deployments.traffic.models import MetricSample
from deployments.traffic.usage import LAST_REQUEST_HASH
from runtime.capacity import ReplicaModel, Role, Workload, replica_model
from runtime.spec import AutoscalingSettings, RuntimeSpec

__all__ = [
    "SAMPLE_COLUMNS",
    "Endpoint",
    "decisions_for",
    "endpoint_of",
    "gateway_last_requests",
    "latest_of",
    "model_corrections",
    "pool_rate",
    "pool_samples",
    "pool_sizes",
    "pools_scaled_at",
    "replica_models",
    "revision_corrections",
    "role_models",
    "running_batch",
    "sample_of",
    "sample_rows",
    "state_of",
    "workload_of",
    "worst_latency",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Endpoint:
    """A deployment with the policy of its target revision, ready for ``decide``."""

    deployment: Deployment
    policy: AutoscalingSettings
    disaggregated: bool
    spec: dict[str, Any]

    @property
    def lookback(self) -> timedelta:
        return timedelta(seconds=self.policy.window_seconds + self.policy.scale_down_delay_seconds)


def running_batch(after: uuid.UUID | None, size: int) -> list[Endpoint]:
    """Up to ``size`` running endpoints with a target revision, by id after ``after``."""
    query = (
        Deployment.objects.filter(desired_state=DesiredState.RUNNING, target_revision__isnull=False)
        .select_related(*REVISION_FIELDS)
        .defer("current_revision__spec", "applied_revision__spec")
        .order_by("pk")
    )
    if after is not None:
        query = query.filter(pk__gt=after)
    return [endpoint_of(deployment) for deployment in query[:size]]


def endpoint_of(deployment: Deployment) -> Endpoint:
    """The deployment with its target revision's policy (one with a target revision)."""
    assert deployment.target_revision is not None
    spec: dict[str, Any] = deployment.target_revision.spec
    return Endpoint(
        deployment=deployment,
        policy=AutoscalingSettings.model_validate(spec.get("autoscaling") or {}),
        disaggregated=bool((spec.get("disaggregation") or {}).get("enabled")),
        spec=spec,
    )


def decisions_for(batch: list[Endpoint], now: datetime) -> list[tuple[Endpoint, Decision]]:
    """Every decision for the batch at ``now``: the endpoint's, or its pools' when a split
    endpoint neither goes to zero nor wakes."""
    rows = sample_rows(batch, now)
    seen = gateway_last_requests([e.deployment.pk for e in batch])
    corrections = model_corrections(batch)
    out = []
    for endpoint in batch:
        deployment = endpoint.deployment
        mine = rows.get(deployment.pk, [])
        observations = Observations(
            samples=[sample_of(row) for row in mine],
            last_request_at=latest_of(deployment.last_request_at, seen.get(str(deployment.pk))),
            pools=pool_samples(mine) if endpoint.disaggregated else {},
            models=replica_models(endpoint, mine),
            corrections=corrections.get(deployment.pk, {}),
        )
        state = state_of(endpoint)
        decisions = [decide(endpoint.policy, observations, state, now)]
        if endpoint.disaggregated and not decisions[0].changed:
            # Going to zero or waking moves the whole endpoint; otherwise its pools scale.
            decisions = decide_pools(endpoint.policy, observations, state, now)
        for decision in decisions:
            logger.debug("autoscale %s: %s", deployment.slug, decision.reason)
            out.append((endpoint, decision))
    return out


def state_of(endpoint: Endpoint) -> State:
    """What the endpoint is now, as ``decide`` reads it."""
    deployment = endpoint.deployment
    return State(
        replicas=deployment.desired_replicas,
        last_scaled_at=deployment.last_scaled_at,
        desired_state=deployment.desired_state,
        status=deployment.status,
        rollout_in_progress=deployment.rollout_started_at is not None,
        disaggregated=endpoint.disaggregated,
        first_ready_at=deployment.first_ready_at,
        pools=pool_sizes(endpoint) if endpoint.disaggregated else {},
        pools_scaled_at=pools_scaled_at(endpoint) if endpoint.disaggregated else {},
    )


def pool_sizes(endpoint: Endpoint) -> dict[str, int]:
    """The split endpoint's pool sizes for its target revision."""
    deployment = endpoint.deployment
    assert deployment.target_revision is not None
    return deployment.pool_sizes(deployment.target_revision.number, endpoint.spec)


def pools_scaled_at(endpoint: Endpoint) -> dict[str, datetime | None]:
    """When the autoscaler last sized each pool of the target revision (its cool-down)."""
    deployment = endpoint.deployment
    assert deployment.target_revision is not None
    scaled = deployment.pool_replicas or {}
    if scaled.get("revision") != deployment.target_revision.number:
        return {}
    stamps: dict[str, str] = scaled.get("scaled_at") or {}
    return {pool: datetime.fromisoformat(stamp) for pool, stamp in stamps.items()}


SAMPLE_COLUMNS = (
    "deployment_id",
    "ts",
    "running",
    "queued",
    "requests_per_s",
    "requests",
    "prompt_tokens",
    "generation_tokens",
    "cached_tokens",
    "kv_usage",
    "ttft_p90",
    "itl_p90",
    "replicas_ready",
    "replicas",
)


def sample_rows(
    batch: list[Endpoint], now: datetime, extra: tuple[str, ...] = ()
) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """Each endpoint's samples over its own window + scale-down delay, in one query (with the
    ``extra`` columns besides ``SAMPLE_COLUMNS``)."""
    reach = Q()
    for endpoint in batch:
        reach |= Q(deployment_id=endpoint.deployment.pk, ts__gt=now - endpoint.lookback)
    rows = MetricSample.objects.filter(reach, ts__lte=now).values(*SAMPLE_COLUMNS, *extra)
    out: dict[uuid.UUID, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        out[row["deployment_id"]].append(row)
    return out


def sample_of(row: dict[str, Any]) -> Sample:
    """One MetricSample row as the endpoint's ``Sample``."""
    replicas = row["replicas"] or []
    return Sample(
        ts=row["ts"],
        in_flight=row["running"] + row["queued"],
        requests_per_s=row["requests_per_s"],
        queued=row["queued"],
        queued_prefill_tokens=sum(float(r.get("queued_tokens") or 0) for r in replicas),
        kv_usage=row["kv_usage"],
        ttft_p90=row["ttft_p90"],
        itl_p90=row["itl_p90"],
        ready=row["replicas_ready"],
    )


def pool_samples(rows: list[dict[str, Any]]) -> dict[str, list[Sample]]:
    """Per-pool samples from the per-replica figures: the pool's replicas summed (KV usage
    averaged). A pool's latency is the endpoint's where its own replicas report none (the
    decode pool streams the tokens)."""
    out: dict[str, list[Sample]] = {pool: [] for pool in POOLS}
    for row in rows:
        for pool in POOLS:
            mine = [r for r in row["replicas"] or [] if r.get("role") == pool]
            if not mine:
                continue
            kv = [float(r["kv_usage"]) for r in mine if r.get("kv_usage") is not None]
            queued = sum(float(r.get("queued") or 0) for r in mine)
            out[pool].append(
                Sample(
                    ts=row["ts"],
                    in_flight=sum(float(r.get("running") or 0) for r in mine) + queued,
                    requests_per_s=pool_rate(mine, row["requests_per_s"]),
                    queued=queued,
                    queued_prefill_tokens=sum(float(r.get("queued_tokens") or 0) for r in mine),
                    kv_usage=sum(kv) / len(kv) if kv else None,
                    ttft_p90=worst_latency(mine, "ttft_p90", row["ttft_p90"]),
                    itl_p90=worst_latency(mine, "itl_p90", row["itl_p90"]),
                    ready=len(mine),
                )
            )
    return out


def pool_rate(replicas: list[dict[str, Any]], endpoint: float) -> float:
    """Requests/s the pool finished (each pool counts every request once), else the endpoint's."""
    rate = sum(float(r.get("requests_per_s") or 0) for r in replicas)
    return rate if rate > 0 else endpoint


def worst_latency(replicas: list[dict[str, Any]], key: str, endpoint: float | None) -> float | None:
    """The pool's worst replica's latency ``key``, else the endpoint's."""
    values = [float(r[key]) for r in replicas if r.get(key) is not None]
    return max(values) if values else endpoint


def replica_models(
    endpoint: Endpoint, rows: list[dict[str, Any]]
) -> dict[str, ReplicaModel | None]:
    """The SLO policy's performance model per role, for the workload the samples show."""
    if endpoint.policy.slo is None:
        return {}
    return role_models(endpoint, rows)


def role_models(endpoint: Endpoint, rows: list[dict[str, Any]]) -> dict[str, ReplicaModel | None]:
    """The performance model per role of the endpoint's spec, for the workload the samples
    show (whatever its policy)."""
    spec = RuntimeSpec.model_validate(endpoint.spec)
    roles: tuple[Role, ...] = ("prefill", "decode") if endpoint.disaggregated else ("engine",)
    workload = workload_of(rows)
    return {role: replica_model(spec, role, workload) for role in roles}


def workload_of(rows: list[dict[str, Any]]) -> Workload:
    """The mean request the samples show; the default profile when they show none."""
    requests = sum(row["requests"] for row in rows)
    if requests <= 0:
        return Workload()
    prompt = sum(row["prompt_tokens"] for row in rows)
    return Workload(
        input_tokens=max(1, round(prompt / requests)),
        output_tokens=max(1, round(sum(row["generation_tokens"] for row in rows) / requests)),
        cached_share=sum(row["cached_tokens"] for row in rows) / prompt if prompt else 0.0,
    )


def model_corrections(batch: list[Endpoint]) -> dict[uuid.UUID, dict[str, dict[str, float]]]:
    """Each SLO endpoint's model corrections per role, as its latest ``ModelCorrected`` event of
    the target revision left them (a new revision's model starts uncorrected); one query, and
    none for a batch without an SLO policy."""
    return revision_corrections(
        {
            e.deployment.pk: e.deployment.target_revision.number
            for e in batch
            if e.policy.slo is not None and e.deployment.target_revision is not None
        }
    )


def revision_corrections(
    revisions: dict[uuid.UUID, int],
) -> dict[uuid.UUID, dict[str, dict[str, float]]]:
    """Per endpoint, the model corrections per role its latest ``ModelCorrected`` event of the
    given revision number left; one query (none for an empty mapping)."""
    if not revisions:
        return {}
    latest = (
        DeploymentEvent.objects.filter(deployment_id__in=revisions, reason=MODEL_CORRECTED)
        .annotate(role=KeyTextTransform("role", "data"))
        .order_by("deployment_id", "role", "-id")
        .distinct("deployment_id", "role")
        .values_list("deployment_id", "revision_number", "role", "data")
    )
    out: dict[uuid.UUID, dict[str, dict[str, float]]] = defaultdict(dict)
    for pk, revision, role, data in latest:
        if revision == revisions[pk] and isinstance(data.get("correction"), dict):
            out[pk][role] = {m: float(v) for m, v in data["correction"].items()}
    return out


def gateway_last_requests(ids: list[uuid.UUID]) -> dict[str, datetime]:
    """The gateway's not-yet-flushed last-request times; empty if Redis does not answer."""
    try:
        client = redis_clients.client(settings.REDIS_URL)
        values = client.hmget(LAST_REQUEST_HASH, [str(pk) for pk in ids])
    except redis.RedisError as exc:
        # Deployment.last_request_at still holds what was flushed; at worst a little staler.
        logger.warning("autoscale: no gateway last-request times: %s", exc)
        return {}
    return {
        str(pk): datetime.fromtimestamp(int(value), tz=UTC)
        for pk, value in zip(ids, values, strict=True)
        if value is not None
    }


def latest_of(*marks: datetime | None) -> datetime | None:
    known = [mark for mark in marks if mark is not None]
    return max(known) if known else None
