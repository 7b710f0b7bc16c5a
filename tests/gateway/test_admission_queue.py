"""``gateway.admission`` on its own, in one event loop: what happens to a waiting request that
leaves (its client hangs up, or it waits too long) and to waiting requests when replicas come,
and how keys under their fair share borrow slots beyond the limit and give them back.
The queue's order and shedding are tested through the real gateway in test_fair_admission.py."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from deployments.endpoints import services as deployment_services
from gateway import loader
from gateway.admission import Admission, AdmissionSettings
from gateway.errors import GatewayError
from gateway.routes import Endpoint, InferenceKey
from tests.gateway.conftest import SPEC, mark_serving, run_async

ENDPOINT = Endpoint("e1", "queued", "o1", "active", "running", 1, "http://x", per_replica=1)
# No headroom: every request beyond the limit waits (borrowing is tested at the end of this file).
QUEUED_ONLY = AdmissionSettings(headroom=0)


def key(name: str, priority: str = "standard") -> InferenceKey:
    return InferenceKey(name, f"pli_{name}", "", "o1", frozenset(), None, None, None, priority)


async def hold(admission: Admission, endpoint: Endpoint, who: InferenceKey, log: list[str],
               release: asyncio.Event) -> None:  # fmt: skip
    async with admission.slot(endpoint, who):
        log.append(who.id)
        await release.wait()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_waiting_request_whose_client_hangs_up_leaves_its_place_to_the_next():
    async def scenario() -> tuple[list[str], int]:
        admission, log, release = Admission(QUEUED_ONLY), [], asyncio.Event()
        first = asyncio.create_task(hold(admission, ENDPOINT, key("a"), log, release))
        await settle()
        gone = asyncio.create_task(hold(admission, ENDPOINT, key("b"), log, release))
        after = asyncio.create_task(hold(admission, ENDPOINT, key("c"), log, release))
        await settle()
        gone.cancel()
        release.set()
        await asyncio.gather(first, after)
        with pytest.raises(asyncio.CancelledError):
            await gone
        gate = admission._gates[ENDPOINT.id]
        return log, gate.in_flight

    log, in_flight = run_async(scenario())
    assert log == ["a", "c"]
    assert in_flight == 0  # no slot kept by the request that left


def test_a_request_that_waits_past_the_bound_gets_429_not_a_timeout():
    async def scenario() -> GatewayError:
        settings = replace(QUEUED_ONLY, wait_seconds=0.05)
        admission, log, release = Admission(settings), [], asyncio.Event()
        first = asyncio.create_task(hold(admission, ENDPOINT, key("a"), log, release))
        await settle()
        try:
            await hold(admission, ENDPOINT, key("b", "batch"), log, release)
        except GatewayError as error:
            refused = error
        release.set()
        await first
        return refused

    refused = run_async(scenario())
    assert (refused.status, refused.code) == (429, "endpoint_overloaded")
    assert refused.retry_after is not None and refused.retry_after >= 1
    assert "waited" in refused.message and "'batch'" in refused.message


def test_more_ready_replicas_admit_waiting_requests_at_once():
    async def scenario() -> list[str]:
        admission, log, release = Admission(QUEUED_ONLY), [], asyncio.Event()
        tasks = [
            asyncio.create_task(hold(admission, ENDPOINT, key(name), log, release))
            for name in "abc"
        ]
        await settle()
        assert log == ["a"]
        grown = replace(ENDPOINT, ready_replicas=3)  # the route table after a scale-up
        tasks.append(asyncio.create_task(hold(admission, grown, key("d"), log, release)))
        await settle()
        admitted = list(log)
        release.set()
        await asyncio.gather(*tasks)
        return admitted

    assert run_async(scenario()) == ["a", "b", "c"]  # d waits behind b and c, first come


def test_the_limit_is_shared_among_gateway_replicas_and_off_without_a_size():
    four = Admission(AdmissionSettings(gateway_replicas=4))
    sized = replace(ENDPOINT, ready_replicas=3, per_replica=32)
    assert four.limit_of(sized) == 24  # 96 in flight for the endpoint, a quarter here
    assert four.limit_of(replace(sized, per_replica=1)) == 1  # never below one
    assert four.limit_of(replace(sized, per_replica=0)) == 0  # no size known: no bound
    override = Admission(AdmissionSettings(per_replica=8))
    assert override.limit_of(sized) == 24


# Borrowing beyond the limit, for keys under their fair share. The endpoint's limit is 6 (two
# replicas sized for 3 each), its engines run 4 each: 8 in flight at most, borrowed slots included.
SMALL = replace(ENDPOINT, ready_replicas=2, per_replica=3, engine_slots=4)


class Load:
    """Requests of several keys through one ``Admission``, each held until let go by name."""

    def __init__(self, admission: Admission, endpoint: Endpoint = SMALL) -> None:
        self.admission, self.endpoint = admission, endpoint
        self.admitted: list[str] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.releases: dict[str, list[asyncio.Event]] = {}

    def send(self, who: InferenceKey, count: int = 1) -> None:
        for _ in range(count):
            release = asyncio.Event()
            self.releases.setdefault(who.id, []).append(release)
            self.tasks.append(asyncio.create_task(self._hold(who, release)))

    async def _hold(self, who: InferenceKey, release: asyncio.Event) -> None:
        async with self.admission.slot(self.endpoint, who):
            self.admitted.append(who.id)
            await release.wait()

    def finish_one(self, key_id: str) -> None:
        """Let go of the key's oldest request that holds a slot."""
        held = self.admitted.count(key_id)
        pending = [r for r in self.releases[key_id][:held] if not r.is_set()]
        pending[0].set()

    @property
    def in_flight(self) -> int:
        return self.admission._gates[self.endpoint.id].in_flight

    async def close(self) -> None:
        for releases in self.releases.values():
            for release in releases:
                release.set()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def flooded(load: Load, flood: InferenceKey) -> None:
    """The flood holds all 6 slots of the limit, and 4 more of its requests wait."""
    load.send(flood, 10)
    await settle()
    assert load.in_flight == 6


def test_a_light_key_beside_a_flood_gets_its_second_request_in_at_once_at_a_small_limit():
    async def scenario() -> tuple[int, int]:
        load, flood, light = Load(Admission(AdmissionSettings())), key("flood"), key("light")
        await flooded(load, flood)
        load.send(light, 2)  # its share is 3 of the 6 (two keys, equal weights)
        await settle()
        admitted, in_flight = load.admitted.count("light"), load.in_flight
        await load.close()
        return admitted, in_flight

    # Before, the headroom was ceil(6 x 0.1) = 1 slot shared by every key under its share, so the
    # light key's second request waited for a flood request to finish.
    assert run_async(scenario()) == (2, 8)


def test_slots_borrowed_beyond_the_limit_come_back_before_the_flood_goes_in_again():
    async def scenario() -> list[tuple[int, int]]:
        load, flood, light = Load(Admission(AdmissionSettings())), key("flood"), key("light")
        await flooded(load, flood)
        load.send(light, 2)
        await settle()
        seen = []
        for _ in range(3):  # flood requests finish one by one: 8 -> 7 -> 6 -> 5 in flight
            load.finish_one("flood")
            await settle()
            seen.append((load.in_flight, load.admitted.count("flood")))
        await load.close()
        return seen

    # The flood's waiting requests go in only once fewer than 6 are in flight: the 2 borrowed
    # slots are given back first, then its next request takes the slot freed (back to 6).
    assert run_async(scenario()) == [(7, 6), (6, 6), (6, 7)]


def test_a_key_under_its_share_does_not_borrow_while_a_higher_class_waits():
    async def scenario() -> tuple[int, int]:
        load, boss, light = (
            Load(Admission(AdmissionSettings())),
            key("boss", "critical"),
            key("light"),
        )
        load.send(boss, 7)  # 6 in flight, 1 waiting: over its share, so it cannot borrow
        await settle()
        load.send(light, 1)
        await settle()
        admitted, in_flight = load.admitted.count("light"), load.in_flight
        await load.close()
        return admitted, in_flight

    assert run_async(scenario()) == (0, 6)


def test_many_light_keys_borrow_no_more_than_the_engines_run_at_once():
    async def scenario(admission: Admission, endpoint: Endpoint) -> tuple[int, int]:
        load, flood = Load(admission, endpoint), key("flood")
        await flooded(load, flood)
        for name in "abcde":
            load.send(key(name), 1)  # each far under its share (6 of 6 keys' weights: 1)
        await settle()
        light, in_flight = len(load.admitted) - load.admitted.count("flood"), load.in_flight
        await load.close()
        return light, in_flight

    settings = AdmissionSettings()
    # The engines run 2 x 4: only 2 of the 5 go in beyond the limit of 6; the rest wait.
    assert run_async(scenario(Admission(settings), SMALL)) == (2, 8)
    # Engines of unknown size: the headroom, ceil(6 x 0.1) = 1 slot beyond the limit.
    unknown = replace(SMALL, engine_slots=0)
    assert run_async(scenario(Admission(settings), unknown)) == (1, 7)
    # A larger headroom than the engines' capacity wins: 6 + ceil(6 x 0.5) = 9.
    assert run_async(scenario(Admission(replace(settings, headroom=0.5)), SMALL)) == (3, 9)
    # No headroom: no borrowing at all, whatever the engines run.
    assert run_async(scenario(Admission(QUEUED_ONLY), SMALL)) == (0, 6)


@pytest.mark.django_db
def test_the_route_table_carries_what_the_engines_run_at_once(cast):
    actor = cast.actor(cast.alice, cast.acme)
    spec = {
        **SPEC,
        "batching": {"max_running_requests": 4},
        "autoscaling": {"concurrency_target": 3},
    }
    sized = deployment_services.create_deployment(actor, slug="sized", name="sized", spec=spec)
    mark_serving(sized, "http://router", replicas=2)
    endpoint = loader.load_endpoints([str(sized.pk)])["sized"]
    assert (endpoint.per_replica, endpoint.engine_slots) == (3, 4)
    admission = Admission(AdmissionSettings())
    assert (admission.limit_of(endpoint), admission.ceiling_of(endpoint, 6)) == (6, 8)
