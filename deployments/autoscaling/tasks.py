"""The autoscaler task: gather each running endpoint's load and apply ``autoscale.decide``.

Beat runs ``deployments.autoscale`` every ``PLINTH_AUTOSCALE_INTERVAL_S`` (entry in
``CELERY_BEAT_SCHEDULE``). One pass reads running endpoints in batches ordered by id: per batch
one query for the endpoints (with their revisions), one for their recent MetricSamples and one
Redis HMGET for the gateway's last-request times, which are fresher than
``Deployment.last_request_at`` (flushed every few seconds). A decision that changes the replica
count goes through ``services.autoscale_to``, which refuses it if a person scaled meanwhile.
Running two passes at once is safe for the same reason, only wasteful.

A split (prefill/decode) endpoint's pools are decided by ``autoscale.decide_pools`` on per-pool
samples, built from the per-replica figures the probe stores with each replica's role, and
applied by ``services.autoscale_pool_to``; going to zero when idle, and waking, move the whole
split endpoint (``decide``), both pools at once. The SLO policy's performance model comes from
``runtime.capacity`` for the target revision's spec and the workload the samples show (mean
prompt and output length, prefix-cache share); the default profile when they show none.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from celery import shared_task
from django.conf import settings
from django.db.models import Q
from django.db.models.fields.json import KeyTextTransform
from django.utils import timezone

from controlplane import redis_clients
from controlplane.services import ServiceError
from deployments.autoscaling import services
from deployments.autoscaling.decide import (
    POOLS,
    Decision,
    Observations,
    Sample,
    State,
    decide,
    decide_pools,
)
from deployments.endpoints.models import Deployment, DeploymentEvent, DesiredState
from deployments.endpoints.queries import REVISION_FIELDS
from deployments.traffic.models import MetricSample
from deployments.traffic.usage import LAST_REQUEST_HASH
from runtime.capacity import ReplicaModel, Role, Workload, replica_model
from runtime.spec import AutoscalingSettings, RuntimeSpec

__all__: list[str] = ["autoscale"]

logger = logging.getLogger(__name__)
BATCH = 200


@dataclass(frozen=True)
class _Endpoint:
    """A deployment with the policy of its target revision, ready for ``decide``."""

    deployment: Deployment
    policy: AutoscalingSettings
    disaggregated: bool
    spec: dict[str, Any]

    @property
    def lookback(self) -> timedelta:
        return timedelta(seconds=self.policy.window_seconds + self.policy.scale_down_delay_seconds)


# No lock: two passes at once are safe (``autoscale_to`` refuses a stale decision), so the limits
# only end a stuck pass, well after beat's next ones were sent (and dropped if still queued).
@shared_task(
    name="deployments.autoscale",
    ignore_result=True,
    soft_time_limit=settings.PLINTH_AUTOSCALE_INTERVAL_S * 4,
    time_limit=settings.PLINTH_AUTOSCALE_INTERVAL_S * 5,
)
def autoscale(now: str | None = None) -> dict[str, int]:
    """One pass over running endpoints; ``now`` (ISO 8601) lets tests step time."""
    at = datetime.fromisoformat(now) if now else timezone.now()
    checked = scaled = 0
    after: uuid.UUID | None = None
    while True:
        batch = _running_batch(after)
        if not batch:
            break
        after = batch[-1].deployment.pk
        checked += len(batch)
        scaled += sum(_apply(d) for d in _decisions(batch, at))
    return {"checked": checked, "scaled": scaled}


def _running_batch(after: uuid.UUID | None) -> list[_Endpoint]:
    query = (
        Deployment.objects.filter(desired_state=DesiredState.RUNNING, target_revision__isnull=False)
        .select_related(*REVISION_FIELDS)
        .defer("current_revision__spec", "applied_revision__spec")
        .order_by("pk")
    )
    if after is not None:
        query = query.filter(pk__gt=after)
    return [_endpoint(deployment) for deployment in query[:BATCH]]


def _endpoint(deployment: Deployment) -> _Endpoint:
    assert deployment.target_revision is not None
    spec: dict[str, Any] = deployment.target_revision.spec
    return _Endpoint(
        deployment=deployment,
        policy=AutoscalingSettings.model_validate(spec.get("autoscaling") or {}),
        disaggregated=bool((spec.get("disaggregation") or {}).get("enabled")),
        spec=spec,
    )


def _decisions(batch: list[_Endpoint], now: datetime) -> list[tuple[_Endpoint, Decision]]:
    rows = _rows(batch, now)
    seen = _gateway_last_requests([e.deployment.pk for e in batch])
    corrections = _corrections(batch)
    out = []
    for endpoint in batch:
        deployment = endpoint.deployment
        mine = rows.get(deployment.pk, [])
        observations = Observations(
            samples=[_sample(row) for row in mine],
            last_request_at=_latest(deployment.last_request_at, seen.get(str(deployment.pk))),
            pools=_pool_samples(mine) if endpoint.disaggregated else {},
            models=_models(endpoint, mine),
            corrections=corrections.get(deployment.pk, {}),
        )
        state = _state(endpoint)
        decisions = [decide(endpoint.policy, observations, state, now)]
        if endpoint.disaggregated and not decisions[0].changed:
            # Going to zero or waking moves the whole endpoint; otherwise its pools scale.
            decisions = decide_pools(endpoint.policy, observations, state, now)
        for decision in decisions:
            logger.debug("autoscale %s: %s", deployment.slug, decision.reason)
            out.append((endpoint, decision))
    return out


def _state(endpoint: _Endpoint) -> State:
    deployment = endpoint.deployment
    return State(
        replicas=deployment.desired_replicas,
        last_scaled_at=deployment.last_scaled_at,
        desired_state=deployment.desired_state,
        status=deployment.status,
        rollout_in_progress=deployment.rollout_started_at is not None,
        disaggregated=endpoint.disaggregated,
        first_ready_at=deployment.first_ready_at,
        pools=_pool_sizes(endpoint) if endpoint.disaggregated else {},
        pools_scaled_at=_pools_scaled_at(endpoint) if endpoint.disaggregated else {},
    )


def _pool_sizes(endpoint: _Endpoint) -> dict[str, int]:
    deployment = endpoint.deployment
    assert deployment.target_revision is not None
    return deployment.pool_sizes(deployment.target_revision.number, endpoint.spec)


def _pools_scaled_at(endpoint: _Endpoint) -> dict[str, datetime | None]:
    """When the autoscaler last sized each pool of the target revision (its cool-down)."""
    deployment = endpoint.deployment
    assert deployment.target_revision is not None
    scaled = deployment.pool_replicas or {}
    if scaled.get("revision") != deployment.target_revision.number:
        return {}
    stamps: dict[str, str] = scaled.get("scaled_at") or {}
    return {pool: datetime.fromisoformat(stamp) for pool, stamp in stamps.items()}


def _apply(item: tuple[_Endpoint, Decision]) -> bool:
    endpoint, decision = item
    if decision.corrected is not None:
        target = endpoint.deployment.target_revision
        assert target is not None
        services.record_model_correction(
            endpoint.deployment.pk, target.number, decision.corrected, decision.inputs
        )
    if not decision.changed:
        return False
    try:
        if decision.pool is not None:
            return services.autoscale_pool_to(
                endpoint.deployment.pk,
                decision.pool,
                decision.desired,
                decision.reason,
                decision.inputs,
                expected=decision.current,
            )
        return services.autoscale_to(
            endpoint.deployment.pk,
            decision.desired,
            decision.reason,
            decision.inputs,
            expected=decision.current,
        )
    except ServiceError as exc:
        # The settings changed between the read and the write; the next pass decides again.
        logger.info("autoscale %s refused: %s", endpoint.deployment.slug, exc)
        return False


# --- inputs ------------------------------------------------------------------------------------


_COLUMNS = (
    "deployment_id", "ts", "running", "queued", "requests_per_s", "requests", "prompt_tokens",
    "generation_tokens", "cached_tokens", "kv_usage", "ttft_p90", "itl_p90", "replicas_ready",
    "replicas",
)  # fmt: skip


def _rows(batch: list[_Endpoint], now: datetime) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """Each endpoint's samples over its own window + scale-down delay, in one query."""
    reach = Q()
    for endpoint in batch:
        reach |= Q(deployment_id=endpoint.deployment.pk, ts__gt=now - endpoint.lookback)
    rows = MetricSample.objects.filter(reach, ts__lte=now).values(*_COLUMNS)
    out: dict[uuid.UUID, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        out[row["deployment_id"]].append(row)
    return out


def _sample(row: dict[str, Any]) -> Sample:
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


def _pool_samples(rows: list[dict[str, Any]]) -> dict[str, list[Sample]]:
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
                    requests_per_s=_pool_rate(mine, row["requests_per_s"]),
                    queued=queued,
                    queued_prefill_tokens=sum(float(r.get("queued_tokens") or 0) for r in mine),
                    kv_usage=sum(kv) / len(kv) if kv else None,
                    ttft_p90=_worst(mine, "ttft_p90", row["ttft_p90"]),
                    itl_p90=_worst(mine, "itl_p90", row["itl_p90"]),
                    ready=len(mine),
                )
            )
    return out


def _pool_rate(replicas: list[dict[str, Any]], endpoint: float) -> float:
    """Requests/s the pool finished (each pool counts every request once), else the endpoint's."""
    rate = sum(float(r.get("requests_per_s") or 0) for r in replicas)
    return rate if rate > 0 else endpoint


def _worst(replicas: list[dict[str, Any]], key: str, endpoint: float | None) -> float | None:
    values = [float(r[key]) for r in replicas if r.get(key) is not None]
    return max(values) if values else endpoint


def _models(endpoint: _Endpoint, rows: list[dict[str, Any]]) -> dict[str, ReplicaModel | None]:
    """The SLO policy's performance model per role, for the workload the samples show."""
    if endpoint.policy.slo is None:
        return {}
    requests = sum(row["requests"] for row in rows)
    workload = Workload()
    if requests > 0:
        prompt = sum(row["prompt_tokens"] for row in rows)
        workload = Workload(
            input_tokens=max(1, round(prompt / requests)),
            output_tokens=max(1, round(sum(row["generation_tokens"] for row in rows) / requests)),
            cached_share=sum(row["cached_tokens"] for row in rows) / prompt if prompt else 0.0,
        )
    spec = RuntimeSpec.model_validate(endpoint.spec)
    roles: tuple[Role, ...] = ("prefill", "decode") if endpoint.disaggregated else ("engine",)
    return {role: replica_model(spec, role, workload) for role in roles}


def _corrections(batch: list[_Endpoint]) -> dict[uuid.UUID, dict[str, dict[str, float]]]:
    """Each SLO endpoint's model corrections per role, as its latest ``ModelCorrected`` event of
    the target revision left them (a new revision's model starts uncorrected); one query, and
    none for a batch without an SLO policy."""
    targets = {
        e.deployment.pk: e.deployment.target_revision.number
        for e in batch
        if e.policy.slo is not None and e.deployment.target_revision is not None
    }
    if not targets:
        return {}
    latest = (
        DeploymentEvent.objects.filter(deployment_id__in=targets, reason=services.MODEL_CORRECTED)
        .annotate(role=KeyTextTransform("role", "data"))
        .order_by("deployment_id", "role", "-id")
        .distinct("deployment_id", "role")
        .values_list("deployment_id", "revision_number", "role", "data")
    )
    out: dict[uuid.UUID, dict[str, dict[str, float]]] = defaultdict(dict)
    for pk, revision, role, data in latest:
        if revision == targets[pk] and isinstance(data.get("correction"), dict):
            out[pk][role] = {m: float(v) for m, v in data["correction"].items()}
    return out


def _gateway_last_requests(ids: list[uuid.UUID]) -> dict[str, datetime]:
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


def _latest(*marks: datetime | None) -> datetime | None:
    known = [mark for mark in marks if mark is not None]
    return max(known) if known else None
