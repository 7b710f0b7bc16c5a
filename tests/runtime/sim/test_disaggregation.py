"""P/D disaggregation: a prefill and a decode engine behind ``smg --pd-disaggregation``.

The router sends each request to both engines with the same bootstrap room; the prefill engine
computes the prompt and the first token, its KV moves to the decode engine, which decodes the rest
without prefilling anything. Real processes: two simulated engines and the smg binary.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from runtime.perf.hardware import resolve_gpu
from runtime.perf.kv_transfer import transfer_link
from runtime.sim.args import StartupError, check_engine_args, parse_engine_args
from runtime.sim.launcher import ManagedProcess, free_port, start_engine, start_router
from tests.runtime.sim.conftest import TIME_SCALE
from tests.runtime.sim.scrape import get_json, metric_sum

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def pd_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ManagedProcess]]:
    logs = tmp_path_factory.mktemp("pd")
    bootstrap = free_port()
    common = ["--served-model-name", "pd-model"]
    prefill_args = ["--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port"]
    prefill = start_engine(
        model=MODEL,
        args=[*common, *prefill_args, str(bootstrap)],
        time_scale=TIME_SCALE,
        log_dir=logs,
    )
    decode = start_engine(
        model=MODEL,
        args=[*common, "--disaggregation-mode", "decode"],
        time_scale=TIME_SCALE,
        log_dir=logs,
    )
    router = None
    try:
        router = start_router(
            [],
            policy="round_robin",
            prefill=[(prefill.url, bootstrap)],
            decode=[decode.url],
            log_dir=Path(logs),
        )
        yield {"prefill": prefill, "decode": decode, "router": router}
    finally:
        for proc in (router, prefill, decode):
            if proc is not None:
                proc.stop(timeout=5)


def _computed(url: str) -> float:
    return metric_sum(url, "sglang:realtime_tokens_total", mode="prefill_compute")


def test_decode_engine_prefills_nothing_and_kv_moves(pd_pair: dict[str, ManagedProcess]) -> None:
    api = openai.OpenAI(base_url=f"{pd_pair['router'].url}/v1", api_key="x", max_retries=0)
    prefill, decode = pd_pair["prefill"].url, pd_pair["decode"].url
    generated, transfers = "sglang:generation_tokens_total", "sglang:kv_transfer_latency_ms_count"
    before = {url: metric_sum(url, generated) for url in (prefill, decode)}
    transfers_before = metric_sum(decode, transfers)
    prompt = "Explain prefill and decode disaggregation in a few words. " * 20
    answers = []
    for stream in (False, True):
        if stream:
            chunks = api.completions.create(
                model="pd-model",
                prompt=prompt,
                max_tokens=24,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            answers.append("".join(c.choices[0].text for c in chunks if c.choices))
        else:
            done = api.completions.create(
                model="pd-model", prompt=prompt, max_tokens=24, extra_body={"ignore_eos": True}
            )
            assert done.usage is not None and done.usage.completion_tokens == 24
            answers.append(done.choices[0].text)
    assert answers[0] == answers[1] != ""

    assert _computed(decode) == 0  # the decode engine never prefilled a prompt
    assert _computed(prefill) > 0
    # The prefill engine produced the first token of each request and nothing more.
    assert metric_sum(prefill, generated) - before[prefill] == 2
    assert metric_sum(decode, generated) - before[decode] == 48
    # Two KV transfers, of the whole prompt each, were observed on the decode side.
    assert metric_sum(decode, transfers) - transfers_before == 2
    assert metric_sum(decode, "sglang:kv_transfer_total_mb_sum") > 0
    loads = get_json(f"{decode}/v1/loads?include=disagg")["loads"][0]
    assert loads["disaggregation"]["mode"] == "decode"
    assert loads["disaggregation"]["decode_transfer_queue_reqs"] == 0


def test_chat_turns_through_pd_report_the_prefill_cache(pd_pair: dict[str, ManagedProcess]) -> None:
    """The prefill engine holds the prefix cache; the decode engine reports its hits."""
    api = openai.OpenAI(base_url=f"{pd_pair['router'].url}/v1", api_key="x", max_retries=0)
    messages: list[dict[str, str]] = [{"role": "user", "content": "Tell me about KV caches."}]
    first = api.chat.completions.create(model="pd-model", messages=messages, max_tokens=16)  # type: ignore[arg-type]
    messages += [
        {"role": "assistant", "content": first.choices[0].message.content or ""},
        {"role": "user", "content": "And about routing?"},
    ]
    second = api.chat.completions.create(model="pd-model", messages=messages, max_tokens=16)  # type: ignore[arg-type]
    assert first.usage is not None and second.usage is not None
    details = second.usage.prompt_tokens_details
    assert details is not None
    # The prefill engine computed (and cached) turn one's prompt; the answer was decoded elsewhere.
    assert (details.cached_tokens or 0) >= first.usage.prompt_tokens


def test_the_link_comes_from_the_gpu_and_the_transfer_backend() -> None:
    hopper, blackwell = resolve_gpu("H100-SXM"), resolve_gpu("B200")
    kv = 2e9
    assert transfer_link(blackwell, "mooncake").seconds(kv) < transfer_link(
        hopper, "mooncake"
    ).seconds(kv)
    assert transfer_link(hopper, "mooncake_tcp").seconds(kv) > transfer_link(
        hopper, "nixl"
    ).seconds(kv)
    assert transfer_link(hopper, "fake").seconds(kv) == 0.0
    prefill_fake = ["--model-path", MODEL, "--disaggregation-mode", "prefill"]
    prefill_fake += ["--disaggregation-transfer-backend", "fake"]
    with pytest.raises(StartupError):
        check_engine_args(parse_engine_args(prefill_fake))
