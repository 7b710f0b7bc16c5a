"""The official ``openai`` client, with only ``base_url`` and ``api_key``, through the gateway."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.gateway.conftest import (
    create_endpoint,
    flushed_usage,
    inference_key,
    mark_serving,
    wait_routable,
)
from tests.runtime.sim.scrape import metric_sum

pytestmark = pytest.mark.django_db(transaction=True)
MODEL = "sim/llama-test"
# SGLang's sampling option: generate exactly max_tokens, so counts are known in advance.
EXACT = {"ignore_eos": True}


def engine_tokens(cluster, name: str) -> float:
    return sum(metric_sum(url, f"sglang:{name}") for url in cluster.engine_urls)


@pytest.fixture
def client(cast, sim_cluster, gateway):
    endpoint = create_endpoint(cast, "chat")
    mark_serving(endpoint, sim_cluster.url)
    key = inference_key(cast)
    wait_routable(gateway, "chat", key)
    return openai.OpenAI(base_url=gateway.base_url("chat"), api_key=key)


def test_non_streaming_chat_answers_with_the_engines_usage_and_records_it(client):
    answer = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Say hello"}],
        max_tokens=12,
        extra_body=EXACT,
    )
    assert answer.choices[0].message.content
    assert answer.usage.completion_tokens == 12

    record = flushed_usage("chat", requests=1)
    assert record.requests == 1
    assert record.prompt_tokens == answer.usage.prompt_tokens
    assert record.completion_tokens == answer.usage.completion_tokens


def test_streaming_chat_relays_every_token_and_keeps_the_usage_chunk_it_asked_for(client):
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Count to ten"}],
        max_tokens=10,
        extra_body=EXACT,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(content) == 10
    assert len(usage) == 1 and usage[0].completion_tokens == 10

    record = flushed_usage("chat", requests=1)
    assert (record.prompt_tokens, record.completion_tokens) == (
        usage[0].prompt_tokens,
        usage[0].completion_tokens,
    )


def test_streaming_without_include_usage_hides_the_usage_chunk_but_still_meters(
    client, sim_cluster
):
    prompt_before = engine_tokens(sim_cluster, "prompt_tokens_total")
    generated_before = engine_tokens(sim_cluster, "generation_tokens_total")
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Tell a story"}],
        max_tokens=7,
        stream=True,
        extra_body=EXACT,
    )
    chunks = list(stream)
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)  # no usage-only chunk (choices: []) reached the client

    record = flushed_usage("chat", requests=1)
    assert record.completion_tokens == 7
    assert (
        record.completion_tokens
        == engine_tokens(sim_cluster, "generation_tokens_total") - generated_before
    )
    assert record.prompt_tokens == engine_tokens(sim_cluster, "prompt_tokens_total") - prompt_before


def test_legacy_completions_stream_through_the_gateway(client):
    stream = client.completions.create(model=MODEL, prompt="Once upon", max_tokens=5, stream=True)
    text = "".join(c.choices[0].text for c in stream if c.choices)
    assert text

    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_sglangs_native_generate_is_relayed_and_metered(cast, sim_cluster, gateway):
    mark_serving(create_endpoint(cast, "native"), sim_cluster.url)
    key = inference_key(cast)
    wait_routable(gateway, "native", key)
    url = f"{gateway.url}/endpoints/native/generate"
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
    headers = {"Authorization": f"Bearer {key}"}

    whole = httpx.post(url, json=body, headers=headers).json()
    with httpx.stream("POST", url, json={**body, "stream": True}, headers=headers) as streamed:
        events = [line for line in streamed.iter_lines() if line.startswith("data: {")]

    assert whole["meta_info"]["completion_tokens"] == 4
    assert len(events) == 4
    record = flushed_usage("native", requests=2)
    assert record.completion_tokens == 8
    assert record.prompt_tokens == 2 * whole["meta_info"]["prompt_tokens"]
