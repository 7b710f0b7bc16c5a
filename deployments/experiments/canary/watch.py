"""The canary watcher's reads: each running canary's figures beside its baseline's, judged.

Two sources over the canary's window (its last ``window_s`` seconds, never before it started):
the gateway's per-revision counts in Redis (requests and 5xx answers: what callers saw; see
``gateway.metering``) and the probe's per-revision latency in ``MetricSample.revisions``. The
verdict is ``deployments.experiments.canary.rules.judge``'s; acting on it (the abort) is the task's,
through ``canary_services``. Also ``traffic``: what the API and console show of a canary's split.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.utils import timezone

from controlplane import redis_clients
from deployments.endpoints.models import Revision
from deployments.experiments.canary.rules import (
    SideFigures,
    Thresholds,
    Verdict,
    judge,
    side_figures,
)
from deployments.experiments.models import Canary, CanaryStatus
from deployments.traffic.models import MetricSample

# The gateway's names (gateway.metering): the hash per endpoint and its bucket width.
REVISION_PREFIX = "plinth:revisions:"
REVISION_BUCKET_S = 10
# Buckets older than the longest window a canary may have are dropped when read.
KEEP_S = 6 * 3600


@dataclass(frozen=True)
class Judged:
    canary: Canary
    verdict: Verdict


def _client() -> redis.Redis:
    return redis_clients.client(settings.REDIS_URL)


def thresholds_of(canary: Canary) -> Thresholds:
    return Thresholds(
        max_error_rate_delta=canary.max_error_rate_delta,
        max_ttft_p90_ratio=canary.max_ttft_p90_ratio,
        max_itl_p90_ratio=canary.max_itl_p90_ratio,
        window_s=canary.window_s,
        min_requests=canary.min_requests,
    )


def window_start(canary: Canary, now: datetime) -> datetime:
    return max(canary.started_at, now - timedelta(seconds=canary.window_s))


def outcomes(
    client: redis.Redis, deployment_id: str, since: datetime, now: datetime
) -> dict[int, dict[str, float]]:
    """The gateway's counts per revision since ``since`` ({revision: {counter: n}}); buckets
    older than ``KEEP_S`` are deleted on the way."""
    key = REVISION_PREFIX + deployment_id
    raw = client.hgetall(key)
    start = since.timestamp()
    oldest = now.timestamp() - KEEP_S
    totals: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    stale: list[bytes | str] = []
    for name, value in raw.items():
        bucket, revision, counter = redis_clients.as_text(name).split("|")
        begins = int(bucket)
        if begins < oldest:
            stale.append(name)
        elif begins + REVISION_BUCKET_S > start:
            totals[int(revision)][counter] += float(value)
    if stale:
        client.hdel(key, *stale)
    return {revision: dict(counts) for revision, counts in totals.items()}


def figures(canary: Canary, now: datetime, client: redis.Redis) -> tuple[SideFigures, SideFigures]:
    """(canary, baseline) over the canary's window."""
    since = window_start(canary, now)
    samples = list(
        MetricSample.objects.filter(deployment_id=canary.deployment_id, ts__gte=since)
        .exclude(revisions={})
        .values_list("revisions", flat=True)
    )
    counts = outcomes(client, str(canary.deployment_id), since, now)
    ours, theirs = canary.revision.number, canary.baseline_revision.number
    return (
        side_figures(ours, samples, counts.get(ours, {})),
        side_figures(theirs, samples, counts.get(theirs, {})),
    )


def never_ready(now: datetime, window_s: Callable[[Revision], int]) -> list[Canary]:
    """Running canaries with no replica ready once ``window_s(revision)`` seconds passed."""
    waiting = Canary.objects.select_related("revision").filter(
        status=CanaryStatus.RUNNING, ready_replicas=0
    )
    return [c for c in waiting if now >= c.started_at + timedelta(seconds=window_s(c.revision))]


def failed_pools() -> list[Canary]:
    """Running canaries whose pool will never become ready (``Canary.pool_failure``)."""
    return list(
        Canary.objects.select_related("revision")
        .filter(status=CanaryStatus.RUNNING)
        .exclude(pool_failure="")
    )


def judge_running(now: datetime | None = None) -> list[Judged]:
    """Every running canary whose pool serves, judged over its window."""
    now = now or timezone.now()
    client = _client()
    running = Canary.objects.select_related("revision", "baseline_revision").filter(
        status=CanaryStatus.RUNNING, ready_replicas__gt=0
    )
    judged = []
    for canary in running:
        ours, theirs = figures(canary, now, client)
        judged.append(Judged(canary, judge(ours, theirs, thresholds_of(canary))))
    return judged


def traffic(canary: Canary, now: datetime | None = None) -> dict[str, dict[str, float | None]]:
    """What the canary's window holds of each side, for the API and the console."""
    now = now or timezone.now()
    try:
        ours, theirs = figures(canary, now, _client())
    except redis.RedisError:
        return {}
    return {"canary": ours.as_dict(), "baseline": theirs.as_dict()}
