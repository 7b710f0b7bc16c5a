"""Which replica of a pool each routing key goes to: placed by count, pinned, shared in Redis.

A replica's prefix cache holds the prompts of the tenants (and conversations) sent to it; give
one replica more of them than its cache holds and it thrashes while the others idle
(``bench/routing.py`` measures it). smg 1.13 places a prefix it has not seen without counting the
prefixes its replicas already hold: its cache-aware tree picks the least-loaded replica of the
moment, and its manual policy's ``min_group`` counts only keys with requests in flight, so
tenants that arrive one at a time land at random and stay there.

So the gateway places, and the router obeys: each routing key (``runtime.routing_key``) goes to
the replica slot holding the fewest keys, the lowest slot on a tie, and stays there until it has
been idle for ``ROUTING_KEY_IDLE_SECONDS``. The request then carries smg's
``x-smg-target-worker`` header with that slot (the router runs ``consistent_hashing``, which
honours it; see ``runtime.launch.smg_policy``). A slot is an index into the router's list of
*available* workers (smg 1.13 drops unhealthy and circuit-broken ones before reading it; a worker
that joins is appended, one that leaves shifts those after it down). So the slots keep their
replicas while the pool is healthy and its membership steady; when a replica is down or removed,
the keys of the later slots meet other replicas' caches until it is back (or, after a removal,
once: then they stay). smg offers no stable name for a worker to target (1.13 takes an index
only), which is what a sturdier mapping would need. A slot at or past the number of ready
replicas is placed afresh. A slot the router refuses (no ready replica there: one went away, or
the control plane counts a replica the router does not list yet) is left out for
``REFUSED_SECONDS`` by the gateway process that saw it: its keys move to the other slots for good
and new keys go there too (``gateway.app`` sends the refused request again).

The table lives in Redis, one hash of key -> slot, one sorted set of last use and one hash of
counts per pool, changed by one Lua script, so every gateway replica places alike and a restart
keeps the placements. Each gateway replica remembers its answers for ``LOCAL_SECONDS``: the
request path goes to Redis once per key and interval, not per request.
"""

from __future__ import annotations

import hashlib
import time

import redis.asyncio as aioredis
from redis.exceptions import NoScriptError

from runtime.launch import ROUTING_KEY_IDLE_SECONDS

# How long a gateway replica trusts a placement it read, before asking Redis again (which also
# marks the key as in use there). Far below the idle time, so a busy key never looks idle.
LOCAL_SECONDS = 30.0
# Local answers kept at most; past this the memory is cleared and refilled from Redis.
LOCAL_ENTRIES = 65_536
# Idle keys forgotten per call: a bounded cost, which busy pools reach often enough.
_EVICT_PER_CALL = 64
# How long a slot the router refused is left out of placement (about a router health check and
# a readiness probe, after which it is tried again).
REFUSED_SECONDS = 10.0

# KEYS: key -> slot (hash), key -> last use (sorted set), slot -> keys placed (hash).
# ARGV: routing key, slots, now, idle seconds, expiry of the whole table, then the slots left
# out (refused). Returns the key's slot, or -1 when every slot is left out.
PLACE = f"""
local key, slots = ARGV[1], tonumber(ARGV[2])
local now, idle, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {{}}
for i = 6, #ARGV do out[tonumber(ARGV[i])] = true end
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - idle,
                         'LIMIT', 0, {_EVICT_PER_CALL})
for _, old in ipairs(stale) do
  local s = redis.call('HGET', KEYS[1], old)
  if s then redis.call('HINCRBY', KEYS[3], s, -1) end
  redis.call('HDEL', KEYS[1], old)
  redis.call('ZREM', KEYS[2], old)
end
local slot = tonumber(redis.call('HGET', KEYS[1], key))
if slot == nil or slot >= slots or out[slot] then
  local names = {{}}
  for i = 0, slots - 1 do names[#names + 1] = tostring(i) end
  local counts = redis.call('HMGET', KEYS[3], unpack(names))
  local fewest, best = nil, nil
  for i = 1, slots do
    local n = tonumber(counts[i]) or 0
    if not out[i - 1] and (fewest == nil or n < fewest) then fewest, best = n, i - 1 end
  end
  if best == nil then return -1 end
  if slot ~= nil then redis.call('HINCRBY', KEYS[3], slot, -1) end
  slot = best
  redis.call('HSET', KEYS[1], key, slot)
  redis.call('HINCRBY', KEYS[3], slot, 1)
end
redis.call('ZADD', KEYS[2], now, key)
for _, name in ipairs(KEYS) do redis.call('EXPIRE', name, ttl) end
return slot
"""
_PLACE_SHA = hashlib.sha1(PLACE.encode()).hexdigest()  # noqa: S324 (Redis's id)


def pool_id(router_url: str) -> str:
    """A pool's name in Redis: its router's address, hashed (one router per pool)."""
    return hashlib.blake2b(router_url.encode(), digest_size=8).hexdigest()


def table_keys(pool: str) -> tuple[str, str, str]:
    """The pool's three Redis keys, in one hash slot (``{pool}``) so the script may use them."""
    base = f"plinth:place:{{{pool}}}"
    return f"{base}:slot", f"{base}:seen", f"{base}:count"


class Placements:
    """The gateway's placement table: ``slot`` answers which replica slot a key goes to."""

    def __init__(
        self,
        client: aioredis.Redis,
        idle_seconds: float = ROUTING_KEY_IDLE_SECONDS,
        local_seconds: float = LOCAL_SECONDS,
        refused_seconds: float = REFUSED_SECONDS,
    ) -> None:
        self._client = client
        self.idle_seconds = idle_seconds
        self.local_seconds = local_seconds
        self.refused_seconds = refused_seconds
        # (pool, key) -> (slot, slots it was placed among, monotonic expiry)
        self._local: dict[tuple[str, str], tuple[int, int, float]] = {}
        # pool -> {slot the router refused: monotonic time until which it is left out}
        self._refused: dict[str, dict[int, float]] = {}

    async def slot(self, pool: str, key: str, slots: int, now: float) -> int | None:
        """The slot (0 .. slots-1) of ``key`` in ``pool``, placing it if it has none or if its
        slot is left out (``refuse``); None when every slot is left out.

        ``now`` is wall-clock seconds (shared by the gateway replicas through Redis). Raises
        ``redis.RedisError`` when Redis cannot answer and the key is not remembered locally.
        """
        if slots < 1:
            raise ValueError("a pool places keys among one slot or more")
        out = self._left_out(pool)
        remembered = self._local.get((pool, key))
        if remembered is not None:
            slot, among, until = remembered
            if among == slots and time.monotonic() < until and slot not in out:
                return slot
        placed = await self._place(pool, key, slots, now, out)
        if placed is None:
            return None
        if len(self._local) >= LOCAL_ENTRIES:
            self._local.clear()
        self._local[(pool, key)] = (placed, slots, time.monotonic() + self.local_seconds)
        return placed

    def refuse(self, pool: str, slot: int) -> None:
        """The router has no ready replica at ``slot``: leave it out for ``refused_seconds``."""
        self._refused.setdefault(pool, {})[slot] = time.monotonic() + self.refused_seconds

    def _left_out(self, pool: str) -> frozenset[int]:
        refused = self._refused.get(pool)
        if not refused:
            return frozenset()
        clock = time.monotonic()
        for slot in [s for s, until in refused.items() if until <= clock]:
            del refused[slot]
        return frozenset(refused)

    async def _place(
        self, pool: str, key: str, slots: int, now: float, out: frozenset[int]
    ) -> int | None:
        # The table outlives its keys' idle time a little, so a deleted pool's table goes too.
        ttl = int(self.idle_seconds * 2) + 60
        args: list[str | int | float] = [key, slots, now, self.idle_seconds, ttl, *sorted(out)]
        try:
            slot = await self._client.evalsha(_PLACE_SHA, 3, *table_keys(pool), *args)
        except NoScriptError:
            await self._client.script_load(PLACE)
            slot = await self._client.evalsha(_PLACE_SHA, 3, *table_keys(pool), *args)
        return None if int(slot) < 0 else int(slot)
