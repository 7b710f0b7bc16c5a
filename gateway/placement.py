"""Which replica of a pool each routing key goes to: placed by recent traffic and cached working
set, pinned, shared in Redis.

A replica's prefix cache holds the prompts of the tenants (and conversations) sent to it; give
one replica more of them than its cache holds and it thrashes while the others idle
(``bench/routing.py`` measures it). smg 1.13 places a prefix it has not seen without counting the
prefixes its replicas already hold: its cache-aware tree picks the least-loaded replica of the
moment, and its manual policy's ``min_group`` counts only keys with requests in flight, so
tenants that arrive one at a time land at random and stay there.

So the gateway places, and the router obeys: each new routing key (``runtime.routing_key``) goes to
the replica slot with the least recent traffic (each key weighs its request count, halved every
``TRAFFIC_HALF_LIFE_SECONDS``); among slots within ``TIE_REQUESTS`` of the least, to the one caching
the smallest working set (the context tokens of its keys), then the lowest;
and stays there until it has been idle for ``ROUTING_KEY_IDLE_SECONDS``. Counting keys instead
(issue 15's first cut) sent every new key to a slot added by a scale-up while the old slot's idle
one-shot keys, which cost it nothing, were still counted (issue 29). A gateway replica asks Redis
about a key at most once per ``LOCAL_SECONDS``, so a busy key's weight counts those asks: enough to
tell an active key from an idle one. The request then carries smg's ``x-smg-target-worker`` header
with that slot (the router runs ``consistent_hashing``, which honours it; see
``runtime.launch.smg_policy``). A slot is an index into the router's list of *available* workers
(smg 1.13 drops unhealthy and circuit-broken ones before reading it; a worker that joins is
appended, one that leaves shifts those after it down). So the slots keep their replicas while the
pool is healthy and its membership steady; when a replica is down or removed, the keys of the later
slots meet other replicas' caches until it is back (or, after a removal, once: then they stay). smg
offers no stable name for a worker to target (1.13 takes an index only), which is what a sturdier
mapping would need. A slot at or past the number of ready replicas is placed afresh.

A slot is *down* when a request sent there reached no engine: the router refused the slot (no
ready replica there: one went away, or the control plane counts a replica the router does not
list yet), or could not connect to its replica (killed, crashed: the router still lists it until
its health checks fail). The gateway process that saw it marks it down in Redis for
``DOWN_SECONDS`` (``GATEWAY_SLOT_DOWN_SECONDS``), in the same script call that places the key
again, so every gateway process leaves it out from its next placement on: the slot's keys move
to the other slots for good, new keys go to those too, and ``gateway.app`` sends the request
again at once. When the mark runs out
the slot is placed on again (it holds the fewest keys by then); if its replica is still gone,
the next request there is sent again too and marks it once more.

Under contention a tenant over its fair share is confined to a shard of the replicas and the
others kept off it (``gateway.isolation``): ``slot`` then takes the slots the
request may go to (``within``). A key whose slot is outside them is placed afresh inside, for
good (prefix-cache affinity yields to isolation only then), among those not down; when every
one of them is down, among all the slots not down, as without isolation. A request with no
routing key goes to one of them at random. ``GATEWAY_ISOLATION=off``: no shards, as before.

The table lives in Redis, one hash of key -> slot, one sorted set of last use, one hash of
counts and one sorted set of down slots (by the time their mark runs out) per pool, changed by
one Lua script, so every gateway replica places alike and a restart keeps the placements. Each
gateway replica remembers its answers for ``LOCAL_SECONDS``: the request path goes to Redis once
per key and interval, not per request. A replica that remembers a key on a slot another marked
down learns it at the latest when its own request there reaches no engine, and sends it again.
"""

from __future__ import annotations

import hashlib
import random
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
# How long a slot where a request reached no engine is left out of placement, by every gateway
# process (about a router health check and a readiness probe, after which it is tried again).
DOWN_SECONDS = 10.0
# A key's weight is its request count, halved every TRAFFIC_HALF_LIFE_SECONDS: recent traffic,
# not how many keys a slot ever got (a slot holding 80 keys of one request each, minutes old,
# weighs about nothing, and new keys are no longer all sent to the slot added beside it).
TRAFFIC_HALF_LIFE_SECONDS = 60.0
# Slots within this much weight (requests) of the least loaded one count as equally loaded; of
# those, the one caching the smallest working set (its keys' context tokens) gets the new key.
TIE_REQUESTS = 0.5

# KEYS: key -> slot (hash), key -> last use (sorted set), slot -> keys placed (hash), slot ->
# until when it is down (sorted set), key -> its decayed request count at its last use (hash),
# key -> its context tokens (hash), slot -> decayed load (hash, with field 't': when), slot ->
# cached working set in tokens (hash).
# ARGV: routing key ('' for none: only mark and read the down slots), slots, now, idle seconds,
# expiry of the whole table, seconds a slot stays down, traffic half-life, the request's context
# tokens (0: unknown), the slots the key may go to ('0,2'; '': any), then the slots found down
# now.
# Returns {the key's slot (-1 when every slot is down, or no key), then slot, until, ... of the
# slots down}.
PLACE = f"""
local key, slots = ARGV[1], tonumber(ARGV[2])
local now, idle, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local down_for, half, tokens = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
for i = 10, #ARGV do redis.call('ZADD', KEYS[4], now + down_for, ARGV[i]) end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local down = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
local out = {{}}
for i = 1, #down, 2 do out[tonumber(down[i])] = true end
-- Slots outside the ones the key may go to count as down for it, unless all those are down.
local within = {{}}
for s in string.gmatch(ARGV[9], '%d+') do
  local i = tonumber(s)
  if i < slots and not out[i] then within[i] = true end
end
if next(within) ~= nil then
  for i = 0, slots - 1 do
    if not within[i] then out[i] = true end
  end
end
local function answer(slot)
  for _, name in ipairs(KEYS) do redis.call('EXPIRE', name, ttl) end
  return {{slot, unpack(down)}}
end
if key == '' then return answer(-1) end
local function decay(since)
  return 2 ^ (-math.max(0, now - since) / half)
end
local load = {{}}
local stored = redis.call('HGETALL', KEYS[7])
local factor = 1
for i = 1, #stored, 2 do
  if stored[i] == 't' then factor = decay(tonumber(stored[i + 1])) end
end
for i = 1, #stored, 2 do
  if stored[i] ~= 't' then load[tonumber(stored[i])] = tonumber(stored[i + 1]) * factor end
end
local function weight(k)
  local w = tonumber(redis.call('HGET', KEYS[5], k)) or 0
  local t = tonumber(redis.call('ZSCORE', KEYS[2], k)) or now
  return w * decay(t)
end
local function take(s, w, size)
  redis.call('HINCRBY', KEYS[3], s, -1)
  load[s] = math.max(0, (load[s] or 0) - w)
  if size > 0 then redis.call('HINCRBY', KEYS[8], s, -size) end
end
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - idle,
                         'LIMIT', 0, {_EVICT_PER_CALL})
for _, old in ipairs(stale) do
  local s = tonumber(redis.call('HGET', KEYS[1], old))
  if s then take(s, weight(old), tonumber(redis.call('HGET', KEYS[6], old)) or 0) end
  redis.call('HDEL', KEYS[1], old)
  redis.call('HDEL', KEYS[5], old)
  redis.call('HDEL', KEYS[6], old)
  redis.call('ZREM', KEYS[2], old)
end
local slot = tonumber(redis.call('HGET', KEYS[1], key))
local w = weight(key)
local size = tonumber(redis.call('HGET', KEYS[6], key)) or 0
if slot == nil or slot >= slots or out[slot] then
  local names = {{}}
  for i = 0, slots - 1 do names[#names + 1] = tostring(i) end
  local sets = redis.call('HMGET', KEYS[8], unpack(names))
  local least = nil
  for i = 0, slots - 1 do
    local l = load[i] or 0
    if not out[i] and (least == nil or l < least) then least = l end
  end
  if least == nil then return answer(-1) end
  local best, best_set = nil, nil
  for i = 0, slots - 1 do
    local set = tonumber(sets[i + 1]) or 0
    if not out[i] and (load[i] or 0) <= least + {TIE_REQUESTS} then
      if best == nil or set < best_set then best, best_set = i, set end
    end
  end
  if slot ~= nil then take(slot, w, size) end
  slot = best
  redis.call('HSET', KEYS[1], key, slot)
  redis.call('HINCRBY', KEYS[3], slot, 1)
  load[slot] = (load[slot] or 0) + w
  if size > 0 then redis.call('HINCRBY', KEYS[8], slot, size) end
end
if tokens > 0 and tokens ~= size then
  redis.call('HINCRBY', KEYS[8], slot, tokens - size)
  redis.call('HSET', KEYS[6], key, tokens)
end
load[slot] = (load[slot] or 0) + 1
redis.call('HSET', KEYS[5], key, w + 1)
redis.call('ZADD', KEYS[2], now, key)
local fields = {{'t', now}}
for s, l in pairs(load) do
  fields[#fields + 1] = s
  fields[#fields + 1] = l
end
redis.call('HMSET', KEYS[7], unpack(fields))
return answer(slot)
"""
_PLACE_SHA = hashlib.sha1(PLACE.encode()).hexdigest()  # noqa: S324 (Redis's id)


def pool_id(router_url: str) -> str:
    """A pool's name in Redis: its router's address, hashed (one router per pool)."""
    return hashlib.blake2b(router_url.encode(), digest_size=8).hexdigest()


def table_keys(pool: str) -> tuple[str, ...]:
    """The pool's Redis keys (``PLACE``'s KEYS), in one hash slot (``{pool}``) so the script
    may use them."""
    base = f"plinth:place:{{{pool}}}"
    names = ("slot", "seen", "count", "down", "weight", "size", "load", "set")
    return tuple(f"{base}:{name}" for name in names)


class Placements:
    """The gateway's placement table: ``slot`` answers which replica slot a key goes to."""

    def __init__(
        self,
        client: aioredis.Redis,
        idle_seconds: float = ROUTING_KEY_IDLE_SECONDS,
        local_seconds: float = LOCAL_SECONDS,
        down_seconds: float = DOWN_SECONDS,
        half_life: float = TRAFFIC_HALF_LIFE_SECONDS,
    ) -> None:
        self._client = client
        self.half_life = half_life
        self.idle_seconds = idle_seconds
        self.local_seconds = local_seconds
        self.down_seconds = down_seconds
        # (pool, key) -> (slot, slots it was placed among, monotonic expiry)
        self._local: dict[tuple[str, str], tuple[int, int, float]] = {}
        # pool -> {slot down: monotonic time until which it is left out}: the down slots Redis
        # named in its last answer, plus those this process found since.
        self._down: dict[str, dict[int, float]] = {}

    async def slot(
        self,
        pool: str,
        key: str,
        slots: int,
        now: float,
        down: int | None = None,
        tokens: int = 0,
        within: frozenset[int] | None = None,
    ) -> int | None:
        """The slot (0 .. slots-1) of ``key`` in ``pool``, placing it if it has none, if its
        slot is down or if it is not one of ``within`` (None: any; see the module's docstring);
        None when every slot is down.

        ``down``: a slot where this process's request just reached no engine. It is marked down
        for every gateway process for ``down_seconds``, and the key placed again if it was there.
        ``tokens``: the request's context length (estimated), the key's cached working set on
        its replica; 0 keeps what the key last said.
        ``now`` is wall-clock seconds (shared by the gateway replicas through Redis). Raises
        ``redis.RedisError`` when Redis cannot answer and the key is not remembered locally.
        """
        if slots < 1:
            raise ValueError("a pool places keys among one slot or more")
        if down is not None:
            self._mark_down(pool, down)
        remembered = self._local.get((pool, key))
        if remembered is not None and down is None:
            slot, among, until = remembered
            fits = within is None or slot in within
            fresh = among == slots and time.monotonic() < until
            if fresh and fits and slot not in self._left_out(pool):
                return slot
        placed = await self._place(pool, key, slots, now, down, tokens, within)
        if placed is None:
            return None
        if len(self._local) >= LOCAL_ENTRIES:
            self._local.clear()
        self._local[(pool, key)] = (placed, slots, time.monotonic() + self.local_seconds)
        return placed

    async def spare(
        self,
        pool: str,
        slots: int,
        now: float,
        down: int | None,
        within: frozenset[int] | None = None,
    ) -> int | None:
        """A slot for a request that holds none (it has no routing key), after its try at
        ``down`` (None: by its hash) reached no engine: ``down`` is marked as ``slot`` marks it,
        and one of the slots not down is picked at random (of ``within`` while one of them is
        up), placing nothing; None when every slot is down. Raises ``redis.RedisError`` when
        Redis cannot answer."""
        if down is not None:
            self._mark_down(pool, down)
        await self._place(pool, "", slots, now, down)
        up = [s for s in range(slots) if s not in self._left_out(pool)]
        inside = [s for s in up if within is None or s in within]
        chosen = inside or up
        return random.choice(chosen) if chosen else None

    def pick(self, pool: str, slots: int, within: frozenset[int] | None) -> int | None:
        """A first slot for a request with no routing key under isolation: one of ``within``
        not known to be down, at random, placing nothing; None (the router hashes its request
        id) without isolation or when all of them are down."""
        up = [s for s in sorted(within or ()) if s < slots and s not in self._left_out(pool)]
        return random.choice(up) if up else None

    def _mark_down(self, pool: str, slot: int) -> None:
        # Here at once, whatever Redis answers: a failed call must not send there again.
        self._down.setdefault(pool, {})[slot] = time.monotonic() + self.down_seconds

    def _left_out(self, pool: str) -> frozenset[int]:
        down = self._down.get(pool)
        if not down:
            return frozenset()
        clock = time.monotonic()
        for slot in [s for s, until in down.items() if until <= clock]:
            del down[slot]
        return frozenset(down)

    async def _place(
        self,
        pool: str,
        key: str,
        slots: int,
        now: float,
        down: int | None,
        tokens: int = 0,
        within: frozenset[int] | None = None,
    ) -> int | None:
        # The table outlives its keys' idle time a little, so a deleted pool's table goes too.
        ttl = int(self.idle_seconds * 2) + 60
        args: list[str | int | float] = [key, slots, now, self.idle_seconds, ttl]
        args += [self.down_seconds, self.half_life, tokens]
        args += [",".join(map(str, sorted(within or ()))), *([] if down is None else [down])]
        keys = table_keys(pool)
        try:
            reply = await self._client.evalsha(_PLACE_SHA, len(keys), *keys, *args)
        except NoScriptError:
            await self._client.script_load(PLACE)
            reply = await self._client.evalsha(_PLACE_SHA, len(keys), *keys, *args)
        slot, marks = int(reply[0]), reply[1:]
        clock = time.monotonic()
        self._down[pool] = {
            int(marks[i]): clock + float(marks[i + 1]) - now for i in range(0, len(marks), 2)
        }
        return None if slot < 0 else slot
