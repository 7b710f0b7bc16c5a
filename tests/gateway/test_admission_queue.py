"""``gateway.admission`` on its own, in one event loop: what happens to a waiting request that
leaves (its client hangs up, or it waits too long) and to waiting requests when replicas come.
The queue's order and shedding are tested through the real gateway in test_fair_admission.py."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from gateway.admission import Admission, AdmissionSettings
from gateway.errors import GatewayError
from gateway.routes import Endpoint, InferenceKey
from tests.gateway.conftest import run_async

ENDPOINT = Endpoint("e1", "queued", "o1", "active", "running", 1, "http://x", per_replica=1)
# No headroom: every request beyond the limit waits (the headroom has its own end-to-end test).
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
