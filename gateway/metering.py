"""Usage counting on the hot path: Redis counters per key, endpoint (and adapter) and minute.

A request adds its counts to an in-process batch (a dictionary update, no I/O); a background task
sends the batch to Redis every ``flush_seconds`` (1 s) in one MULTI/EXEC pipeline: HINCRBY on the
minute's hash (field ``<key id>|<endpoint id>|<slug>|<counter>`` for the base model,
``<key id>|<endpoint id>|<slug>|<adapter>|<counter>`` for a LoRA adapter), the minute added to
the set of minutes to flush, the endpoints' last-request times for the autoscaler, the keys'
last-used times (one HSET for the batch), and the token charges of keys with a TPM limit.
Per-request Redis round trips cost more CPU than the rest of the gateway together; batching
trades them for at most ``flush_seconds`` of counts held in memory (sent on shutdown; lost only
if the process is killed). A token charge that could change a rate-limit verdict (1% of the
key's tokens per minute or more) is sent within ``charge_seconds`` (0.2 s) instead; small
charges against large limits wait for the next flush. ``deployments.traffic.usage`` moves the
Redis counters to UsageRecord, and ``deployments.traffic.key_activity`` the keys' last-used
times to ApiKey.

While a canary runs beside an endpoint's serving revision, each answer is also counted per
revision (requests, 5xx errors, prompt and completion tokens) in 10-second buckets of the
endpoint's ``plinth:revisions:<endpoint id>`` hash (field ``<bucket>|<revision>|<counter>``),
which ``deployments.experiments.canary.watch`` compares over the canary's window. The hash expires a
while after the last count, so nothing is kept once no canary runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError
from redis.typing import EncodableT, FieldT

from gateway.limits import RateLimiter
from gateway.observability import AccessRecord
from gateway.routes import Endpoint, InferenceKey

USAGE_PREFIX = "plinth:usage:"
MINUTES_SET = "plinth:usage:minutes"
LAST_REQUEST_HASH = "plinth:usage:last_request"
KEY_LAST_USED_HASH = "plinth:usage:key_last_used"
COUNTERS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens")
# Per-revision counts while a canary runs (read by deployments.experiments.canary.watch, same
# names).
REVISION_PREFIX = "plinth:revisions:"
REVISION_COUNTERS = ("requests", "errors", "prompt_tokens", "completion_tokens")
REVISION_BUCKET_S = 10
REVISION_TTL_S = 6 * 3600
logger = logging.getLogger("plinth.gateway")


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cached_tokens + other.cached_tokens,
        )


def minute_of(now: float) -> int:
    return int(now // 60) * 60


def _hash_fields(times: dict[str, int]) -> dict[FieldT, EncodableT]:
    # The same pairs typed as redis-py's hset takes them: a dict's key type is invariant, so a
    # dict[str, int] is no Mapping[FieldT, EncodableT] although each str is a FieldT.
    return {name: when for name, when in times.items()}


def usage_hash(minute: int) -> str:
    return f"{USAGE_PREFIX}{minute}"


@dataclass
class Batch:
    # (minute, "<key id>|<endpoint id>|<slug>|[<adapter>|]") -> [requests, prompt, cached,
    # completion]
    counts: dict[tuple[int, str], list[int]]
    charges: dict[tuple[InferenceKey, float], int]  # (key, time) -> tokens, TPM keys only
    last_request: dict[str, int]  # endpoint id -> epoch seconds
    key_last_used: dict[str, int]  # key id -> epoch seconds
    # (endpoint id, "<bucket>|<revision>|") -> [requests, errors, prompt, completion]
    outcomes: dict[tuple[str, str], list[int]] = field(
        default_factory=lambda: defaultdict(lambda: [0, 0, 0, 0])
    )
    urgent: bool = False  # holds a charge worth sending before the next regular flush

    @classmethod
    def empty(cls) -> Batch:
        return cls(defaultdict(lambda: [0, 0, 0, 0]), defaultdict(int), {}, {})

    def __bool__(self) -> bool:
        return bool(self.counts or self.last_request or self.key_last_used or self.outcomes)


class Meter:
    def __init__(
        self,
        client: aioredis.Redis,
        limiter: RateLimiter,
        flush_seconds: float = 1.0,
        charge_seconds: float = 0.2,
    ) -> None:
        self._client = client
        self._limiter = limiter
        self._flush_seconds = flush_seconds
        self._charge_seconds = charge_seconds
        self._batch = Batch.empty()
        self._task: asyncio.Task[None] | None = None

    def add(
        self,
        key: InferenceKey,
        endpoint: Endpoint,
        usage: Usage | None,
        now: float,
        adapter: str = "",
    ) -> None:
        """Count one request of ``adapter`` ("" the base model); no I/O: the next flush sends it."""
        batch = self._batch
        named = f"{adapter}|" if adapter else ""
        counted = f"{key.id}|{endpoint.id}|{endpoint.slug}|{named}"
        counts = batch.counts[(minute_of(now), counted)]
        counts[0] += 1
        if usage is not None:
            counts[1] += usage.prompt_tokens
            counts[2] += usage.cached_tokens
            counts[3] += usage.completion_tokens
            if key.tokens_per_minute and usage.total:
                slot = (key, int(now))
                batch.charges[slot] += usage.total
                if batch.charges[slot] * 100 >= key.tokens_per_minute:
                    batch.urgent = True
        batch.last_request[endpoint.id] = int(now)
        batch.key_last_used[key.id] = int(now)

    def add_outcome(self, endpoint_id: str, revision: int, record: AccessRecord) -> None:
        """Count one answer of ``revision`` while a canary runs (no I/O)."""
        bucket = int(record.finished_at // REVISION_BUCKET_S) * REVISION_BUCKET_S
        counts = self._batch.outcomes[(endpoint_id, f"{bucket}|{revision}|")]
        counts[0] += 1
        counts[1] += record.status >= 500
        counts[2] += record.prompt_tokens
        counts[3] += record.completion_tokens

    def start(self) -> None:
        self._task = asyncio.create_task(self._flush_loop(), name="usage-flush")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.flush()

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time() + self._flush_seconds
        while True:
            await asyncio.sleep(self._charge_seconds)
            if not self._batch.urgent and loop.time() < due:
                continue
            due = loop.time() + self._flush_seconds
            try:
                await self.flush()
            except (aioredis.RedisError, OSError):
                logger.warning("usage counters not sent (Redis unavailable); retrying")

    async def flush(self) -> None:
        """Send what was counted since the last flush; on failure it is kept for the next."""
        batch, self._batch = self._batch, Batch.empty()
        if not batch:
            return
        try:
            await self._send(batch)
        except BaseException:
            self._merge_back(batch)
            raise

    async def _send(self, batch: Batch) -> None:
        # MULTI/EXEC: a concurrent flush (it renames the hash) sees a batch whole or not at all.
        pipe = self._client.pipeline(transaction=True)
        for (minute, prefix), values in batch.counts.items():
            for counter, value in zip(COUNTERS, values, strict=True):
                if value:
                    pipe.hincrby(usage_hash(minute), prefix + counter, value)
        for minute in {minute for minute, _ in batch.counts}:
            pipe.sadd(MINUTES_SET, minute)
        if batch.last_request:
            pipe.hset(LAST_REQUEST_HASH, mapping=_hash_fields(batch.last_request))
        if batch.key_last_used:
            pipe.hset(KEY_LAST_USED_HASH, mapping=_hash_fields(batch.key_last_used))
        for (endpoint_id, prefix), values in batch.outcomes.items():
            for counter, value in zip(REVISION_COUNTERS, values, strict=True):
                if value:
                    pipe.hincrby(REVISION_PREFIX + endpoint_id, prefix + counter, value)
        for endpoint_id in {endpoint_id for endpoint_id, _ in batch.outcomes}:
            pipe.expire(REVISION_PREFIX + endpoint_id, REVISION_TTL_S)
        charges = list(batch.charges.items())
        for (key, now), used in charges:
            self._limiter.charge(pipe, key, now, used)
        results = await pipe.execute(raise_on_error=False)
        if any(isinstance(r, NoScriptError) for r in results):
            # Redis restarted and forgot the charge script: load it and charge again.
            await self._limiter.load()
            retry = self._client.pipeline(transaction=False)
            for (key, now), used in charges:
                self._limiter.charge(retry, key, now, used)
            await retry.execute()

    def _merge_back(self, batch: Batch) -> None:
        for slot, values in batch.counts.items():
            current = self._batch.counts[slot]
            for i, value in enumerate(values):
                current[i] += value
        for charge, used in batch.charges.items():
            self._batch.charges[charge] += used
        for outcome, values in batch.outcomes.items():
            kept = self._batch.outcomes[outcome]
            for i, value in enumerate(values):
                kept[i] += value
        self._batch.urgent = self._batch.urgent or batch.urgent
        for latest, earlier in (
            (self._batch.last_request, batch.last_request),
            (self._batch.key_last_used, batch.key_last_used),
        ):
            for name, when in earlier.items():
                latest[name] = max(when, latest.get(name, 0))
