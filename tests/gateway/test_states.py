"""Endpoints that cannot serve answer in OpenAI's error shape: stopped, not ready, holds full,
replicas or router down; what clears by itself says when to retry, what does not says not to."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import httpx
import openai
import pytest
from django.conf import settings

from deployments.endpoints import services as deployment_services
from gateway.app import Gateway
from gateway.config import GatewayConfig
from gateway.errors import GatewayError
from gateway.holds import Holds
from gateway.refresher import RouteRefresher
from gateway.routes import Endpoint, RouteTable
from runtime.sim.launcher import SimCluster, free_port
from tests.gateway.conftest import (
    TIME_SCALE,
    create_endpoint,
    inference_key,
    mark_serving,
    run_async,
    wait_routable,
)
from tests.waiting import wait_until

BODY = {"model": "sim/llama-test", "messages": [{"role": "user", "content": "hi"}]}


def chat(gateway, slug: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{gateway.base_url(slug)}/chat/completions",
        json=BODY,
        headers={"Authorization": f"Bearer {key}"},
    )


@pytest.mark.django_db(transaction=True)
def test_an_endpoint_without_a_ready_replica_answers_503(cast, gateway):
    create_endpoint(cast, "coming-up")  # created, never observed ready
    key = inference_key(cast)
    wait_until(lambda: chat(gateway, "coming-up", key).status_code == 503, "endpoint loaded", 10)

    error = chat(gateway, "coming-up", key).json()["error"]
    assert error["code"] == "no_ready_replica"
    assert error["type"] == "service_unavailable"
    assert "coming-up" in error["message"]


@pytest.mark.django_db(transaction=True)
def test_a_stopped_endpoint_answers_409_that_clients_do_not_retry(cast, sim_cluster, gateway):
    endpoint = create_endpoint(cast, "resting")
    mark_serving(endpoint, sim_cluster.url)
    key = inference_key(cast)
    wait_routable(gateway, "resting", key)

    deployment_services.stop(cast.actor(cast.alice, cast.acme), endpoint.pk)
    wait_until(lambda: chat(gateway, "resting", key).status_code == 409, "stop seen", 2)
    response = chat(gateway, "resting", key)
    assert response.json()["error"]["code"] == "endpoint_stopped"
    assert response.headers["x-should-retry"] == "false" and "retry-after" not in response.headers

    # The official client (it retries 409 and 5xx twice by default) gives up at once.
    sent: list[httpx.Request] = []
    http_client = httpx.Client(event_hooks={"request": [sent.append]})
    client = openai.OpenAI(
        base_url=gateway.base_url("resting"), api_key=key, http_client=http_client
    )
    with pytest.raises(openai.ConflictError) as raised:
        client.chat.completions.create(model=BODY["model"], messages=BODY["messages"])
    assert raised.value.code == "endpoint_stopped"
    assert len(sent) == 1


# --- holding, in process: the route table is given, the wake-up call is recorded ----------


def sleeping(endpoint_id: str = "e1") -> Endpoint:
    return Endpoint(endpoint_id, "sleepy", "org", "scaled_to_zero", "running", 0, "")


async def holds_for(table: RouteTable, *, hold_seconds: float, queue_size: int):
    woken: list[str] = []

    async def send_wake(endpoint_id: str) -> None:
        woken.append(endpoint_id)

    refresher = RouteRefresher(
        lambda: table, client=None, refresh_seconds=30, hold_refresh_seconds=0.05
    )
    refresher.table = table
    return Holds(refresher, send_wake, hold_seconds=hold_seconds, queue_size=queue_size), woken


def test_a_hold_that_runs_out_answers_429_with_retry_after():
    async def scenario() -> GatewayError:
        table = RouteTable(endpoints={"sleepy": sleeping()})
        holds, woken = await holds_for(table, hold_seconds=0.2, queue_size=4)
        with pytest.raises(GatewayError) as raised:
            await holds.hold(sleeping())
        assert woken == ["e1"]
        return raised.value

    error = run_async(scenario())
    assert error.status == 429
    assert dict(error.headers())[b"retry-after"] == b"10"


def test_requests_beyond_the_hold_queue_are_refused_at_once():
    async def scenario() -> list[object]:
        table = RouteTable(endpoints={"sleepy": sleeping()})
        holds, woken = await holds_for(table, hold_seconds=0.5, queue_size=2)
        results = await asyncio.gather(
            *(holds.hold(sleeping()) for _ in range(3)), return_exceptions=True
        )
        assert woken == ["e1"]  # one wake-up for all the waiting requests
        return results

    results = run_async(scenario())
    statuses = sorted(r.status for r in results if isinstance(r, GatewayError))
    assert statuses == [429, 429, 429]
    assert sum("too many requests are waiting" in r.message for r in results) == 1


@pytest.mark.django_db(transaction=True)
def test_an_unreachable_router_answers_503_with_retry_after(cast, gateway):
    endpoint = create_endpoint(cast, "router-down")
    mark_serving(endpoint, f"http://127.0.0.1:{free_port()}")  # nothing listens there
    key = inference_key(cast)
    wait_until(lambda: chat(gateway, "router-down", key).status_code == 503, "endpoint loaded", 10)

    response = chat(gateway, "router-down", key)
    error = response.json()["error"]
    assert (error["code"], error["type"]) == ("upstream_unreachable", "service_unavailable")
    assert int(response.headers["retry-after"]) >= 1
    assert "127.0.0.1" not in error["message"]  # the router's address stays inside


@pytest.mark.django_db(transaction=True)
def test_an_endpoint_whose_engine_died_answers_503_without_the_routers_internals(
    cast, gateway, tmp_path: Path
):
    with SimCluster(engines=1, policy="round_robin", time_scale=TIME_SCALE, log_dir=tmp_path) as c:
        endpoint = create_endpoint(cast, "engine-down")
        mark_serving(endpoint, c.url)
        key = inference_key(cast)
        wait_routable(gateway, "engine-down", key)
        c.engines[0].signal(signal.SIGKILL)
        c.engines[0].wait(10)
        # The router answers 500 "error sending request for url (http://127.0.0.1:<port>/..)"
        # until its health check notices, then 503 "no_available_workers".
        answers = [chat(gateway, "engine-down", key) for _ in range(3)]

    for response in answers:
        assert response.status_code == 503, response.text
        assert int(response.headers["retry-after"]) >= 1
        error = response.json()["error"]
        assert (error["code"], error["type"]) == ("upstream_unavailable", "service_unavailable")
        assert "127.0.0.1" not in response.text and "error sending" not in response.text


def test_the_gateway_is_not_ready_until_its_route_table_loads_but_stays_alive():
    def load() -> RouteTable:
        raise RuntimeError("the database is down")

    async def scenario() -> tuple[int, int]:
        gateway = Gateway(GatewayConfig(redis_url=settings.REDIS_URL), load)
        await gateway.startup()
        transport = httpx.ASGITransport(app=gateway)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            ready, live = await client.get("/healthz"), await client.get("/livez")
        await gateway.shutdown()
        return ready.status_code, live.status_code

    assert run_async(scenario()) == (503, 200)
