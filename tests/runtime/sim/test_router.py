"""The simulated engines behind the real smg router, called with the official openai client."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
from openai.types.chat import ChatCompletionMessageParam

from runtime.routing_key import ROUTING_KEY_HEADER, TARGET_WORKER_HEADER, routing_key
from runtime.sim.launcher import SimCluster
from tests.runtime.sim.scrape import metric_sum

REQUESTS = "sglang:num_requests_total"


def client(cluster: SimCluster) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{cluster.url}/v1", api_key="unused", max_retries=0)


def _add_routing_key(request: httpx.Request) -> None:
    key = routing_key(json.loads(request.read() or b"null"))
    if key:
        request.headers[ROUTING_KEY_HEADER] = key


def keyed_client(cluster: SimCluster) -> openai.OpenAI:
    """A client that adds the routing key Plinth's gateway adds to every forwarded request."""
    http = httpx.Client(event_hooks={"request": [_add_routing_key]})
    return openai.OpenAI(
        base_url=f"{cluster.url}/v1", api_key="unused", max_retries=0, http_client=http
    )


def served_by(cluster: SimCluster, ask: Callable[[], None]) -> int:
    """Run ``ask()`` and return the index of the engine whose request count went up."""
    before = [metric_sum(url, REQUESTS) for url in cluster.engine_urls]
    ask()
    after = [metric_sum(url, REQUESTS) for url in cluster.engine_urls]
    grew = [i for i, (a, b) in enumerate(zip(after, before, strict=True)) if a > b]
    assert len(grew) == 1, (before, after)
    return grew[0]


def test_openai_client_streams_and_non_streams_through_smg(
    cache_aware_cluster: SimCluster,
) -> None:
    api = client(cache_aware_cluster)
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "Write a haiku about routers."}
    ]
    full = api.chat.completions.create(
        model=cache_aware_cluster.model,
        messages=messages,
        max_tokens=12,
        seed=5,
    )
    stream = api.chat.completions.create(
        model=cache_aware_cluster.model,
        messages=messages,
        max_tokens=12,
        seed=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert full.choices[0].message.content == text != ""
    usage = chunks[-1].usage
    assert usage is not None and full.usage is not None
    assert usage.prompt_tokens == full.usage.prompt_tokens
    assert usage.completion_tokens == full.usage.completion_tokens
    completion = api.completions.create(
        model=cache_aware_cluster.model, prompt="Once upon a time", max_tokens=5
    )
    assert completion.choices[0].text and completion.usage is not None


def _same_engine_for_one_prefix(cluster: SimCluster, api: openai.OpenAI | None = None) -> set[int]:
    api = api or client(cluster)
    system = "You are the assistant of the Example Observatory's visitor desk. " * 40

    def ask(i: int) -> None:
        api.chat.completions.create(
            model=cluster.model,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": f"Q{i}?"}],
            max_tokens=3,
        )

    return {served_by(cluster, functools.partial(ask, i)) for i in range(6)}


def test_identical_long_prefixes_land_on_one_engine_under_cache_aware(
    cache_aware_cluster: SimCluster,
) -> None:
    assert len(_same_engine_for_one_prefix(cache_aware_cluster)) == 1


def test_identical_long_prefixes_land_on_one_engine_placed_by_key(
    keyed_cluster: SimCluster,
) -> None:
    assert len(_same_engine_for_one_prefix(keyed_cluster, keyed_client(keyed_cluster))) == 1


def test_each_tenant_stays_where_its_key_was_placed(keyed_cluster: SimCluster) -> None:
    # A request naming no replica (the gateway could not reach Redis, or the router refused the
    # slot) goes by its routing key's hash: each tenant keeps one home, concurrently too.
    def body(tenant: int) -> dict[str, object]:
        system = f"You are the assistant of tenant {tenant} of the Example Exchange. " * 30
        messages = [{"role": "system", "content": system}, {"role": "user", "content": "Hi?"}]
        return {"model": keyed_cluster.model, "messages": messages, "max_tokens": 2}

    def home(tenant: int) -> int:
        payload = body(tenant)
        headers = {ROUTING_KEY_HEADER: routing_key(payload) or ""}
        response = httpx.post(
            f"{keyed_cluster.url}/v1/chat/completions", json=payload, headers=headers, timeout=60
        )
        assert response.status_code == 200
        return keyed_cluster.engine_urls.index(response.headers["x-smg-routed-worker-id"])

    with ThreadPoolExecutor(max_workers=8) as pool:
        homes = list(pool.map(home, range(8)))
    assert [home(tenant) for tenant in range(8)] == homes
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(home, [*range(8), *range(8)])) == homes + homes


def test_router_sends_each_request_to_the_replica_the_gateway_named(
    keyed_cluster: SimCluster,
) -> None:
    # The contract gateway.placement relies on: slot i is one replica, a different one for
    # each slot, whatever the routing key; a slot past the last replica is refused (503).
    def served(slot: int, tenant: int) -> tuple[int, str]:
        payload = {
            "model": keyed_cluster.model,
            "messages": [{"role": "user", "content": f"Tenant {tenant} asks: hello?"}],
            "max_tokens": 2,
        }
        headers = {ROUTING_KEY_HEADER: f"tenant-{tenant}", TARGET_WORKER_HEADER: str(slot)}
        response = httpx.post(
            f"{keyed_cluster.url}/v1/chat/completions", json=payload, headers=headers, timeout=60
        )
        return response.status_code, response.headers.get("x-smg-routed-worker-id", "")

    count = len(keyed_cluster.engine_urls)
    homes = {slot: {served(slot, tenant) for tenant in range(4)} for slot in range(count)}
    assert all(len(answers) == 1 for answers in homes.values()), homes
    engines = {answer for answers in homes.values() for status, answer in answers}
    assert {status for answers in homes.values() for status, _ in answers} == {200}
    assert engines == set(keyed_cluster.engine_urls)
    assert served(count, 0)[0] == 503


def test_identical_long_prefixes_land_on_one_engine_under_prefix_hash(
    prefix_hash_cluster: SimCluster,
) -> None:
    # The ring hashes the prompt's head, so one prefix has one home while it is not overloaded.
    assert len(_same_engine_for_one_prefix(prefix_hash_cluster)) == 1


def test_concurrent_requests_keep_their_prefix_engine_with_plinths_router_flags(
    cache_aware_cluster: SimCluster,
) -> None:
    # smg's own defaults divert every 8th request to a warming worker and fall back to load
    # balancing when one engine holds all the in-flight work; Plinth's flags keep the prefix.
    api = client(cache_aware_cluster)
    system = "You are the front desk of the Example Harbour's ferry office. " * 60

    def ask(i: int, max_tokens: int = 200) -> None:
        api.chat.completions.create(
            model=cache_aware_cluster.model,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": f"Q{i}?"}],
            max_tokens=max_tokens,
        )

    home = served_by(cache_aware_cluster, functools.partial(ask, 0, 1))
    before = [metric_sum(url, REQUESTS) for url in cache_aware_cluster.engine_urls]
    with ThreadPoolExecutor(max_workers=32) as pool:
        list(pool.map(ask, range(1, 33)))
    after = [metric_sum(url, REQUESTS) for url in cache_aware_cluster.engine_urls]
    grew = [a - b for a, b in zip(after, before, strict=True)]
    assert grew[home] == 32, grew


def test_requests_alternate_between_engines_under_round_robin(
    round_robin_cluster: SimCluster,
) -> None:
    api = client(round_robin_cluster)
    system = "You are the assistant of the Example Observatory's visitor desk. " * 40

    def ask(i: int) -> None:
        api.chat.completions.create(
            model=round_robin_cluster.model,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": f"Q{i}?"}],
            max_tokens=3,
        )

    order = [served_by(round_robin_cluster, functools.partial(ask, i)) for i in range(6)]
    assert all(a != b for a, b in itertools.pairwise(order))


def test_engine_counters_add_up_to_the_usage_seen_through_the_router(
    round_robin_cluster: SimCluster,
) -> None:
    api = client(round_robin_cluster)
    names = ("sglang:prompt_tokens_total", "sglang:generation_tokens_total")

    def totals() -> list[float]:
        urls = round_robin_cluster.engine_urls
        return [sum(metric_sum(url, name) for url in urls) for name in names]

    before = totals()
    seen = [0, 0]
    for i in range(4):
        response = api.chat.completions.create(
            model=round_robin_cluster.model,
            messages=[{"role": "user", "content": f"count me {i}"}],
            max_tokens=7,
        )
        assert response.usage is not None
        seen[0] += response.usage.prompt_tokens
        seen[1] += response.usage.completion_tokens
    assert [a - b for a, b in zip(totals(), before, strict=True)] == seen
