"""Tenant isolation under contention (``gateway.isolation``, bounded by ``gateway.admission``,
placed by ``gateway.placement`` within the allowed slots): a key over its fair share of a
contended endpoint is confined to a shard of the replica slots and to its shard's part of the
limit, the other keys are placed off the shard, and nothing changes with one replica, with the
key alone, or with ``GATEWAY_ISOLATION=off``.

Admission runs in one event loop with requests held until let go (as in
test_admission_queue.py); placement against the real Redis (as in test_placement.py)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
import redis.asyncio as aioredis

from gateway.admission import Admission, AdmissionSettings
from gateway.config import GatewayConfig
from gateway.isolation import shards_of
from gateway.placement import Placements
from gateway.routes import Endpoint, InferenceKey
from tests.aio import run_async
from tests.gateway.test_admission_queue import Load, settle
from tests.gateway.test_placement import assert_counts_match, pool, with_placements

__all__ = ["pool"]  # the fixture, used by name

# Two replicas the gateway places requests on, each sized for 6 in flight (a limit of 12), whose
# engines run 8 at once: the fairness bench's endpoint.
PLACED = Endpoint(
    "e2", "shared", "o1", "active", "running", 2, "http://router", placed=True,
    per_replica=6, engine_slots=8,
)  # fmt: skip
ALL = frozenset({0, 1})


def key(name: str, weight: int = 1, priority: str = "standard") -> InferenceKey:
    return InferenceKey(
        name, f"pli_{name}", "", "o1", frozenset(), None, None, None, priority, weight
    )


class Slots(Load):
    """``Load`` that also records the slots each admitted request may be placed on."""

    def __init__(self, admission: Admission, endpoint: Endpoint = PLACED) -> None:
        super().__init__(admission, endpoint)
        self.within: dict[str, list[frozenset[int] | None]] = {}

    async def _hold(self, who: InferenceKey, release: asyncio.Event) -> None:
        async with self.admission.slot(self.endpoint, who) as within:
            self.admitted.append(who.id)
            self.within.setdefault(who.id, []).append(within)
            await release.wait()

    def held(self, key_id: str) -> int:
        gate = self.admission._gates[self.endpoint.id]
        load = gate._keys.get(key_id)
        return load.held if load is not None else 0

    async def let_go(self, key_id: str, times: int) -> list[int]:
        """Let go of `times` of the key's requests one at a time, each settled before the next:
        what the key holds after each."""
        seen = []
        for _ in range(times):
            self.finish_one(key_id)
            await settle()
            seen.append(self.held(key_id))
        return seen


async def flood_beside_a_light_key(load: Slots) -> None:
    """The flood alone first (the whole endpoint: 12 in flight, 18 waiting), then one request of
    a light key: two keys active, the endpoint contended."""
    load.send(key("flood"), 30)
    await settle()
    assert load.held("flood") == 12
    load.send(key("light"))
    await settle()


def test_a_flood_is_confined_to_a_shard_and_a_light_key_kept_off_it():
    async def scenario() -> tuple[list[frozenset[int] | None], list[frozenset[int] | None]]:
        load = Slots(Admission(AdmissionSettings()))
        await flood_beside_a_light_key(load)
        # Down to 5 flood requests in flight: the next goes in, confined.
        await load.let_go("flood", 7)
        load.send(key("light"))
        await settle()
        flood, light = load.within["flood"][12:], load.within["light"]
        await load.close()
        return flood, light

    flood, light = run_async(scenario())
    # Half the weight of the active keys: one slot of two; the light key gets the other.
    assert len(flood) >= 1 and len(set(flood)) == 1
    (shard,) = set(flood)
    assert shard is not None and len(shard) == 1
    assert light == [ALL - shard, ALL - shard]


def test_a_confined_flood_holds_at_most_its_shards_part_of_the_limit():
    async def scenario() -> list[int]:
        load = Slots(Admission(AdmissionSettings()))
        await flood_beside_a_light_key(load)
        seen = await load.let_go("flood", 10)
        await load.close()
        return seen

    # Before: the flood took back every slot the limit freed (12 in flight). Confined to one of
    # two slots, it goes in again only below 12 x 1/2 = 6, and stays at 6.
    assert run_async(scenario()) == [11, 10, 9, 8, 7, 6, 6, 6, 6, 6]


def test_a_key_over_twice_the_weight_gets_its_weights_part_of_the_slots():
    async def scenario() -> tuple[set[frozenset[int] | None], set[frozenset[int] | None]]:
        four = replace(PLACED, ready_replicas=4)  # a limit of 24
        load = Slots(Admission(AdmissionSettings()), four)
        load.send(key("flood", weight=3), 60)
        await settle()
        load.send(key("light"), 2)
        await settle()
        await load.let_go("flood", 24)
        flood, light = set(load.within["flood"][24:]), set(load.within["light"])
        held = load.held("flood")
        await load.close()
        assert held == 18  # 24 x 3/4: its shard's part of the limit
        return flood, light

    flood, light = run_async(scenario())
    (shard,) = flood
    assert shard is not None and len(shard) == 3  # floor(4 slots x 3/4)
    assert light == {frozenset(range(4)) - shard}


def test_a_confined_critical_flood_at_its_bound_does_not_hold_back_a_standard_key():
    async def scenario() -> tuple[int, int, list[frozenset[int] | None]]:
        load = Slots(Admission(AdmissionSettings()))
        load.send(key("boss", priority="critical"), 30)  # 12 in flight, 18 waiting
        await settle()
        load.send(key("light"), 2)
        await settle()
        admitted = load.admitted.count("light")
        # Down to 5: the critical flood's next request goes in, confined.
        await load.let_go("boss", 7)
        held, within = load.held("boss"), load.within["boss"][12:]
        await load.close()
        return admitted, held, within

    admitted, held, within = run_async(scenario())
    # Before, a critical request waiting kept every standard one out. Its waiting requests can
    # go nowhere now (its shard's part of the limit is full), so they do not; a critical
    # request that may go in still goes first.
    assert admitted == 2
    assert held == 6 and len(within) == 1 and within[0] is not None and len(within[0]) == 1


def test_a_flood_alone_again_gets_the_whole_endpoint():
    async def scenario() -> tuple[int, frozenset[int] | None]:
        admission = Admission(AdmissionSettings(isolation_window=0.05))
        load = Slots(admission)
        await flood_beside_a_light_key(load)
        await load.let_go("flood", 8)
        assert load.held("flood") == 6  # confined while the light key is active
        load.finish_one("light")
        await asyncio.sleep(0.1)  # past the window: the light key is no longer active
        load.finish_one("flood")
        await settle()
        held, within = load.held("flood"), load.within["flood"][-1]
        await load.close()
        return held, within

    assert run_async(scenario()) == (12, None)


@pytest.mark.parametrize(
    ("settings", "endpoint"),
    [
        ({"isolation": False}, PLACED),  # GATEWAY_ISOLATION=off
        ({}, replace(PLACED, ready_replicas=1, per_replica=12)),  # 1 replica
        ({}, replace(PLACED, placed=False)),  # the router places requests
    ],
    ids=["isolation-off", "one-replica", "not-placed"],
)
def test_without_isolation_the_flood_takes_back_every_slot_and_any_replica(
    settings: dict[str, bool], endpoint: Endpoint
):
    async def scenario() -> tuple[list[int], set[frozenset[int] | None]]:
        load = Slots(Admission(AdmissionSettings(**settings)), endpoint)
        await flood_beside_a_light_key(load)
        seen = await load.let_go("flood", 4)
        within = set(load.within["flood"]) | set(load.within["light"])
        await load.close()
        return seen, within

    # 12 flood + 1 light borrowed beyond the limit: the borrowed slot comes back first, then
    # the flood refills the limit, as before isolation.
    assert run_async(scenario()) == ([11, 11, 11, 11], {None})


def test_the_operator_switch_and_window_are_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
):
    assert GatewayConfig.from_environment().admission.isolation is True
    monkeypatch.setenv("GATEWAY_ISOLATION", "off")
    monkeypatch.setenv("GATEWAY_ISOLATION_WINDOW_SECONDS", "2.5")
    admission = GatewayConfig.from_environment().admission
    assert (admission.isolation, admission.isolation_window) == (False, 2.5)


def test_heavy_keys_take_disjoint_shards_while_slots_remain_the_same_in_every_process():
    heavy = {"a": 1, "b": 1, "c": 1}  # three heavy keys of five active (weight 5), 4 slots
    shards = shards_of(heavy, 5, 4)
    assert [len(shards[k]) for k in "abc"] == [1, 1, 1]  # max(1, floor(4 x 1/5))
    assert len(set().union(*shards.values())) == 3  # disjoint: one slot left for light keys
    assert shards_of(dict(reversed(heavy.items())), 5, 4) == shards  # any order, any process
    crowded = shards_of({"a": 1, "b": 1, "c": 1}, 3, 2)  # more heavy keys than slots
    assert all(len(s) == 1 for s in crowded.values())
    assert set().union(*crowded.values()) == {0, 1}


# ---- placement within the allowed slots (real Redis) ----------------------------------------


def test_a_routing_key_pinned_outside_its_shard_is_placed_afresh_inside_and_stays(
    pool: str,
) -> None:
    async def body(client: aioredis.Redis) -> tuple[int | None, ...]:
        places = Placements(client, local_seconds=60)  # remembers its answers
        first = await places.slot(pool, "k", 2, 1000.0)
        other = 1 - (first or 0)
        confined = await places.slot(pool, "k", 2, 1001.0, within=frozenset({other}))
        after = await places.slot(pool, "k", 2, 1002.0)  # contention over: it stays
        again = await Placements(client).slot(pool, "k", 2, 1003.0)  # another process
        return first, other, confined, after, again

    first, other, confined, after, again = with_placements(body)
    assert first == 0
    assert confined == after == again == other
    assert assert_counts_match(pool) == {"k": other}


def test_new_keys_go_to_the_allowed_slots_whatever_the_load_elsewhere(pool: str) -> None:
    async def body(client: aioredis.Redis) -> tuple[list[int | None], list[int | None]]:
        places = Placements(client, local_seconds=0)
        heavy = [
            await places.slot(pool, f"f{i}", 3, 1000.0, within=frozenset({2})) for i in range(6)
        ]
        light = [
            await places.slot(pool, f"l{i}", 3, 1010.0, within=frozenset({0, 1})) for i in range(4)
        ]
        return heavy, light

    heavy, light = with_placements(body)
    assert heavy == [2] * 6
    assert sorted(light) == [0, 0, 1, 1]  # spread by traffic within their slots
    assert_counts_match(pool)


def test_when_every_allowed_slot_is_down_a_key_goes_to_any_slot_up(pool: str) -> None:
    async def body(client: aioredis.Redis) -> tuple[int | None, int | None, int | None]:
        places = Placements(client, local_seconds=0)
        await places.slot(pool, "x", 3, 1000.0, down=1)  # slot 1 found down
        placed = await places.slot(pool, "k", 3, 1001.0, within=frozenset({1}))
        picked = places.pick(pool, 3, frozenset({1}))
        inside = places.pick(pool, 3, frozenset({2}))
        return placed, picked, inside

    placed, picked, inside = with_placements(body)
    assert placed in (0, 2)
    assert picked is None  # a request with no routing key: the router hashes its request id
    assert inside == 2


def test_a_confined_keys_retry_after_counts_its_own_queue_over_its_bound():
    """A confined key's next request waits behind its own waiting requests for its shard's part
    of the limit, so its Retry-After is (its waiting + 1) / its bound slot-holds, not the whole
    endpoint's queue over the whole limit."""

    async def scenario() -> tuple[float, float, float]:
        load = Slots(Admission(AdmissionSettings()))
        await flood_beside_a_light_key(load)
        await load.let_go("flood", 7)  # confined now: 6 in flight (its bound)
        gate = load.admission._gates[PLACED.id]
        gate.hold_seconds = 2.0
        queued = gate._keys["flood"].queued
        flood, anyone = gate.retry_after("flood"), gate.retry_after()
        await load.close()
        return flood, anyone, (queued + 1) / 6 * 2.0

    flood, anyone, expected = run_async(scenario())
    assert flood == pytest.approx(min(60.0, max(1.0, expected)))
    assert flood > anyone  # half the slots for its own queue: a longer wait than the average
