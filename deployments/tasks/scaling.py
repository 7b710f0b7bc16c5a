"""The autoscaler task: gather each running endpoint's load and apply ``autoscale.decide``.

Beat runs ``deployments.autoscale`` every ``PLINTH_AUTOSCALE_INTERVAL_S`` (entry in
``CELERY_BEAT_SCHEDULE``). One pass reads running endpoints in batches ordered by id: per batch
one query for the endpoints (with their revisions), one for their recent MetricSamples and one
Redis HMGET for the gateway's last-request times, which are fresher than
``Deployment.last_request_at`` (flushed every few seconds). A decision that changes the replica
count goes through ``services.autoscale_to``, which refuses it if a person scaled meanwhile.
Running two passes at once is safe for the same reason, only wasteful.
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
from django.utils import timezone

from controlplane import redis_clients
from deployments import services
from deployments.autoscale import Decision, Observations, Sample, State, decide
from deployments.models import Deployment, DesiredState, MetricSample
from deployments.queries import REVISION_FIELDS
from deployments.usage import LAST_REQUEST_HASH
from runtime.spec import AutoscalingSettings

__all__: list[str] = ["autoscale"]

logger = logging.getLogger(__name__)
BATCH = 200


@dataclass(frozen=True)
class _Endpoint:
    """A deployment with the policy of its target revision, ready for ``decide``."""

    deployment: Deployment
    policy: AutoscalingSettings
    disaggregated: bool

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
    )


def _decisions(batch: list[_Endpoint], now: datetime) -> list[tuple[_Endpoint, Decision]]:
    samples = _samples(batch, now)
    seen = _gateway_last_requests([e.deployment.pk for e in batch])
    out = []
    for endpoint in batch:
        deployment = endpoint.deployment
        observations = Observations(
            samples=samples.get(deployment.pk, []),
            last_request_at=_latest(deployment.last_request_at, seen.get(str(deployment.pk))),
        )
        decision = decide(endpoint.policy, observations, _state(endpoint), now)
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
    )


def _apply(item: tuple[_Endpoint, Decision]) -> bool:
    endpoint, decision = item
    if not decision.changed:
        return False
    try:
        return services.autoscale_to(
            endpoint.deployment.pk,
            decision.desired,
            decision.reason,
            decision.inputs,
            expected=decision.current,
        )
    except services.ServiceError as exc:
        # The settings changed between the read and the write; the next pass decides again.
        logger.info("autoscale %s refused: %s", endpoint.deployment.slug, exc)
        return False


# --- inputs ------------------------------------------------------------------------------------


def _samples(batch: list[_Endpoint], now: datetime) -> dict[uuid.UUID, list[Sample]]:
    """Each endpoint's samples over its own window + scale-down delay, in one query."""
    reach = Q()
    for endpoint in batch:
        reach |= Q(deployment_id=endpoint.deployment.pk, ts__gt=now - endpoint.lookback)
    rows = MetricSample.objects.filter(reach, ts__lte=now).values_list(
        "deployment_id", "ts", "running", "queued"
    )
    out: dict[uuid.UUID, list[Sample]] = defaultdict(list)
    for deployment_id, ts, running, queued in rows:
        out[deployment_id].append(Sample(ts=ts, in_flight=running + queued))
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
