"""Usage flush: the gateway's Redis counters into UsageRecord rows, and last-request times.

The gateway counts per key, endpoint and minute in a Redis hash per minute
(``gateway.metering``). A flush takes each minute's hash out of the way first (RENAME to a
processing name, atomic, so later increments start a fresh hash), adds its counts to the rows
with one ``INSERT ... ON CONFLICT DO UPDATE SET x = x + EXCLUDED.x`` in a transaction, and
deletes the processing hash only after that commits. A flush that dies midway leaves the
processing hash for the next one, so counts are never dropped; adding, never overwriting,
makes flushing a minute twice in pieces (the current minute on demand) come out right.

The gateway's metering module is not imported: these key names are the contract between the
two processes and are repeated here on purpose.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

import redis
from django.conf import settings
from django.db import connection, transaction

from controlplane.models import ApiKey
from deployments import services
from deployments.models import UsageRecord

USAGE_PREFIX = "plinth:usage:"
MINUTES_SET = "plinth:usage:minutes"
LAST_REQUEST_HASH = "plinth:usage:last_request"
PROCESSING_PREFIX = "plinth:usage:processing:"
LAST_REQUEST_PROCESSING_PREFIX = "plinth:last_request:processing:"
LOCK_KEY = "plinth:usage:flush-lock"
COUNTERS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens")
# A minute is closed once this many seconds past its end: late requests have finished counting.
GRACE_SECONDS = 5
logger = logging.getLogger(__name__)


@dataclass
class FlushResult:
    minutes: int = 0
    rows: int = 0
    requests: int = 0
    endpoints_touched: int = 0
    skipped: list[str] = field(default_factory=list)


def _client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)


def flush_usage(*, include_current: bool = False, client: redis.Redis | None = None) -> FlushResult:
    """Move counted usage into UsageRecord. Beat runs it; tests pass ``include_current``."""
    client = client or _client()
    result = FlushResult()
    lock = client.lock(LOCK_KEY, timeout=120, blocking_timeout=0)
    if not lock.acquire():
        return result  # another flush is running; it will take these too
    try:
        _claim_minutes(client, include_current)
        for name in sorted(client.scan_iter(match=f"{PROCESSING_PREFIX}*")):
            _flush_hash(client, name, result)
        result.endpoints_touched = flush_last_requests(client)
    finally:
        lock.release()
    return result


def _claim_minutes(client: redis.Redis, include_current: bool) -> None:
    """Rename each closed minute's hash to its processing name (merging into a leftover one)."""
    newest = int((time.time() - GRACE_SECONDS) // 60) * 60
    for raw in client.smembers(MINUTES_SET):
        minute = int(raw)
        if minute >= newest and not include_current:
            continue
        client.srem(MINUTES_SET, raw)
        source = f"{USAGE_PREFIX}{minute}"
        target = f"{PROCESSING_PREFIX}{minute}:{uuid.uuid4().hex}"
        try:
            client.rename(source, target)
        except redis.ResponseError:
            continue  # no such key: nothing was counted, or it was claimed already


def _flush_hash(client: redis.Redis, name: bytes, result: FlushResult) -> None:
    minute = int(name.decode().removeprefix(PROCESSING_PREFIX).split(":", 1)[0])
    counts = _parse_counts(client.hgetall(name))
    rows = _usage_rows(counts, datetime.fromtimestamp(minute, tz=UTC), result)
    with transaction.atomic():
        _upsert(rows)
    # Only after the rows are committed: a crash before this line repeats nothing but the DEL.
    client.delete(name)
    result.minutes += 1
    result.rows += len(rows)
    result.requests += sum(row[5] for row in rows)


Counts = dict[tuple[str, str, str], dict[str, int]]


def _parse_counts(raw: dict[bytes, bytes]) -> Counts:
    counts: Counts = defaultdict(dict)
    for field_name, value in raw.items():
        key_id, endpoint_id, slug, counter = field_name.decode().split("|")
        if counter in COUNTERS:
            counts[(key_id, endpoint_id, slug)][counter] = int(value)
    return counts


def _usage_rows(counts: Counts, minute: datetime, result: FlushResult) -> list[tuple[object, ...]]:
    key_ids = {key_id for key_id, _, _ in counts}
    organizations = dict(ApiKey.objects.filter(pk__in=key_ids).values_list("id", "organization_id"))
    rows = []
    for (key_id, endpoint_id, slug), values in counts.items():
        organization_id = organizations.get(uuid.UUID(key_id))
        if organization_id is None:
            result.skipped.append(key_id)  # the key was deleted; its usage goes with it
            continue
        rows.append(
            (
                organization_id,
                uuid.UUID(key_id),
                uuid.UUID(endpoint_id),
                slug,
                minute,
                *(values.get(counter, 0) for counter in COUNTERS),
            )
        )
    return rows


def _upsert(rows: list[tuple[object, ...]]) -> None:
    if not rows:
        return
    table = UsageRecord._meta.db_table
    additions = ", ".join(f"{c} = {table}.{c} + EXCLUDED.{c}" for c in COUNTERS)
    sql = (
        f"INSERT INTO {table} (organization_id, api_key_id, deployment_id, deployment_slug, "  # noqa: S608 (names are ours)
        f"minute, {', '.join(COUNTERS)}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
        f"ON CONFLICT (api_key_id, deployment_id, minute) DO UPDATE SET {additions}"
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
            when = datetime.fromtimestamp(int(epoch), tz=UTC)
            touched += services.record_last_request(endpoint_id.decode(), when)
        client.delete(name)
    return touched
