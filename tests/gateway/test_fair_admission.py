"""Fair sharing under overload (``gateway.admission``), through a real gateway, smg and engine.

The endpoint is sized for 2 requests in flight (``batching.max_running_requests`` 2, one ready
replica), and its one simulated engine runs at most 3 at once (room for the gateway's headroom),
queueing the rest first come, first served: without the gateway's fair admission, whoever sent
first is served first. Every assertion counts requests (which finished before which, which were
refused); none times them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from controlplane import services as platform
from deployments.endpoints import services as deployment_services
from runtime.sim.launcher import SimCluster
from tests.gateway.conftest import (
    GatewayProcess,
    mark_serving,
    run_async,
    start_gateway,
    stop_process,
    wait_routable,
)
from tests.runtime.sim.scrape import metric_sum
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
MODEL = "sim/llama-test"
LIMIT = 2
SPEC: dict[str, Any] = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
    "hardware": {"gpu": "H100-SXM"},
    "batching": {"max_running_requests": LIMIT},
    "routing": {"policy": "round_robin"},  # the router places requests: no gateway slots
}
# Output tokens (at time scale 10, about a millisecond each): a request that holds its slot
# while others arrive one by one, one that holds it for a while, one that barely does.
HOLD, LONG, SHORT = 12_000, 1500, 10


@pytest.fixture(scope="module")
def busy_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    """One engine that runs 3 requests at once and queues the rest in arrival order."""
    args = ["--max-running-requests", str(LIMIT + 1)]
    log_dir = tmp_path_factory.mktemp("busy-engine")
    with SimCluster(
        engines=1, policy="round_robin", engine_args=args, time_scale=10, log_dir=log_dir
    ) as c:
        yield c


@pytest.fixture(autouse=True)
def idle_engine(busy_engine: SimCluster) -> SimCluster:
    """Each test starts with the engine idle: another test's requests (cancelled ones run on
    until the engine notices) would count as this test's in ``_outstanding``."""
    wait_until(lambda: _in_engine(busy_engine) == 0, "the engine idle", 60)
    return busy_engine


def _gateway(tmp_path: Path, queue_factor: str, **env: str) -> Iterator[GatewayProcess]:
    proc = start_gateway(
        tmp_path,
        **env,
        GATEWAY_ADMISSION_QUEUE_FACTOR=queue_factor,
        # Far beyond any wait here: a slow machine must not turn a wait into a refusal.
        GATEWAY_ADMISSION_WAIT_SECONDS="600",
    )
    yield proc
    stop_process(proc.popen)


@pytest.fixture(scope="module")
def roomy(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory):
    """A gateway whose queue holds 50 requests per slot, so nothing is shed, and no headroom:
    every request beyond the limit queues, so the order of admissions is the queue's alone."""
    yield from _gateway(tmp_path_factory.mktemp("roomy"), "50", GATEWAY_ADMISSION_HEADROOM="0")


@pytest.fixture(scope="module")
def standard(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory):
    """A gateway with the default queue and headroom (a tenth of the limit: 1 slot here)."""
    yield from _gateway(tmp_path_factory.mktemp("standard"), "4")


@pytest.fixture(scope="module")
def tight(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory):
    """A gateway whose queue holds 2 requests per slot, 4 for this endpoint, and no headroom:
    every request beyond the limit queues, so which are shed depends on the queue alone."""
    yield from _gateway(tmp_path_factory.mktemp("tight"), "2", GATEWAY_ADMISSION_HEADROOM="0")


def _endpoint(cast, slug: str, engine: SimCluster) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    deployment = deployment_services.create_deployment(actor, slug=slug, name=slug, spec=SPEC)
    mark_serving(deployment, engine.url)


def _key(cast, name: str, **share: Any) -> str:
    actor = cast.actor(cast.alice, cast.acme)
    return platform.create_api_key(actor, name=name, kind="inference", **share).plaintext


def _outstanding(gateway: GatewayProcess, engine: SimCluster, slug: str) -> int:
    """Requests waiting in the gateway's queue or in the engine (running or queued)."""
    waiting = metric_sum(gateway.metrics_url, "plinth_gateway_admission_waiting", endpoint=slug)
    return int(waiting) + _in_engine(engine)


def _in_engine(engine: SimCluster) -> int:
    return int(
        sum(
            metric_sum(url, "sglang:num_running_reqs") + metric_sum(url, "sglang:num_queue_reqs")
            for url in engine.engine_urls
        )
    )


class Caller:
    """Sends completions for several keys and records the order in which answers come back."""

    def __init__(self, gateway: GatewayProcess, slug: str) -> None:
        self.client = httpx.AsyncClient(base_url=gateway.base_url(slug), timeout=300)
        self.finished: list[tuple[str, httpx.Response]] = []

    async def send(self, name: str, key: str, max_tokens: int) -> httpx.Response:
        body = {"model": MODEL, "prompt": f"{name} asks", "max_tokens": max_tokens}
        response = await self.client.post(
            "/completions",
            json={**body, "ignore_eos": True},
            headers={"Authorization": f"Bearer {key}"},
        )
        self.finished.append((name, response))
        return response

    def done(self, name: str) -> int:
        return sum(1 for n, _ in self.finished if n == name)


async def _until(check, what: str) -> None:
    await asyncio.to_thread(wait_until, check, what, 60)


def test_a_flooding_key_cannot_starve_a_normal_key(cast, busy_engine, roomy):
    _endpoint(cast, "shared", busy_engine)
    flood, normal = _key(cast, "flood"), _key(cast, "normal")
    wait_routable(roomy, "shared", normal)
    wait_routable(roomy, "shared", flood)

    async def scenario() -> tuple[list[httpx.Response], int, list[httpx.Response]]:
        caller = Caller(roomy, "shared")
        floods = [asyncio.create_task(caller.send("flood", flood, LONG)) for _ in range(30)]
        await _until(
            lambda: _outstanding(roomy, busy_engine, "shared") == 30, "the flood queued up"
        )
        normals = [await caller.send("normal", normal, SHORT) for _ in range(5)]
        flood_done_meanwhile = caller.done("flood")
        flood_answers = await asyncio.gather(*floods)
        await caller.client.aclose()
        return normals, flood_done_meanwhile, flood_answers

    normals, flood_done_meanwhile, flood_answers = run_async(scenario())

    assert [r.status_code for r in normals] == [200] * 5
    # Each normal request waits for about one slot to free (the fair queue puts it ahead of the
    # flood's backlog), so few flood requests finish meanwhile: 2 per normal request at most.
    # First come, first served, every queued flood request would finish first.
    assert flood_done_meanwhile <= 2 * 5
    assert [r.status_code for r in flood_answers] == [200] * 30  # the queue held them all


def test_a_key_under_its_share_is_admitted_beside_a_flood_without_waiting(
    cast, busy_engine, standard
):
    _endpoint(cast, "headroom", busy_engine)
    flood, normal = _key(cast, "flood"), _key(cast, "normal")
    wait_routable(standard, "headroom", normal)
    wait_routable(standard, "headroom", flood)

    async def scenario() -> tuple[httpx.Response, int]:
        caller = Caller(standard, "headroom")
        floods = [asyncio.create_task(caller.send("flood", flood, HOLD)) for _ in range(4)]
        await _until(lambda: _outstanding(standard, busy_engine, "headroom") == 4, "flood queued")
        answer = await caller.send("normal", normal, SHORT)
        flood_done = caller.done("flood")
        for task in floods:  # hung up: the gateway and the engine let them go
            task.cancel()
        await asyncio.gather(*floods, return_exceptions=True)
        await caller.client.aclose()
        return answer, flood_done

    answer, flood_done = run_async(scenario())

    assert answer.status_code == 200
    # Both slots are held by requests far longer than this one, which went in beside them
    # (the limit's headroom, for a key under its fair share): none of them had to finish.
    assert flood_done == 0


def test_weights_share_admissions_in_proportion(cast, busy_engine, roomy):
    _endpoint(cast, "weighted", busy_engine)
    heavy, light = _key(cast, "heavy", weight=3), _key(cast, "light", weight=1)
    blocker = _key(cast, "blocker")
    for key in (heavy, light, blocker):
        wait_routable(roomy, "weighted", key)

    async def scenario() -> list[str]:
        caller = Caller(roomy, "weighted")
        # Long requests hold both slots (and the engine's third place) while both keys'
        # backlogs queue up behind them.
        blockers = [
            asyncio.create_task(caller.send("blocker", blocker, HOLD)) for _ in range(LIMIT + 1)
        ]
        await _until(lambda: _outstanding(roomy, busy_engine, "weighted") == 3, "slots held")
        sent = [asyncio.create_task(caller.send("heavy", heavy, SHORT)) for _ in range(24)]
        sent += [asyncio.create_task(caller.send("light", light, SHORT)) for _ in range(24)]
        # (Answered ones count too: an engine with a free place would already answer some.)
        await _until(
            lambda: _outstanding(roomy, busy_engine, "weighted") + len(caller.finished) == 51,
            "all sent",
        )
        await asyncio.gather(*blockers, *sent)
        await caller.client.aclose()
        assert all(r.status_code == 200 for _, r in caller.finished)
        return [name for name, _ in caller.finished if name != "blocker"]

    order = run_async(scenario())

    # Of the first 24 answers, weights 3:1 give the heavy key 18; arrival order would give 12
    # or 24 (the light key's backlog behind or ahead of it). One admission of slack each way.
    first = order[:24]
    assert 16 <= first.count("heavy") <= 20, first


def test_lower_classes_are_shed_first_with_429_and_retry_after(cast, busy_engine, tight):
    _endpoint(cast, "crowded", busy_engine)
    critical = _key(cast, "critical", priority="critical")
    standard = _key(cast, "standard", priority="standard")
    batch = _key(cast, "batch", priority="batch")
    for key in (critical, standard, batch):
        wait_routable(tight, "crowded", key)

    async def scenario() -> dict[str, httpx.Response]:
        caller = Caller(tight, "crowded")
        tasks: dict[str, asyncio.Task[httpx.Response]] = {}

        async def send(name: str, key: str, tokens: int) -> None:
            """Send one and wait until the gateway holds it (or has answered it)."""
            before = _outstanding(tight, busy_engine, "crowded") + len(caller.finished)
            tasks[name] = asyncio.create_task(caller.send(name, key, tokens))
            await _until(
                lambda: _outstanding(tight, busy_engine, "crowded") + len(caller.finished) > before,
                f"{name} arrived",
            )

        for i in range(2):  # both slots held by long critical requests
            await send(f"critical-{i}", critical, HOLD)
        for i in range(4):  # the queue's 4 places, all batch
            await send(f"batch-{i}", batch, SHORT)
        for i in range(2):  # each standard request takes the newest batch request's place
            await send(f"standard-{i}", standard, SHORT)
        await send("batch-late", batch, SHORT)  # the newest of the lowest class: itself
        await asyncio.gather(*tasks.values())
        await caller.client.aclose()
        return {name: task.result() for name, task in tasks.items()}

    answers = run_async(scenario())

    refused = sorted(name for name, r in answers.items() if r.status_code == 429)
    assert refused == ["batch-2", "batch-3", "batch-late"]
    for name in refused:
        answer = answers[name]
        assert int(answer.headers["retry-after"]) >= 1
        error = answer.json()["error"]
        assert (error["type"], error["code"]) == ("rate_limit_error", "endpoint_overloaded")
        assert "'batch'" in error["message"]
    served = {name for name, r in answers.items() if r.status_code == 200}
    assert served == set(answers) - set(refused)
