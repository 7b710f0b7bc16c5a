"""The gateway places tenants by count through the real router (``gateway.placement``): behind
smg's consistent_hashing, which obeys the gateway's ``x-smg-target-worker``, tenants arriving one
at a time each get an engine of their own and keep it; a slot the router does not have (the
control plane counts more replicas than the router lists) is refused with 503 and the request
sent again by its key alone; an engine killed under steady traffic fails only the requests it
was running, the others sent at once to the other replica and its slot left out by every gateway
process; a flood confined to its shard under contention leaves the other engine to a light
tenant (``gateway.admission``'s isolation); and only a revision routed cache_aware placed by_count
without a P/D split is placed by the gateway (``gateway.loader``)."""

from __future__ import annotations

import itertools
import re
import threading
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis
from django.conf import settings

from controlplane.crypto import engine_api_key
from deployments.endpoints import services as deployment_services
from deployments.endpoints.models import Deployment
from deployments.experiments.canary import services as canary_services
from gateway.loader import load_canaries, load_endpoints
from gateway.placement import pool_id, table_keys
from runtime.launch import cache_aware_args, smg_policy
from runtime.routing_key import routing_key
from runtime.sim.launcher import SimCluster, http_get
from runtime.spec import PLINTH_ROUTING
from tests.conftest import Cast
from tests.gateway.conftest import (
    SPEC,
    TIME_SCALE,
    GatewayProcess,
    create_endpoint,
    inference_key,
    mark_serving,
    start_gateway,
    stop_process,
    wait_routable,
)
from tests.runtime.sim.scrape import metric_sum
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
REQUESTS = "sglang:num_requests_total"
TENANTS = ("lighthouse", "bakery", "observatory", "shipyard", "orchard", "foundry")


def system_prompt(tenant: str) -> str:
    """A tenant's long system prompt: past the routing key's reach, so it alone names the key."""
    return f"You are the assistant of the {tenant}. Answer briefly and kindly. " * 40


def chat(
    gateway: GatewayProcess, slug: str, key: str, tenant: str, question: str, max_tokens: int = 2
) -> httpx.Response:
    messages = [
        {"role": "system", "content": system_prompt(tenant)},
        {"role": "user", "content": question},
    ]
    return httpx.post(
        f"{gateway.base_url(slug)}/chat/completions",
        json={"model": "sim/llama-test", "messages": messages, "max_tokens": max_tokens},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def ask(gateway: GatewayProcess, slug: str, key: str, tenant: str, question: str) -> None:
    answer = chat(gateway, slug, key, tenant, question)
    assert answer.status_code == 200, answer.text
    # The router's choice of engine is not relayed to the client.
    assert "x-smg-routed-worker-id" not in answer.headers


def placed_cluster(
    engines: int, endpoint: Deployment, log_dir: Any, engine_args: list[str] | None = None
) -> SimCluster:
    """Engines behind the router a by_count revision gets (``runtime.launch.router_args``)."""
    policy, args = smg_policy("cache_aware", PLINTH_ROUTING), cache_aware_args(PLINTH_ROUTING)
    assert policy == "consistent_hashing"
    return SimCluster(
        engines=engines,
        policy=policy,
        router_args=args,
        engine_args=engine_args or [],
        time_scale=TIME_SCALE,
        log_dir=log_dir,
        api_key=engine_api_key(str(endpoint.pk)),
    )


def fresh_table(router_url: str) -> None:
    """No placements left in Redis from an earlier router that had this address."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(*table_keys(pool_id(router_url)))
    client.close()


def counts(sim: SimCluster) -> list[float]:
    return [metric_sum(url, REQUESTS) for url in sim.engine_urls]


def engine_of_next(sim: SimCluster, send: Any) -> int:
    """The index of the one engine that served the request ``send`` makes."""
    before = counts(sim)
    total = sum(before)
    send()

    def counted() -> list[float] | None:
        now = counts(sim)
        return now if sum(now) >= total + 1 else None

    after = wait_until(counted, "request counted", 10)
    assert after is not None
    grew = [a - b for a, b in zip(after, before, strict=True)]
    assert sorted(grew) == [0] * (len(grew) - 1) + [1], grew
    return grew.index(1)


def test_tenants_arriving_one_at_a_time_each_get_an_engine_and_keep_it(
    cast: Cast, gateway: GatewayProcess, tmp_path: Any
) -> None:
    """4 engines, 4 tenants whose first requests come one at a time: one tenant per engine (smg's
    own placement of an unseen prefix may stack two on one engine), and every later request of a
    tenant reaches its engine."""
    endpoint = create_endpoint(cast, "placed")
    tenants = TENANTS[:4]
    with placed_cluster(4, endpoint, tmp_path) as sim:
        mark_serving(endpoint, sim.url, replicas=4)
        key = inference_key(cast)
        wait_routable(gateway, "placed", key)
        fresh_table(sim.url)  # wait_routable's GET /v1/models calls were placed too
        engine = {
            t: engine_of_next(sim, lambda t=t: ask(gateway, "placed", key, t, "Hello?"))
            for t in tenants
        }
        assert sorted(engine.values()) == [0, 1, 2, 3], engine
        for round_ in range(3):
            for t in tenants:
                served = engine_of_next(
                    sim, lambda t=t, r=round_: ask(gateway, "placed", key, t, f"Q{r}?")
                )
                assert served == engine[t], (t, round_)
        totals = counts(sim)
    assert sorted(totals) == [4.0, 4.0, 4.0, 4.0], totals


def test_a_slot_the_router_lacks_is_left_out_and_its_requests_sent_again(
    cast: Cast, gateway: GatewayProcess, tmp_path: Any
) -> None:
    """2 engines, while the control plane counts 3 ready replicas: a key placed on slot 2 is
    refused by the router (503), slot 2 is left out and the request sent again to another slot;
    every request answers 200 (how many refusals depends on how long slot 2 stays left out, so
    the count is only checked to be one or more)."""
    endpoint = create_endpoint(cast, "overcounted")
    with placed_cluster(2, endpoint, tmp_path) as sim:
        mark_serving(endpoint, sim.url, replicas=3)
        key = inference_key(cast)
        wait_routable(gateway, "overcounted", key)
        fresh_table(sim.url)  # wait_routable's GET /v1/models calls were placed too
        before = sum(counts(sim))
        for round_ in range(2):
            for t in TENANTS:
                ask(gateway, "overcounted", key, t, f"Q{round_}?")
        wait_until(
            lambda: sum(counts(sim)) >= before + 2 * len(TENANTS), "all requests counted", 10
        )
    refused = metric_sum(
        f"{gateway.metrics_url}",
        "plinth_gateway_upstream_errors_total",
        endpoint="overcounted",
        reason="placement_refused",
    )
    assert refused >= 1, refused


# Output tokens of a flood request: enough to hold its engine while others arrive.
FLOOD_TOKENS = 1000


def test_under_contention_a_flood_is_placed_on_its_shard_and_a_light_tenant_off_it(
    cast: Cast, gateway: GatewayProcess, tmp_path: Any
) -> None:
    """2 engines sized for 2 requests in flight each (a limit of 4). A light key sends one
    tenant's requests one after another throughout. A flood key sends 8 requests at once, each
    its own prompt (a routing key of its own): past the limit, it is confined to one slot (its
    half of the active keys' weights: one of two; the gauge says which), and the light tenant is
    placed on the other (afresh, if it was there). A second wave of 8 flood requests is placed
    on the flood's slot only; every request is answered. (The first wave's requests admitted
    before the endpoint was contended went anywhere.)"""
    actor = cast.actor(cast.alice, cast.acme)
    spec = {**SPEC, "batching": {"max_running_requests": 2}}
    endpoint = deployment_services.create_deployment(
        actor, slug="isolated", name="isolated", spec=spec
    )
    with placed_cluster(2, endpoint, tmp_path, ["--max-running-requests", "2"]) as sim:
        mark_serving(endpoint, sim.url, replicas=2)
        flood, light = inference_key(cast), inference_key(cast)
        wait_routable(gateway, "isolated", flood)
        wait_routable(gateway, "isolated", light)
        fresh_table(sim.url)  # wait_routable's GET /v1/models calls were placed too
        answered: list[int] = []
        done = threading.Event()

        def light_tenant() -> None:
            while not done.is_set():
                answered.append(chat(gateway, "isolated", light, "lighthouse", "Q?").status_code)

        def wave(name: str) -> list[threading.Thread]:
            def one(i: int) -> None:
                tenant = f"{name} {i}"
                answer = chat(gateway, "isolated", flood, tenant, "Go on.", FLOOD_TOKENS)
                answered.append(answer.status_code)

            threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
            for thread in threads:
                thread.start()
            return threads

        threads = [threading.Thread(target=light_tenant)]
        threads[0].start()
        try:
            wait_until(lambda: len(answered) >= 1, "the light tenant answered", 10)
            threads += wave("first")
            shard = wait_until(lambda: confined_slots(gateway, "isolated"), "flood confined", 10)
            threads += wave("second")
            for thread in threads[1:]:
                thread.join()
        finally:
            done.set()
            for thread in threads:
                thread.join()
        placed = redis.Redis.from_url(settings.REDIS_URL, decode_responses=True).hgetall(
            table_keys(pool_id(sim.url))[0]
        )
    assert set(answered) == {200}
    assert len(shard) == 1
    assert {int(placed[tenant_key(f"second {i}")]) for i in range(8)} == shard
    assert int(placed[tenant_key("lighthouse")]) not in shard


def waiting(gateway: GatewayProcess, slug: str) -> float:
    return metric_sum(gateway.metrics_url, "plinth_gateway_admission_waiting", endpoint=slug)


def confined_slots(gateway: GatewayProcess, slug: str) -> set[int] | None:
    """The slots of the one key confined on ``slug``, from the gateway's gauge; None while no
    key is confined."""
    _, body = http_get(f"{gateway.metrics_url}/metrics")
    lines = [
        line
        for line in body.decode().splitlines()
        if line.startswith("plinth_gateway_confined_slots{") and f'endpoint="{slug}"' in line
    ]
    assert len(lines) <= 1, lines
    slots = re.search(r'slots="([^"]*)"', lines[0]) if lines else None
    return {int(s) for s in slots[1].split(",")} if slots is not None else None


def tenant_key(tenant: str) -> str:
    """The routing key of ``chat``'s requests for ``tenant``."""
    key = routing_key({"messages": [{"role": "system", "content": system_prompt(tenant)}]})
    assert key is not None
    return key


def created(cast: Cast, slug: str, **spec: Any) -> Deployment:
    """An endpoint with ``SPEC`` plus ``spec``, marked serving behind an address nothing uses."""
    actor = cast.actor(cast.alice, cast.acme)
    deployment = deployment_services.create_deployment(
        actor, slug=slug, name=slug, spec={**SPEC, **spec}
    )
    mark_serving(deployment, "http://127.0.0.1:9", replicas=2)
    deployment.refresh_from_db()
    return deployment


def test_only_by_count_placement_without_a_split_is_placed_by_the_gateway(cast: Cast) -> None:
    """The default spec (cache_aware, by_count) is placed; first_fit, another policy or a P/D
    split is left to the router."""
    specs: dict[str, dict[str, Any]] = {
        "default": {},
        "by-count": {"routing": {"placement": "by_count"}},
        "first-fit": {"routing": {"placement": "first_fit"}},
        "round-robin": {"routing": {"policy": "round_robin"}},
        "split": {"disaggregation": {"enabled": True}},
    }
    for slug, spec in specs.items():
        created(cast, slug, **spec)
    placed = {e.slug: e.placed for e in load_endpoints().values()}
    assert placed == {
        "default": True,
        "by-count": True,
        "first-fit": False,
        "round-robin": False,
        "split": False,
    }


def test_a_running_canary_is_placed_by_its_own_revision(cast: Cast) -> None:
    """A canary's pool is placed as its own revision's spec says, not the baseline's."""
    actor = cast.actor(cast.alice, cast.acme)
    first_fit = {**SPEC, "routing": {"placement": "first_fit"}}
    to_first_fit = created(cast, "to-first-fit")
    to_by_count = created(cast, "to-by-count", routing={"placement": "first_fit"})
    canary_services.start_canary(actor, to_first_fit.pk, spec=first_fit, weight=10)
    canary_services.start_canary(actor, to_by_count.pk, spec=SPEC, weight=10)
    canaries = load_canaries()
    assert canaries[str(to_first_fit.pk)].placed is False
    assert canaries[str(to_by_count.pk)].placed is True
    endpoints = load_endpoints()  # by slug
    assert endpoints["to-first-fit"].placed is True  # the baseline keeps its own
    assert endpoints["to-by-count"].placed is False
    assert endpoints["to-first-fit"].canary == canaries[str(to_first_fit.pk)]


def test_an_engine_error_on_a_placed_request_is_not_taken_for_a_refused_slot(
    cast: Cast, gateway: GatewayProcess, tmp_path: Any
) -> None:
    """Engines that answer every generation with 500: the router had the slot the gateway named,
    so the request is not re-sent without its target (which would run it twice) nor counted as
    a refused placement."""
    endpoint = create_endpoint(cast, "failing")
    with placed_cluster(2, endpoint, tmp_path, ["--sim-error-rate", "1.0"]) as sim:
        fresh_table(sim.url)
        mark_serving(endpoint, sim.url, replicas=2)
        key = inference_key(cast)
        wait_routable(gateway, "failing", key)
        answer = chat(gateway, "failing", key, "lighthouse", "Hello?")
        assert answer.status_code == 503, answer.text
    refused = metric_sum(
        gateway.metrics_url,
        "plinth_gateway_upstream_errors_total",
        endpoint="failing",
        reason="placement_refused",
    )
    assert refused == 0


def test_keyless_requests_do_not_stack_two_tenants_on_one_engine(
    cast: Cast, gateway: GatewayProcess, tmp_path: Any
) -> None:
    """2 engines: tenant A, then a keyless request (GET /v1/models, keyed by its request id),
    then tenant B. The keyless request must not count as a tenant holding a replica, or B is
    placed beside A (slot 0: 1 key, slot 1: 1 keyless entry, tie to the lowest) while an engine
    serves no tenant at all."""
    endpoint = create_endpoint(cast, "probed")
    with placed_cluster(2, endpoint, tmp_path) as sim:
        mark_serving(endpoint, sim.url, replicas=2)
        key = inference_key(cast)
        wait_routable(gateway, "probed", key)
        fresh_table(sim.url)  # wait_routable's own calls placed entries too
        first = engine_of_next(sim, lambda: ask(gateway, "probed", key, "lighthouse", "Hi?"))
        response = httpx.get(
            f"{gateway.base_url('probed')}/models",
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        second = engine_of_next(sim, lambda: ask(gateway, "probed", key, "bakery", "Hi?"))
    assert first != second


# A logical clock: the order of sends, answers, the kill and the exit is all the test needs,
# so it counts events rather than reading a wall clock (next() on a count is atomic).
TICKS = itertools.count()


@dataclass
class Sent:
    """One request of the steady traffic: when it was sent and answered (ticks of ``TICKS``),
    and whether it was answered whole (200 and a complete body: choices, or a stream ending in
    [DONE] with no error event)."""

    stream: bool
    started: int
    ended: int
    ok: bool
    detail: str


def send_one(client: httpx.Client, url: str, key: str, tenant: str, stream: bool) -> Sent:
    messages = [
        {"role": "system", "content": system_prompt(tenant)},
        {"role": "user", "content": "How are you?"},
    ]
    body = {"model": "sim/llama-test", "messages": messages, "max_tokens": 16, "stream": stream}
    started = next(TICKS)
    try:
        with client.stream(
            "POST", url, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as answer:
            text = answer.read().decode(errors="replace")
            status = answer.status_code
    except httpx.HTTPError as exc:
        return Sent(stream, started, next(TICKS), False, repr(exc))
    if stream:
        ok = status == 200 and text.rstrip().endswith("data: [DONE]") and '"error"' not in text
    else:
        ok = status == 200 and '"choices"' in text
    return Sent(stream, started, next(TICKS), ok, f"{status} {text[-300:]}")


class SteadyTraffic:
    """Clients sending one tenant's chats back to back through one gateway, streamed and not."""

    def __init__(self, gateway: GatewayProcess, slug: str, key: str, tenant: str) -> None:
        self.url = f"{gateway.base_url(slug)}/chat/completions"
        self.key, self.tenant = key, tenant
        self.sent: list[Sent] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._client, args=(i % 2 == 1,)) for i in range(3)
        ]

    def _client(self, stream: bool) -> None:
        with httpx.Client() as client:
            while not self._stop.is_set():
                self.sent.append(send_one(client, self.url, self.key, self.tenant, stream))
                stream = not stream

    def __enter__(self) -> SteadyTraffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def answered_since(self, moment: int) -> int:
        return sum(1 for sent in list(self.sent) if sent.started > moment)


def unanswered(gateway: GatewayProcess, slug: str) -> float:
    """Tries the gateway sent again because they reached no engine (by either reason)."""
    return sum(
        metric_sum(
            gateway.metrics_url, "plinth_gateway_upstream_errors_total", endpoint=slug, reason=r
        )
        for r in ("replica_unreachable", "placement_refused")
    )


def test_a_killed_engine_fails_only_what_it_was_running_and_its_slot_is_dropped_everywhere(
    cast: Cast, tmp_path: Any
) -> None:
    """2 engines, 2 gateway processes sharing Redis. One tenant's steady traffic (3 clients,
    streamed and not) goes through gateway A to its engine, on slot 1; that engine is killed
    (SIGKILL). Every request sent once it has exited is answered whole: the router cannot
    connect to it (500 `call_upstream_connection_failed`, then, once its health checks fail,
    503 `no_available_workers`), and A sends the request at once to slot 0. Only requests in
    flight at the kill (sent before the engine exited, not answered before it was killed) may
    fail. Then gateway B, which sent nothing so far, sends the tenant and three new ones: none
    goes to slot 1, which A marked down in the shared placement (B sends nothing again), and
    the surviving engine answers all four."""
    endpoint = create_endpoint(cast, "failover")
    gateways: list[GatewayProcess] = []
    try:
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            # Left out for longer than the test takes, however slow the machine.
            gateways.append(start_gateway(tmp_path / name, GATEWAY_SLOT_DOWN_SECONDS="600"))
        first, second = gateways
        with placed_cluster(2, endpoint, tmp_path / "sim") as sim:
            mark_serving(endpoint, sim.url, replicas=2)
            key = inference_key(cast)
            wait_routable(first, "failover", key)
            wait_routable(second, "failover", key)
            fresh_table(sim.url)
            # "lighthouse" on slot 0; the tenant on slot 1, the highest, so that when the
            # router drops its engine no other slot changes replica.
            engine_of_next(sim, lambda: ask(first, "failover", key, "lighthouse", "Hi?"))
            victim = engine_of_next(sim, lambda: ask(first, "failover", key, "bakery", "Hi?"))
            survivor = sim.engines[1 - victim]
            with SteadyTraffic(first, "failover", key, "bakery") as traffic:
                wait_until(lambda: len(traffic.sent) >= 10, "traffic under way", 30)
                killed = next(TICKS)
                sim.engines[victim].popen.kill()
                sim.engines[victim].popen.wait(10)
                exited = next(TICKS)
                wait_until(lambda: traffic.answered_since(exited) >= 30, "traffic after", 60)
            sent = list(traffic.sent)
            failed = [s for s in sent if not s.ok]
            running = [s for s in failed if s.started < exited and s.ended > killed]
            assert failed == running, [s.detail for s in failed if s not in running]
            assert unanswered(first, "failover") >= 1  # the path under test was taken

            before = metric_sum(survivor.url, REQUESTS)
            for tenant in ("bakery", "orchard", "foundry", "shipyard"):
                ask(second, "failover", key, tenant, "Still there?")
            wait_until(
                lambda: metric_sum(survivor.url, REQUESTS) >= before + 4, "answered there", 10
            )
            assert unanswered(second, "failover") == 0
    finally:
        for gateway in gateways:
            stop_process(gateway.popen)


def test_a_request_the_killed_engine_was_running_is_not_sent_again(
    cast: Cast, gateway: GatewayProcess, tmp_path: Any
) -> None:
    """2 engines: a long non-streamed chat runs on its engine when that engine is killed. The
    router answers 500 `call_upstream_request_error` (with smg's retries off, its answer tells
    a request that reached the engine from one that did not): the engine may have run it, so
    the gateway answers 503 and does not send it to the other engine."""
    endpoint = create_endpoint(cast, "mid-answer")
    with placed_cluster(2, endpoint, tmp_path) as sim:
        mark_serving(endpoint, sim.url, replicas=2)
        key = inference_key(cast)
        wait_routable(gateway, "mid-answer", key)
        fresh_table(sim.url)
        victim = engine_of_next(sim, lambda: ask(gateway, "mid-answer", key, "orchard", "Hi?"))
        survivor = sim.engines[1 - victim]
        before = metric_sum(survivor.url, REQUESTS)
        answers: list[httpx.Response] = []
        messages = [
            {"role": "system", "content": system_prompt("orchard")},
            {"role": "user", "content": "Tell me everything."},
        ]
        body = {"model": "sim/llama-test", "messages": messages, "max_tokens": 20_000}
        body["ignore_eos"] = True
        request = threading.Thread(
            target=lambda: answers.append(
                httpx.post(
                    f"{gateway.base_url('mid-answer')}/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {key}"},
                    timeout=60,
                )
            )
        )
        request.start()
        engine = sim.engines[victim]
        wait_until(lambda: metric_sum(engine.url, "sglang:num_running_reqs") >= 1, "running", 10)
        engine.popen.kill()
        request.join(60)
        assert [a.status_code for a in answers] == [503], [a.text for a in answers]
        assert metric_sum(survivor.url, REQUESTS) == before
