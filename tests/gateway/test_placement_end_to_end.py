"""The gateway places tenants by count through the real router (``gateway.placement``): behind
smg's consistent_hashing, which obeys the gateway's ``x-smg-target-worker``, tenants arriving one
at a time each get an engine of their own and keep it; a slot the router does not have (the
control plane counts more replicas than the router lists) is refused with 503 and the request
sent again by its key alone; and only a revision routed cache_aware placed by_count without a
P/D split is placed by the gateway (``gateway.loader``)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import redis
from django.conf import settings

from controlplane.crypto import engine_api_key
from deployments import canary_services
from deployments import services as deployment_services
from deployments.models import Deployment
from gateway.loader import load_canaries, load_endpoints
from gateway.placement import pool_id, table_keys
from runtime.launch import cache_aware_args, smg_policy
from runtime.sim.launcher import SimCluster
from runtime.spec import PLINTH_ROUTING
from tests.conftest import Cast
from tests.gateway.conftest import (
    SPEC,
    TIME_SCALE,
    GatewayProcess,
    create_endpoint,
    inference_key,
    mark_serving,
    wait_routable,
)
from tests.sim.scrape import metric_sum
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
REQUESTS = "sglang:num_requests_total"
TENANTS = ("lighthouse", "bakery", "observatory", "shipyard", "orchard", "foundry")


def system_prompt(tenant: str) -> str:
    """A tenant's long system prompt: past the routing key's reach, so it alone names the key."""
    return f"You are the assistant of the {tenant}. Answer briefly and kindly. " * 40


def chat(
    gateway: GatewayProcess, slug: str, key: str, tenant: str, question: str
) -> httpx.Response:
    messages = [
        {"role": "system", "content": system_prompt(tenant)},
        {"role": "user", "content": question},
    ]
    return httpx.post(
        f"{gateway.base_url(slug)}/chat/completions",
        json={"model": "sim/llama-test", "messages": messages, "max_tokens": 2},
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
