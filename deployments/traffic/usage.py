"""Usage flush: the gateway's Redis counters into UsageRecord, exactly once; last-request times.

The gateway counts per key, endpoint (and LoRA adapter) and minute in a Redis hash per minute
(``gateway.metering``), listing the minute in a set, both in one MULTI/EXEC. A flush claims
each closed minute by renaming its hash to a processing name that is unique to this claim (the
batch) and taking the minute off the set, both in one MULTI/EXEC too: a flush that dies there
either claimed the minute whole or left it listed, and the gateway's next increments start a
fresh hash. It then adds the batch's counts to the rows (``INSERT ... ON CONFLICT DO UPDATE SET
x = x + EXCLUDED.x``) and records the batch's name (``UsageFlushBatch``) in the same
transaction, and deletes the batch from Redis only after that commits. A flush that dies
before the commit leaves the batch for the next flush, which adds it; one that dies after
the commit leaves a batch the next flush finds recorded, so it only deletes it. Every count is
added exactly once, whatever step a flush dies at (``tests/gateway/test_usage_flush.py`` kills
one after each step). Adding, never overwriting, makes a minute flushed in several
batches (the current minute on demand) come out right.

Counts reach UsageRecord once their minute has closed (``GRACE_SECONDS`` after its end) and
beat has run the next flush (every ``PLINTH_USAGE_FLUSH_S``, 15 s): up to about 80 seconds after
a call (README: Calling an endpoint; the console's Usage page says so too).

The flush also moves endpoints' last-request times forward (``record_last_request``), the
observed fact the autoscaler's idle clock reads. The gateway's metering module is not imported:
these key names are the contract between the
two processes and are repeated here on purpose.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import redis
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from controlplane import redis_clients
from controlplane.models import ApiKey
from deployments.endpoints.models import Deployment
from deployments.traffic.models import UsageFlushBatch, UsageRecord
from deployments.traffic.redis_fields import as_count, as_time, as_uuid

USAGE_PREFIX = "plinth:usage:"
MINUTES_SET = "plinth:usage:minutes"
LAST_REQUEST_HASH = "plinth:usage:last_request"
PROCESSING_PREFIX = "plinth:usage:processing:"
LAST_REQUEST_PROCESSING_PREFIX = "plinth:last_request:processing:"
LOCK_KEY = "plinth:usage:flush-lock"
# The lock's TTL: a flush that dies holding it blocks the next ones this long at most. The task's
# time limits are below it (deployments.traffic.tasks).
FLUSH_LOCK_S = 120
COUNTERS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens")
# A minute is closed once this many seconds past its end: late requests have finished counting.
GRACE_SECONDS = 5
# A batch's record outlives the batch by far: it is deleted from Redis by the same or next flush.
BATCH_RETENTION = timedelta(days=7)
logger = logging.getLogger(__name__)


@dataclass
class FlushResult:
    minutes: int = 0
    rows: int = 0
    requests: int = 0
    endpoints_touched: int = 0
    skipped: list[str] = field(default_factory=list)
    malformed: int = 0  # fields that no gateway wrote (they do not parse): skipped


def _client() -> redis.Redis:
    return redis_clients.client(settings.REDIS_URL)


def flush_usage(*, include_current: bool = False, client: redis.Redis | None = None) -> FlushResult:
    """Move counted usage into UsageRecord. Beat runs it; tests pass ``include_current``."""
    client = client or _client()
    result = FlushResult()
    lock = client.lock(LOCK_KEY, timeout=FLUSH_LOCK_S, blocking_timeout=0)
    if not lock.acquire():
        return result  # another flush is running; it will take these too
    try:
        _claim_minutes(client, include_current)
        for name in sorted(client.scan_iter(match=f"{PROCESSING_PREFIX}*")):
            _flush_hash(client, name, result)
        result.endpoints_touched = flush_last_requests(client)
        prune_batches()
    finally:
        lock.release()
    return result


def _claim_minutes(client: redis.Redis, include_current: bool) -> None:
    """Rename each closed minute's hash to a batch name of its own and unlist the minute."""
    newest = int((time.time() - GRACE_SECONDS) // 60) * 60
    for raw in client.smembers(MINUTES_SET):
        minute = int(raw)
        if minute >= newest and not include_current:
            continue
        # One MULTI/EXEC: unlisting without renaming would orphan the minute's counts.
        pipe = client.pipeline(transaction=True)
        pipe.rename(f"{USAGE_PREFIX}{minute}", f"{PROCESSING_PREFIX}{minute}:{uuid.uuid4().hex}")
        pipe.srem(MINUTES_SET, raw)
        # RENAME fails when no hash exists (nothing was counted): the minute is unlisted anyway.
        pipe.execute(raise_on_error=False)


def _flush_hash(client: redis.Redis, name: bytes, result: FlushResult) -> None:
    batch = name.decode()
    minute = int(batch.removeprefix(PROCESSING_PREFIX).split(":", 1)[0])
    counts, malformed = _parse_counts(client.hgetall(name))
    if malformed:
        # Not written by a gateway (nothing can bill them): skipped, so the batch still goes.
        logger.warning("usage batch %s: %d malformed fields skipped", batch, malformed)
        result.malformed += malformed
    rows = _usage_rows(counts, datetime.fromtimestamp(minute, tz=UTC), result)
    with transaction.atomic():
        # False when a flush that died before deleting the batch had committed it already.
        first_time = _record_batch(batch)
        if first_time:
            _upsert(rows)
    client.delete(name)
    if first_time:
        result.minutes += 1
        result.rows += len(rows)
        result.requests += sum(row[6] for row in rows)


def _record_batch(batch: str) -> bool:
    """Record the batch as flushed; False if it was already. A concurrent flush of the same
    batch waits here for the first one's commit and then gets False."""
    table = UsageFlushBatch._meta.db_table
    sql = (
        f"INSERT INTO {table} (batch, flushed_at) VALUES (%s, %s) "  # noqa: S608 (names are ours)
        "ON CONFLICT (batch) DO NOTHING RETURNING batch"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [batch, timezone.now()])
        return cursor.fetchone() is not None


def prune_batches() -> int:
    """Forget batches flushed long ago (their Redis hashes were deleted long before)."""
    deleted, _ = UsageFlushBatch.objects.filter(
        flushed_at__lt=timezone.now() - BATCH_RETENTION
    ).delete()
    return deleted


# (key, endpoint, slug, adapter) -> counter -> amount; adapter "" is the base model.
Counts = dict[tuple[uuid.UUID, uuid.UUID, str, str], dict[str, int]]
# organization, key, endpoint, slug, adapter, minute, then the COUNTERS in their order.
UsageRow = tuple[uuid.UUID, uuid.UUID, uuid.UUID, str, str, datetime, int, int, int, int]


def _parse_counts(raw: dict[bytes | str, bytes | str]) -> tuple[Counts, int]:
    """The counts by (key, endpoint, slug, adapter), and how many fields did not parse.

    A field is ``<key>|<endpoint>|<slug>|<adapter>|<counter>`` for a LoRA adapter, without the
    adapter part for the base model."""
    counts: Counts = defaultdict(dict)
    malformed = 0
    for field_name, value in raw.items():
        parts = redis_clients.as_text(field_name).split("|")
        if len(parts) not in (4, 5):
            malformed += 1
            continue
        key_id, endpoint_id, slug, *adapter, counter = parts
        key, endpoint, amount = as_uuid(key_id), as_uuid(endpoint_id), as_count(value)
        if key is None or endpoint is None or amount is None:
            malformed += 1
        elif counter in COUNTERS:
            counts[(key, endpoint, slug, "".join(adapter))][counter] = amount
    return counts, malformed


def _usage_rows(counts: Counts, minute: datetime, result: FlushResult) -> list[UsageRow]:
    key_ids = {key for key, _, _, _ in counts}
    organizations = dict(ApiKey.objects.filter(pk__in=key_ids).values_list("id", "organization_id"))
    rows: list[UsageRow] = []
    for (key, endpoint, slug, adapter), values in counts.items():
        organization_id = organizations.get(key)
        if organization_id is None:
            result.skipped.append(str(key))  # the key was deleted; its usage goes with it
            continue
        requests, prompt, cached, completion = (values.get(counter, 0) for counter in COUNTERS)
        counted = (requests, prompt, cached, completion)
        rows.append((organization_id, key, endpoint, slug, adapter, minute, *counted))
    return rows


def _upsert(rows: list[UsageRow]) -> None:
    if not rows:
        return
    table = UsageRecord._meta.db_table
    additions = ", ".join(f"{c} = {table}.{c} + EXCLUDED.{c}" for c in COUNTERS)
    sql = (
        f"INSERT INTO {table} (organization_id, api_key_id, deployment_id, deployment_slug, "  # noqa: S608 (names are ours)
        f"adapter, minute, {', '.join(COUNTERS)}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
        f"ON CONFLICT (api_key_id, deployment_id, adapter, minute) DO UPDATE SET {additions}"
    )
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def flush_last_requests(client: redis.Redis) -> int:
    """Endpoints' last-request times for the autoscaler, only ever moved forward."""
    with contextlib.suppress(redis.ResponseError):  # no such key: no request since last time
        client.rename(LAST_REQUEST_HASH, f"{LAST_REQUEST_PROCESSING_PREFIX}{uuid.uuid4().hex}")
    touched = 0
    for name in client.scan_iter(match=f"{LAST_REQUEST_PROCESSING_PREFIX}*"):
        for endpoint_id, epoch in client.hgetall(name).items():
            endpoint, when = as_uuid(endpoint_id), as_time(epoch)
            if endpoint is not None and when is not None:  # else not a gateway's: skipped
                touched += record_last_request(endpoint, when)
        client.delete(name)
    return touched


def record_last_request(deployment_id: uuid.UUID | str, when: datetime) -> int:
    """The gateway saw traffic for this endpoint at ``when`` (the autoscaler's idle clock): an
    observed fact, written here where it is flushed, as the probe writes its own.

    Conditional, so an older time (a leftover hash from a retried flush) never overwrites a
    newer one. Returns the number of rows moved forward (0 or 1).
    """
    return (
        Deployment.objects.filter(pk=deployment_id)
        .exclude(last_request_at__gte=when)
        .update(last_request_at=when)
    )
