"""Per-key requests-per-minute and tokens-per-minute limits, enforced atomically in Redis.

Each limit is a token bucket holding at most one minute's allowance and refilling at the
per-minute rate, so a key may burst up to its limit and recovers continuously rather than at a
minute boundary. Requests take one unit at admission. Tokens are only known after the response,
so they are charged then (the bucket may go below zero) and new requests are refused while it
is empty. One Lua script per step keeps read-modify-write atomic across gateway replicas.

A Redis round trip per request would cost more than the rest of the gateway's work, so
admission takes a *lease*: one atomic call takes up to ``LEASE_SECONDS`` worth of the key's
refill rate from the bucket (at least one request), and the gateway admits locally until the
lease is used up or expires. A key limited to 60 requests a minute gets leases of one, so it
is checked in Redis on every request, exactly; a key allowed millions goes to Redis a few
times a second. The token verdict is cached for the same lease time, so a key over its TPM
limit is refused within ``LEASE_SECONDS`` plus the meter's flush interval. Leased units a
replica does not use expire with the lease (limits err on the strict side).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from gateway.routes import InferenceKey

_LEVEL = """
local function level(key, cap, now)
  local v = redis.call('HMGET', key, 'l', 't')
  local l = tonumber(v[1])
  if l == nil then return cap end
  return math.min(cap, l + (now - tonumber(v[2])) * cap / 60)
end
local function store(key, l, cap, now)
  redis.call('HSET', key, 'l', tostring(l), 't', tostring(now))
  -- Kept until full again (a deep token debt takes longer than a minute to repay).
  local ttl = 120
  if l < 0 then ttl = ttl + math.ceil(-l * 60 / cap) end
  redis.call('EXPIRE', key, ttl)
end
"""

# KEYS: requests bucket, tokens bucket. ARGV: now, rpm (0 = none), tpm (0 = none), wanted.
# Returns {verdict, seconds until it would pass, requests granted}; verdict 'ok', 'requests'
# or 'tokens'.
ADMIT = (
    _LEVEL
    + """
local now, rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local granted = tonumber(ARGV[4])
if tpm > 0 then
  local t = level(KEYS[2], tpm, now)
  if t <= 0 then return {'tokens', tostring((0.01 - t) * 60 / tpm), 0} end
end
if rpm > 0 then
  local r = level(KEYS[1], rpm, now)
  if r < 1 then return {'requests', tostring((1 - r) * 60 / rpm), 0} end
  granted = math.min(granted, math.floor(r))
  store(KEYS[1], r - granted, rpm, now)
end
return {'ok', '0', granted}
"""
)

# KEYS: tokens bucket. ARGV: now, tpm, tokens used.
CHARGE = (
    _LEVEL
    + """
local now, tpm, used = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
store(KEYS[1], level(KEYS[1], tpm, now) - used, tpm, now)
return 1
"""
)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    limit: str = ""  # "requests" or "tokens" when refused
    retry_after: float = 0.0


ALLOWED = Verdict(allowed=True)


LEASE_SECONDS = 1.0
# Requests a TPM-only lease admits: bounded by its lifetime, not by a count.
_UNCOUNTED = 1_000_000


def bucket_keys(key: InferenceKey) -> list[str]:
    return [f"plinth:gw:rl:{key.id}:requests", f"plinth:gw:rl:{key.id}:tokens"]


def lease_size(key: InferenceKey) -> int:
    if not key.requests_per_minute:
        return _UNCOUNTED
    return max(1, int(key.requests_per_minute / 60 * LEASE_SECONDS))


@dataclass
class Lease:
    remaining: int
    until: float  # monotonic
    refusal: Verdict | None = None  # a cached refusal, for the lease time at most


class RateLimiter:
    def __init__(self, client: aioredis.Redis) -> None:
        self._client = client
        self._leases: dict[str, Lease] = {}
        self._fetching: dict[str, asyncio.Future[None]] = {}
        self._admit_sha = hashlib.sha1(ADMIT.encode()).hexdigest()  # noqa: S324 (Redis's id)
        self._charge_sha = hashlib.sha1(CHARGE.encode()).hexdigest()  # noqa: S324 (Redis's id)

    async def load(self) -> None:
        """Load the scripts once, so pipelines can call them by hash without a check each time."""
        await self._client.script_load(ADMIT)
        await self._client.script_load(CHARGE)

    async def admit(self, key: InferenceKey, now: float) -> Verdict:
        if not key.limited:
            return ALLOWED
        while True:
            verdict = self._from_lease(key)
            if verdict is not None:
                return verdict
            pending = self._fetching.get(key.id)
            if pending is not None:
                # Another request is fetching this key's lease: share it, do not race it.
                await asyncio.shield(pending)
                continue
            await self._fetch_lease(key, now)

    def _from_lease(self, key: InferenceKey) -> Verdict | None:
        lease = self._leases.get(key.id)
        if lease is None or time.monotonic() >= lease.until:
            return None
        if lease.refusal is not None:
            return lease.refusal
        if lease.remaining < 1:
            return None
        lease.remaining -= 1
        return ALLOWED

    async def _fetch_lease(self, key: InferenceKey, now: float) -> None:
        done = asyncio.get_running_loop().create_future()
        self._fetching[key.id] = done
        try:
            verdict, wait, granted = await self._call_admit(key, now)
            until = time.monotonic() + LEASE_SECONDS
            if verdict == "ok":
                self._leases[key.id] = Lease(int(granted), until)
            else:
                refusal = Verdict(allowed=False, limit=verdict, retry_after=float(wait))
                self._leases[key.id] = Lease(0, min(until, time.monotonic() + float(wait)), refusal)
        finally:
            del self._fetching[key.id]
            done.set_result(None)

    async def _call_admit(self, key: InferenceKey, now: float) -> tuple[str, bytes, int]:
        args = (now, key.requests_per_minute or 0, key.tokens_per_minute or 0, lease_size(key))
        # EVALSHA directly: redis-py's Script wrapper does a Protocol isinstance check that
        # costs more CPU than the rest of the call.
        try:
            verdict, wait, granted = await self._client.evalsha(
                self._admit_sha, 2, *bucket_keys(key), *args
            )
        except NoScriptError:
            await self.load()
            verdict, wait, granted = await self._client.evalsha(
                self._admit_sha, 2, *bucket_keys(key), *args
            )
        return verdict.decode() if isinstance(verdict, bytes) else verdict, wait, granted

    def charge(
        self, pipe: aioredis.client.Pipeline, key: InferenceKey, now: float, used: int
    ) -> None:
        """Queue the token charge on ``pipe`` (sent with the usage counters, one round trip)."""
        if key.tokens_per_minute and used > 0:
            pipe.evalsha(self._charge_sha, 1, bucket_keys(key)[1], now, key.tokens_per_minute, used)
