"""The gateway's placement table (``gateway.placement``) against a real Redis: a routing key it has
not seen goes to the slot with the least recent traffic (of those within half a request of it,
the one caching the smallest working set, then the lowest) and stays there; idle keys
are forgotten and their counts given back; shrinking a pool re-places only the keys on removed
slots; every gateway replica (every ``Placements`` object) reads the same table; and at every step
the count hash equals the number of keys per slot. A pure-Python model of the rules is checked
against the Lua script on random sequences (hypothesis)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterator
from pathlib import Path
from typing import TypeVar, cast

import pytest
import redis
import redis.asyncio as aioredis
from django.conf import settings
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from gateway.placement import TIE_REQUESTS, TRAFFIC_HALF_LIFE_SECONDS, Placements, table_keys
from runtime.sim.launcher import free_port
from tests.aio import run_async
from tests.controlplane.scripts import EmbeddedRedis

T = TypeVar("T")


@pytest.fixture
def pool() -> Iterator[str]:
    """A pool id of this test's own, its Redis table deleted afterwards."""
    name = f"test-{uuid.uuid4().hex}"
    yield name
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(*table_keys(name))
    client.close()


def with_placements(body: Callable[[aioredis.Redis], Awaitable[T]], url: str | None = None) -> T:
    """Run ``body`` with a client of its own event loop (``tests.aio.run_async``)."""

    async def main() -> T:
        client = aioredis.Redis.from_url(url or settings.REDIS_URL, socket_timeout=5)
        try:
            return await body(client)
        finally:
            await client.aclose()

    return run_async(main())


def table(pool: str) -> tuple[dict[str, int], dict[str, float], dict[int, int]]:
    """The pool's table as Redis holds it: key -> slot, key -> last use, slot -> count."""
    client = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True)
    slot_key, seen_key, count_key = table_keys(pool)[:3]
    slots = {str(k): int(v) for k, v in client.hgetall(slot_key).items()}
    pairs = cast(list[tuple[str, float]], client.zrange(seen_key, 0, -1, withscores=True))
    seen = dict(pairs)
    counts = {int(k): int(v) for k, v in client.hgetall(count_key).items()}
    client.close()
    return slots, seen, counts


def assert_counts_match(pool: str) -> dict[str, int]:
    """The count hash says how many keys each slot holds (zeros may stay); returns key -> slot."""
    slots, seen, counts = table(pool)
    assert set(seen) == set(slots)
    assert all(n >= 0 for n in counts.values()), counts
    assert {s: n for s, n in counts.items() if n} == dict(Counter(slots.values()))
    return slots


def test_keys_arriving_one_at_a_time_spread_by_count_and_stay(pool: str) -> None:
    """8 keys over 4 slots, one at a time: 2 per slot, each new key on the emptiest (lowest) slot;
    asked again, every key answers its slot."""

    async def body(client: aioredis.Redis) -> tuple[list[int], list[int]]:
        places = Placements(client, local_seconds=0)
        first = [await places.slot(pool, f"k{i}", 4, 1000.0 + i) for i in range(8)]
        again = [await places.slot(pool, f"k{i}", 4, 1010.0 + i) for i in reversed(range(8))]
        return first, again[::-1]

    first, again = with_placements(body)
    assert first == [0, 1, 2, 3, 0, 1, 2, 3]
    assert again == first
    assert assert_counts_match(pool) == {f"k{i}": i % 4 for i in range(8)}


def test_two_gateway_replicas_agree_on_every_key(pool: str) -> None:
    """Two Placements (two gateway replicas) taking turns place as one table would."""

    async def body(client: aioredis.Redis) -> tuple[dict[str, int], dict[str, int]]:
        one = Placements(client, local_seconds=60)
        other = Placements(aioredis.Redis.from_url(settings.REDIS_URL), local_seconds=60)
        keys = [f"tenant-{i}" for i in range(10)]
        placed = {}
        for i, key in enumerate(keys):
            replica = one if i % 2 else other
            placed[key] = await replica.slot(pool, key, 3, 1000.0 + i)
        read = {}
        for key in keys:
            read[key] = await one.slot(pool, key, 3, 1100.0)
            assert await other.slot(pool, key, 3, 1100.0) == read[key]
        await other._client.aclose()
        return placed, read

    placed, read = with_placements(body)
    assert read == placed
    assert sorted(Counter(placed.values()).values()) == [3, 3, 4]
    assert assert_counts_match(pool) == placed


def test_shrinking_replaces_only_keys_on_removed_slots_and_growing_fills_the_new_slot(
    pool: str,
) -> None:
    """From 4 slots to 2: keys on slots 0 and 1 stay, keys on 2 and 3 go to 0 and 1 by count;
    counts stay equal to keys per slot. Back to 3: new keys go to the empty slot 2."""

    async def body(client: aioredis.Redis) -> tuple[list[int], list[int], list[int]]:
        places = Placements(client, local_seconds=0)
        keys = [f"k{i}" for i in range(8)]
        for i, key in enumerate(keys):
            await places.slot(pool, key, 4, 1000.0 + i)
        shrunk = [await places.slot(pool, key, 2, 1100.0) for key in keys]
        assert_counts_match(pool)
        grown = [await places.slot(pool, key, 3, 1200.0) for key in keys]
        new = [await places.slot(pool, f"n{i}", 3, 1300.0 + i) for i in range(5)]
        return shrunk, grown, new

    shrunk, grown, new = with_placements(body)
    # k0,k1,k4,k5 stay; k2 (slot 2) then k3, k6, k7 are re-placed onto the emptier of 0 and 1.
    assert shrunk == [0, 1, 0, 1, 0, 1, 0, 1]
    assert grown == shrunk  # a slot below the pool's size keeps its keys
    # Slots 0 and 1 carry 4 keys' recent traffic each (100 s old: about 1.8 requests): the empty
    # slot 2 takes new keys until its traffic is within half a request of theirs, then the
    # three take turns.
    assert new == [2, 2, 0, 1, 2]
    slots = assert_counts_match(pool)
    assert Counter(slots.values()) == {0: 5, 1: 5, 2: 3}


def test_after_a_scale_up_active_tenants_spread_although_the_old_slot_holds_idle_one_shot_keys(
    pool: str,
) -> None:
    """Issue 29: one replica served 80 one-shot requests (each its own key) a few minutes ago;
    they are idle but not yet forgotten. Scaled up to two, 8 active tenants arrive, one every
    15 s, each then asking every 10 s: placed by count, all 8 went to the new replica (the old
    one "held" 80 keys) and the old one idled; by recent traffic they split between the two."""

    async def body(client: aioredis.Redis) -> dict[str, int]:
        places = Placements(client, local_seconds=0)
        for i in range(80):
            await places.slot(pool, f"one-shot-{i}", 1, 1000.0 + i)
        placed: dict[str, int] = {}
        now = 1400.0  # the one-shot keys are 5-6 minutes old, inside the 10-minute idle window
        for tenant in range(8):
            for asked in range(tenant + 1):  # earlier tenants keep asking meanwhile
                key = f"tenant-{asked}"
                placed[key] = await places.slot(pool, key, 2, now + asked * 0.01)
            now += 15.0
        return placed

    placed = with_placements(body)
    on_old = sum(1 for slot in placed.values() if slot == 0)
    assert 3 <= on_old <= 5, placed
    assert_counts_match(pool)


def test_of_equally_busy_slots_a_new_key_goes_where_the_cached_working_set_is_smaller(
    pool: str,
) -> None:
    """Two slots with one key each and the same traffic: the one whose key holds a 50,000-token
    document is left alone, and a new key goes to the one caching a short prompt, although it is
    the higher slot and a little busier (its request came later)."""

    async def body(client: aioredis.Redis) -> list[int | None]:
        places = Placements(client, local_seconds=0)
        return [
            await places.slot(pool, "document", 2, 1000.0, tokens=50_000),
            await places.slot(pool, "chat", 2, 1000.1, tokens=300),
            await places.slot(pool, "new", 2, 1001.0, tokens=300),
        ]

    assert with_placements(body) == [0, 1, 1]


def test_idle_keys_are_forgotten_and_their_counts_given_back(pool: str) -> None:
    """A key unused for idle_seconds (or exactly that) leaves the table and its slot's count; a
    key used since stays. A forgotten key asked again is placed afresh."""

    async def body(client: aioredis.Redis) -> list[int]:
        places = Placements(client, idle_seconds=10, local_seconds=0)
        answers = [
            await places.slot(pool, "a", 3, 1000.0),  # 0
            await places.slot(pool, "b", 3, 1001.0),  # 1
            await places.slot(pool, "c", 3, 1002.0),  # 2
            await places.slot(pool, "b", 3, 1008.0),  # 1, and in use again
        ]
        # At 1011 a (last used at 1000) is idle: it goes, and d takes its slot 0.
        answers.append(await places.slot(pool, "d", 3, 1011.0))
        assert set(table(pool)[0]) == {"b", "c", "d"}
        assert_counts_match(pool)
        # At 1012 c is idle for exactly 10 s: forgotten; e takes its slot 2.
        answers.append(await places.slot(pool, "e", 3, 1012.0))
        assert set(table(pool)[0]) == {"b", "d", "e"}
        # Much later every key is idle, the one asked for too: placed afresh on slot 0.
        answers.append(await places.slot(pool, "b", 3, 2000.0))
        return answers

    assert with_placements(body) == [0, 1, 2, 1, 0, 2, 0]
    assert assert_counts_match(pool) == {"b": 0}


def test_at_most_64_idle_keys_are_forgotten_per_call(pool: str) -> None:
    """Forgetting has a bounded cost: 70 idle keys take two calls to go, counts right each time."""

    async def body(client: aioredis.Redis) -> tuple[int, int]:
        places = Placements(client, idle_seconds=10, local_seconds=0)
        for i in range(70):
            await places.slot(pool, f"old{i:02d}", 2, 1000.0)
        await places.slot(pool, "new1", 2, 1100.0)
        after_one = len(table(pool)[0])
        assert_counts_match(pool)
        await places.slot(pool, "new2", 2, 1101.0)
        return after_one, len(table(pool)[0])

    assert with_placements(body) == (70 - 64 + 1, 2)
    assert_counts_match(pool)


def test_a_replica_remembers_its_answers_for_their_slot_count(pool: str) -> None:
    """With local memory, a second ask does not reach Redis (its table deleted meanwhile, the
    same answer comes back and nothing is written); another slot count asks again."""

    async def body(client: aioredis.Redis) -> list[int]:
        places = Placements(client, local_seconds=3600)
        answers = [await places.slot(pool, "a", 2, 1000.0), await places.slot(pool, "b", 2, 1001.0)]
        await client.delete(*table_keys(pool))
        answers.append(await places.slot(pool, "b", 2, 1002.0))  # remembered: 1
        assert await client.exists(*table_keys(pool)) == 0  # Redis was not asked
        # Remembered among 2 slots, asked among 3: Redis answers (its emptied table: slot 0).
        answers.append(await places.slot(pool, "a", 3, 1003.0))
        return answers

    assert with_placements(body) == [0, 1, 1, 0]


def test_a_slot_found_down_is_left_out_by_every_process_its_keys_moved_and_new_keys_kept_off(
    pool: str,
) -> None:
    """After ``slot(down=...)``, the key on that slot is placed again among the others (for
    good: the count moves with it) and new keys never land there, in this process and in another
    that found nothing itself; with every slot down, None."""

    async def body(client: aioredis.Redis) -> list[int | None]:
        places = Placements(client, local_seconds=3600, down_seconds=3600)
        other = Placements(client, local_seconds=3600, down_seconds=3600)
        answers = [await places.slot(pool, k, 2, 1000.0) for k in ("a", "b")]  # 0, 1
        answers.append(await places.slot(pool, "b", 2, 1001.0, down=1))  # moved: 0
        answers += [await other.slot(pool, k, 2, 1001.0) for k in ("c", "d")]  # all 0
        answers.append(await other.slot(pool, "b", 2, 1001.0))  # moved for the other too
        counts = await client.hgetall(table_keys(pool)[2])
        assert {int(s): int(n) for s, n in counts.items()} == {0: 4, 1: 0}
        answers.append(await other.slot(pool, "a", 2, 1002.0, down=0))  # nothing left: None
        answers.append(await places.slot(pool, "e", 2, 1002.0))  # None here too
        return answers

    assert with_placements(body) == [0, 1, 0, 0, 0, 0, None, None]


def test_a_down_mark_lasts_only_its_time_in_every_process(pool: str) -> None:
    """A down mark that has run out leaves nothing out, here and in another process: placement
    by count resumes, and the emptied slot takes new keys."""

    async def body(client: aioredis.Redis) -> list[int | None]:
        places = Placements(client, local_seconds=0, down_seconds=5)
        other = Placements(client, local_seconds=0, down_seconds=5)
        answers = [await places.slot(pool, "a", 2, 1000.0, down=0)]  # 1
        answers.append(await other.slot(pool, "b", 2, 1004.0))  # 0 still down: 1
        answers.append(await other.slot(pool, "c", 2, 1005.0))  # up again: 0
        return answers

    # The local marks run out by the monotonic clock; Redis's by the times given here.
    assert with_placements(body) == [1, 1, 0]


def test_a_request_with_no_key_gets_a_spare_slot_and_marks_its_down_one(pool: str) -> None:
    """``spare`` places nothing: it marks the slot down for every process and picks among the
    others; None when none is left."""

    async def body(client: aioredis.Redis) -> list[int | None]:
        places = Placements(client, local_seconds=0, down_seconds=3600)
        other = Placements(client, local_seconds=0, down_seconds=3600)
        answers = [await places.spare(pool, 3, 1000.0, down=2) for _ in range(20)]
        assert set(answers) == {0, 1}
        assert table(pool)[0] == {}  # no key placed
        answers = [await other.slot(pool, "a", 3, 1001.0)]  # 0: the first not down
        answers.append(await other.spare(pool, 3, 1001.0, down=0))  # 1
        answers.append(await places.spare(pool, 3, 1002.0, down=1))  # None
        return answers

    assert with_placements(body) == [0, 1, None]


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A redis-server of this test's own: SCRIPT FLUSH empties a whole server's scripts, which
    must not pull the scripts from under other tests sharing the suite's Redis."""
    server = EmbeddedRedis(tmp_path)
    server.start()
    yield server
    server.stop()


def test_a_flushed_script_cache_is_reloaded(private_redis: EmbeddedRedis) -> None:
    """After SCRIPT FLUSH (a Redis restart or failover does the same) the next call loads the
    script again (NOSCRIPT) and answers from the same table."""

    async def body(client: aioredis.Redis) -> list[int]:
        places = Placements(client, local_seconds=0)
        answers = [await places.slot("p", "a", 2, 1000.0)]
        await client.script_flush()
        answers.append(await places.slot("p", "b", 2, 1001.0))
        await client.script_flush()
        answers.append(await places.slot("p", "a", 2, 1002.0))
        return answers

    assert with_placements(body, private_redis.url) == [0, 1, 0]


def test_fewer_than_one_slot_is_refused(pool: str) -> None:
    """A pool with no slot has nowhere to place: ValueError, before Redis is asked."""

    async def body(client: aioredis.Redis) -> None:
        places = Placements(client)
        for slots in (0, -1):
            with pytest.raises(ValueError):
                await places.slot(pool, "a", slots, 1000.0)

    with_placements(body)
    assert table(pool) == ({}, {}, {})


def test_redis_unreachable_raises_a_redis_error() -> None:
    """No Redis and nothing remembered: redis.RedisError (the gateway then sends no target)."""

    async def body(client: aioredis.Redis) -> None:
        with pytest.raises(redis.RedisError):
            await Placements(client).slot("p", "a", 2, 1000.0)

    with_placements(body, f"redis://127.0.0.1:{free_port()}/0")


# --- the rules, as a model -------------------------------------------------------------------


class Model:
    """The placement rules in plain Python (what ``gateway.placement.PLACE`` is meant to do),
    with the script's arithmetic in the script's order, so floats agree to the last bit."""

    def __init__(self, idle: float, half_life: float = TRAFFIC_HALF_LIFE_SECONDS) -> None:
        self.idle = idle
        self.half = half_life
        self.slot_of: dict[str, int] = {}
        self.seen: dict[str, float] = {}
        self.count: Counter[int] = Counter()
        self.weight: dict[str, float] = {}
        self.size: dict[str, int] = {}
        self.load: dict[int, float] = {}
        self.load_t: float | None = None
        self.working_set: Counter[int] = Counter()

    def _decay(self, now: float, since: float) -> float:
        return 2 ** (-max(0.0, now - since) / self.half)

    def _take(self, slot: int, weight: float, size: int) -> None:
        self.count[slot] -= 1
        self.load[slot] = max(0.0, self.load.get(slot, 0.0) - weight)
        self.working_set[slot] -= size

    def place(
        self, key: str, slots: int, now: float, tokens: int = 0, within: Collection[int] = ()
    ) -> int:
        factor = 1.0 if self.load_t is None else self._decay(now, self.load_t)
        self.load = {s: v * factor for s, v in self.load.items()}
        key_weight = {
            k: self.weight.get(k, 0.0) * self._decay(now, self.seen[k]) for k in self.seen
        }
        for old in sorted((k for k, t in self.seen.items() if t <= now - self.idle),
                          key=lambda k: (self.seen[k], k)):  # fmt: skip
            self._take(self.slot_of.pop(old), key_weight[old], self.size.pop(old, 0))
            del self.seen[old]
            self.weight.pop(old, None)
        slot = self.slot_of.get(key)
        weight = key_weight.get(key, 0.0) if key in self.seen else 0.0
        size = self.size.get(key, 0)
        # Under isolation, only the slots of ``within`` (those below ``slots``; none: any).
        allowed = [s for s in range(slots) if s in within] or list(range(slots))
        if slot is None or slot not in allowed:
            least = min(self.load.get(s, 0.0) for s in allowed)
            candidates = [s for s in allowed if self.load.get(s, 0.0) <= least + TIE_REQUESTS]
            best = min(candidates, key=lambda s: (self.working_set[s], s))
            if slot is not None:
                self._take(slot, weight, size)
            slot = best
            self.slot_of[key] = slot
            self.count[slot] += 1
            self.load[slot] = self.load.get(slot, 0.0) + weight
            self.working_set[slot] += size
        if tokens > 0 and tokens != size:
            self.working_set[slot] += tokens - size
            self.size[key] = tokens
        self.load[slot] = self.load.get(slot, 0.0) + 1
        self.weight[key] = weight + 1
        self.seen[key] = now
        self.load_t = now
        return slot


IDLE = 10.0
OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from("abcdefgh"),  # the key
        st.integers(min_value=1, max_value=5),  # the pool's slots at that moment
        st.sampled_from([0.0, 0.5, 1.0, 3.0, 9.5, 10.0, 25.0]),  # time since the last call
        st.sampled_from([0, 0, 300, 5000]),  # the request's context tokens (0: unknown)
        st.sampled_from([(), (), (0,), (1,), (0, 1), (2, 3), (4,)]),  # the slots allowed
    ),
    min_size=1,
    max_size=40,
)


@hypothesis_settings(max_examples=50, deadline=None)
@given(operations=OPERATIONS)
def test_the_script_places_as_the_model_does(
    operations: list[tuple[str, int, float, int, tuple[int, ...]]],
) -> None:
    """Random keys, pool sizes, pauses and allowed slots (isolation's ``within``): the script
    answers what the model answers, and at every step the count hash equals the keys per slot
    and the table holds the model's keys."""
    pool = f"test-{uuid.uuid4().hex}"
    model = Model(IDLE)

    async def body(client: aioredis.Redis) -> None:
        places = Placements(client, idle_seconds=IDLE, local_seconds=0)
        now = 1_000_000.0
        for key, slots, step, tokens, allowed in operations:
            now += step
            within = frozenset(allowed) or None
            placed = await places.slot(pool, key, slots, now, tokens=tokens, within=within)
            assert placed == model.place(key, slots, now, tokens, allowed)
            assert assert_counts_match(pool) == model.slot_of

    try:
        with_placements(body)
    finally:
        client = redis.Redis.from_url(settings.REDIS_URL)
        client.delete(*table_keys(pool))
        client.close()
