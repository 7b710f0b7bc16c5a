"""The HTTP surface of one simulated engine process, as SGLang 0.5.23 shapes it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from runtime.sim.launcher import ManagedProcess
from runtime.sim.tokenizer import Tokenizer
from tests.runtime.sim.scrape import get_json, metric_sum


def post(engine: ManagedProcess, path: str, body: Any) -> httpx.Response:
    return httpx.post(f"{engine.url}{path}", json=body, timeout=30)


def sse_events(engine: ManagedProcess, path: str, body: dict[str, Any]) -> list[Any]:
    """The decoded ``data:`` payloads of a stream, with the final ``[DONE]`` kept as a string."""
    events: list[Any] = []
    with httpx.stream("POST", f"{engine.url}{path}", json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                data = line[len("data: ") :]
                events.append(data if data == "[DONE]" else json.loads(data))
    return events


def chat(engine: ManagedProcess, content: str, **extra: Any) -> dict[str, Any]:
    body = {"model": "sim", "messages": [{"role": "user", "content": content}], **extra}
    response = post(engine, "/v1/chat/completions", body)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_generate_answers_text_ids_and_meta_info(sim_engine: ManagedProcess) -> None:
    body = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 8}}
    result = post(sim_engine, "/generate", body).json()
    meta = result["meta_info"]
    assert isinstance(result["text"], str) and result["output_ids"]
    prompt_tokens = len(Tokenizer().encode(body["text"]))  # type: ignore[arg-type]
    assert meta["prompt_tokens"] == prompt_tokens and meta["completion_tokens"] == len(
        result["output_ids"]
    )
    assert meta["finish_reason"]["type"] in ("length", "stop")
    assert {"id", "cached_tokens", "e2e_latency", "weight_version"} <= meta.keys()


def test_generate_accepts_input_ids_and_returns_top_logprobs(sim_engine: ManagedProcess) -> None:
    body = {
        "input_ids": [11, 22, 33, 44],
        "sampling_params": {"max_new_tokens": 4, "ignore_eos": True, "temperature": 0},
        "return_logprob": True,
        "top_logprobs_num": 3,
    }
    meta = post(sim_engine, "/generate", body).json()["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 4}
    assert len(meta["output_token_logprobs"]) == 4
    assert all(len(top) == 3 for top in meta["output_top_logprobs"])
    logprob, token_id, _ = meta["output_token_logprobs"][0]
    assert logprob < 0 and meta["output_top_logprobs"][0][0][1] == token_id


def test_generate_streams_cumulative_chunks_then_done(sim_engine: ManagedProcess) -> None:
    body = {"text": "Count with me:", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}}
    events = sse_events(sim_engine, "/generate", {**body, "stream": True})
    chunks = events[:-1]
    assert events[-1] == "[DONE]"
    assert [len(c["output_ids"]) for c in chunks] == [1, 2, 3, 4, 5]
    assert chunks[-1]["text"].startswith(chunks[-2]["text"])
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert post(sim_engine, "/generate", body).json()["text"] == chunks[-1]["text"]


def test_same_seed_and_prompt_give_the_same_answer(sim_engine: ManagedProcess) -> None:
    def answer(seed: int) -> str:
        response = chat(sim_engine, "Tell me a story", max_tokens=12, seed=seed)
        return str(response["choices"][0]["message"]["content"])

    assert answer(7) == answer(7)
    assert answer(7) != answer(8)


def test_stop_strings_end_the_answer_before_the_match(sim_engine: ManagedProcess) -> None:
    full = chat(sim_engine, "List some words", max_tokens=10, seed=3, ignore_eos=True)
    words = full["choices"][0]["message"]["content"].split(" ")
    stopped = chat(sim_engine, "List some words", max_tokens=10, seed=3, stop=[f" {words[3]}"])
    choice = stopped["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["matched_stop"] == f" {words[3]}"
    assert choice["message"]["content"] == " ".join(words[:3])


def test_cached_tokens_grow_on_a_repeated_prefix_and_reset_after_flush(
    sim_engine: ManagedProcess,
) -> None:
    prefix = "You are the support bot of a company that sells telescopes. " * 30
    first = chat(sim_engine, prefix + "Question one?", max_tokens=4)["usage"]
    second = chat(sim_engine, prefix + "Question two?", max_tokens=4)["usage"]
    assert first["prompt_tokens_details"]["cached_tokens"] < 5  # the chat template's first tokens
    assert second["prompt_tokens_details"]["cached_tokens"] > 0.9 * first["prompt_tokens"]
    assert httpx.post(f"{sim_engine.url}/flush_cache").status_code == 200
    third = chat(sim_engine, prefix + "Question two?", max_tokens=4)["usage"]
    assert third["prompt_tokens_details"]["cached_tokens"] == 0


def test_a_second_chat_turn_caches_the_first_turns_prompt_and_answer(
    sim_engine: ManagedProcess,
) -> None:
    messages = [
        {"role": "system", "content": "You answer about rivers."},
        {"role": "user", "content": "Name one long river, please."},
    ]
    body = {"model": "sim", "messages": messages, "max_tokens": 20, "seed": 3}
    first = post(sim_engine, "/v1/chat/completions", body).json()
    messages += [
        {"role": "assistant", "content": first["choices"][0]["message"]["content"]},
        {"role": "user", "content": "And a short one?"},
    ]
    second = post(sim_engine, "/v1/chat/completions", {**body, "messages": messages}).json()
    usage = first["usage"]
    # Everything the engine computed for turn one is a prefix of turn two, as real templates give.
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == usage["prompt_tokens"] + usage["completion_tokens"]


def test_metric_counters_equal_the_usage_clients_saw(sim_engine: ManagedProcess) -> None:
    names: tuple[str, ...] = ("sglang:prompt_tokens_total", "sglang:generation_tokens_total")
    names += ("sglang:num_requests_total", "sglang:cached_tokens_total")
    before = {n: metric_sum(sim_engine.url, n) for n in names}
    usages = [
        chat(sim_engine, f"metrics question {i}" * 5, max_tokens=6)["usage"] for i in range(3)
    ]
    stream = sse_events(
        sim_engine,
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "metrics question 0" * 5}],
            "max_tokens": 6,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    usages.append(stream[-2]["usage"])
    delta = {n: metric_sum(sim_engine.url, n) - before[n] for n in names}
    assert delta["sglang:prompt_tokens_total"] == sum(u["prompt_tokens"] for u in usages)
    assert delta["sglang:generation_tokens_total"] == sum(u["completion_tokens"] for u in usages)
    assert delta["sglang:num_requests_total"] == 4
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    assert delta["sglang:cached_tokens_total"] == cached


def test_metrics_carry_sglang_names_and_labels(sim_engine: ManagedProcess) -> None:
    # Latency histograms appear with their first observation: one request, whatever ran before.
    chat(sim_engine, "Name a colour.")
    text = httpx.get(f"{sim_engine.url}/metrics").text
    for name in (
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        "sglang:token_usage",
        "sglang:cache_hit_rate",
        "sglang:gen_throughput",
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:inter_token_latency_seconds_bucket",
        "sglang:e2e_request_latency_seconds_bucket",
        "sglang:max_total_num_tokens",
        "sglang:http_requests_total",
    ):
        assert name in text, name
    assert 'tp_rank="0"' in text and 'engine_type="unified"' in text


def test_min_tokens_hold_the_end_back_and_ignore_eos_answers_the_full_length(
    sim_engine: ManagedProcess,
) -> None:
    """As SGLang: ``min_tokens`` (``min_new_tokens`` natively) lets no EOS end an answer before
    that many tokens; ``ignore_eos`` lets none end it, so it runs to ``max_tokens``."""

    def answer(seed: int, **extra: Any) -> dict[str, Any]:
        body = chat(sim_engine, "Say something short", max_tokens=40, seed=seed, **extra)
        return {**body["choices"][0], **body["usage"]}

    seed = next(s for s in range(100) if answer(s)["completion_tokens"] < 20)  # ends early
    short = answer(seed)
    held = answer(seed, min_tokens=30)
    exact = answer(seed, ignore_eos=True)
    assert short["finish_reason"] == held["finish_reason"] == "stop"
    assert 30 < held["completion_tokens"] <= 40
    assert held["message"]["content"].startswith(short["message"]["content"])
    assert exact["finish_reason"] == "length" and exact["completion_tokens"] == 40

    def generated(seed: int, **extra: Any) -> int:
        sampling = {"max_new_tokens": 40, "sampling_seed": seed, **extra}
        body = {"text": "Say something short", "sampling_params": sampling}
        return int(post(sim_engine, "/generate", body).json()["meta_info"]["completion_tokens"])

    seed = next(s for s in range(100) if generated(s) < 20)
    assert generated(seed, min_new_tokens=30) > 30


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("/v1/chat/completions", {"model": "sim"}, "messages"),
        ("/v1/chat/completions", {"messages": []}, "Messages cannot be empty"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "temperature": -1},
            "temperature",
        ),
        ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, "role"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "min_tokens": 8},
            "min_new_tokens must be in [0, max_new_tokens(4)], got 8.",
        ),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 10**9}, "maximum context length"),
        ("/v1/completions", {"prompt": "hi", "n": 3}, "n > 1"),
    ],
)
def test_malformed_openai_requests_get_sglang_shaped_400s(
    sim_engine: ManagedProcess, path: str, body: dict[str, Any], fragment: str
) -> None:
    response = post(sim_engine, path, body)
    error = response.json()
    assert response.status_code == 400
    assert error["object"] == "error" and error["type"] == "BadRequestError"
    assert error["code"] == 400 and fragment in error["message"]


def test_malformed_native_requests_get_sglang_shaped_400s(sim_engine: ManagedProcess) -> None:
    neither = post(sim_engine, "/generate", {"sampling_params": {}})
    both = post(sim_engine, "/generate", {"text": "a", "input_ids": [1]})
    not_json = httpx.post(f"{sim_engine.url}/generate", content=b"{oops")
    assert neither.status_code == both.status_code == not_json.status_code == 400
    assert "Either text, input_ids" in neither.json()["error"]["message"]
    assert "Only one of text" in both.json()["error"]["message"]
    assert not_json.json()["object"] == "error"


def test_info_routes_describe_the_model_and_server(sim_engine: ManagedProcess) -> None:
    model_info = get_json(f"{sim_engine.url}/model_info")
    assert model_info == get_json(f"{sim_engine.url}/get_model_info")
    assert model_info["is_generation"] is True and model_info["architectures"]
    server_info = get_json(f"{sim_engine.url}/server_info")
    assert server_info["max_total_num_tokens"] > 0 and server_info["version"] == "0.5.23"
    assert server_info["simulated"] is True and server_info["tp_size"] == 1
    assert server_info["sim_clock"]["mode"] == "realtime"
    assert server_info["sim_clock"]["simulated_seconds"] > 0
    models = get_json(f"{sim_engine.url}/v1/models")
    assert models["data"][0]["id"] == model_info["served_model_name"]
    assert models["data"][0]["owned_by"] == "sglang"


def test_loads_answers_the_per_rank_snapshot_smg_polls(sim_engine: ManagedProcess) -> None:
    core = get_json(f"{sim_engine.url}/v1/loads?include=core")
    load = core["loads"][0]
    assert {"timestamp", "version", "accelerator", "num_accelerators"} <= core.keys()
    assert {"num_running_reqs", "num_waiting_reqs", "token_usage", "num_used_tokens"} <= load.keys()
    assert "memory" not in load
    assert "memory" in get_json(f"{sim_engine.url}/v1/loads")["loads"][0]
    assert httpx.get(f"{sim_engine.url}/v1/loads?include=bogus").status_code == 400


def test_an_answer_whose_end_is_its_last_allowed_token_ends_by_length(
    sim_engine: ManagedProcess,
) -> None:
    """As SGLang's ``Req.check_finished``: the length limit is checked before the end token, so
    an answer whose natural end falls on its ``max_tokens``-th token reports ``length``."""

    def answer(seed: int, max_tokens: int) -> dict[str, Any]:
        body = chat(sim_engine, "Say something short", max_tokens=max_tokens, seed=seed)
        return {**body["choices"][0], **body["usage"]}

    seed = next(s for s in range(100) if answer(s, 40)["completion_tokens"] < 20)
    natural = answer(seed, 40)
    assert natural["finish_reason"] == "stop"
    at_limit = answer(seed, natural["completion_tokens"])
    assert at_limit["completion_tokens"] == natural["completion_tokens"]
    assert at_limit["finish_reason"] == "length"
    assert at_limit["message"]["content"].startswith(natural["message"]["content"])
