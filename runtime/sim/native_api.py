"""SGLang's native ``/generate``: text or input_ids, sampling_params, SSE streaming, logprobs."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from runtime.sim.disagg import Bootstrap, bootstrap_of
from runtime.sim.errors import (
    RequestError,
    int_list,
    optional_bool,
    optional_float,
    optional_int,
    read_json_object,
    string_list,
)
from runtime.sim.generation import (
    RequestRun,
    ServingContext,
    checked_min_new_tokens,
    input_logprob_entries,
    logprob_entries,
    meta_spec,
    meta_timing,
)
from runtime.sim.request import GenerationParams, SimRequest

DEFAULT_MAX_NEW_TOKENS = 128


@dataclass(frozen=True)
class NativeRequest:
    prompts: list[list[int]]
    batched: bool
    max_new_tokens: int
    min_new_tokens: int | None
    stop: tuple[str, ...]
    stop_token_ids: tuple[int, ...]
    ignore_eos: bool
    seed: int | None
    stream: bool
    return_logprob: bool
    top_logprobs_num: int
    rid: str | None
    temperature: float = 1.0
    bootstrap: Bootstrap | None = None
    # Where input logprobs start; -1 (SGLang's default) means the last prompt token only.
    logprob_start_len: int = -1
    adapter: str | None = None  # LoRA: `lora_path`, a loaded adapter's name


async def handle_generate(ctx: ServingContext, request: web.Request) -> web.StreamResponse:
    try:
        parsed = parse_generate(ctx, await read_json_object(request))
        ctx.admit(native=True)
        runs = [_start(ctx, parsed, ids) for ids in parsed.prompts]
    except RequestError as exc:
        return exc.response()
    if parsed.stream:
        return await _stream(ctx, request, runs[0], parsed)
    try:
        await asyncio.gather(*(run.collect() for run in runs))
    finally:
        for run in runs:
            run.close()
    results = [_result(ctx, run.req, run.req.output_ids, 0, parsed, True) for run in runs]
    return web.json_response(results if parsed.batched else results[0])


def parse_generate(ctx: ServingContext, body: dict[str, Any]) -> NativeRequest:
    prompts, batched = _prompts(ctx, body)
    sampling = body.get("sampling_params") or {}
    if not isinstance(sampling, dict):
        raise RequestError("sampling_params must be an object (one per request)", native=True)
    _check_sampling(sampling)
    stream = optional_bool(body, "stream")
    if stream and batched:
        raise RequestError("Streaming is not supported for batched requests.", native=True)
    rid = body.get("rid")
    return NativeRequest(
        prompts=prompts,
        batched=batched,
        max_new_tokens=_max_new_tokens(sampling),
        min_new_tokens=optional_int(sampling, "min_new_tokens"),
        stop=string_list(sampling, "stop"),
        stop_token_ids=int_list(sampling, "stop_token_ids"),
        ignore_eos=optional_bool(sampling, "ignore_eos"),
        seed=optional_int(sampling, "sampling_seed"),
        stream=stream,
        return_logprob=optional_bool(body, "return_logprob"),
        top_logprobs_num=optional_int(body, "top_logprobs_num", minimum=0) or 0,
        rid=rid if isinstance(rid, str) else None,
        bootstrap=bootstrap_of(body),
        logprob_start_len=_logprob_start_len(body, prompts),
        temperature=_temperature(sampling),
        adapter=ctx.adapter(_lora_path(body), native=True),
    )


def _lora_path(body: dict[str, Any]) -> str | None:
    """SGLang's ``lora_path``: the name of a loaded adapter (one for the whole request)."""
    value = body.get("lora_path")
    if isinstance(value, list):  # a batch's per-prompt list: the simulator takes one adapter
        names = {v for v in value if v is not None}
        if len(names) > 1:
            raise RequestError("one lora_path per request in the simulated engine", native=True)
        value = next(iter(names), None)
    if value is not None and not isinstance(value, str):
        raise RequestError("lora_path must be a string", native=True)
    return value or None


def _temperature(sampling: dict[str, Any]) -> float:
    # SGLang decodes greedily at a temperature under 1e-6, and with top_k 1.
    temperature = optional_float(sampling, "temperature")
    if (temperature is not None and temperature < 1e-6) or sampling.get("top_k") == 1:
        return 0.0
    return 1.0 if temperature is None else temperature


def _logprob_start_len(body: dict[str, Any], prompts: list[list[int]]) -> int:
    value = optional_int(body, "logprob_start_len")
    if value is None or value == -1:
        return -1
    if value < 0:
        raise RequestError(f"logprob_start_len must be -1 or at least 0, got {value}.", native=True)
    shortest = min(len(ids) for ids in prompts)
    if value >= shortest:
        raise RequestError(
            f"logprob_start_len ({value}) is greater than or equal to the input length "
            f"({shortest}).",
            native=True,
        )
    return value


def _prompts(ctx: ServingContext, body: dict[str, Any]) -> tuple[list[list[int]], bool]:
    text, input_ids = body.get("text"), body.get("input_ids")
    if text is None and input_ids is None:
        raise RequestError(
            "Either text, input_ids or input_embeds should be provided.", native=True
        )
    if text is not None and input_ids is not None:
        raise RequestError(
            "Only one of text, input_ids or input_embeds should be provided.", native=True
        )
    tokenizer = ctx.engine.tokenizer
    if isinstance(text, str) and text:
        return [tokenizer.encode(text)], False
    if isinstance(text, list) and text and all(isinstance(t, str) and t for t in text):
        return [tokenizer.encode(t) for t in text], True
    if isinstance(input_ids, list) and _is_ids(input_ids):
        return [list(input_ids)], False
    if isinstance(input_ids, list) and input_ids and all(_is_ids(i) for i in input_ids):
        return [list(i) for i in input_ids], True
    raise RequestError(
        "text must be a non-empty string or list of strings; input_ids a non-empty list of "
        "token ids or a list of such lists",
        native=True,
    )


def _is_ids(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)
    )


def _check_sampling(sampling: dict[str, Any]) -> None:
    temperature = optional_float(sampling, "temperature")
    if temperature is not None and temperature < 0:
        raise RequestError(f"temperature must be non-negative, got {temperature}.", native=True)
    top_p = optional_float(sampling, "top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise RequestError(f"top_p must be in (0, 1], got {top_p}.", native=True)
    n = optional_int(sampling, "n", minimum=1)
    if n is not None and n > 1:
        raise RequestError("n > 1 is not supported by the simulated engine.", native=True)


def _max_new_tokens(sampling: dict[str, Any]) -> int:
    value = optional_int(sampling, "max_new_tokens")
    if value is None:
        return DEFAULT_MAX_NEW_TOKENS
    if value < 0:
        raise RequestError(f"max_new_tokens must be at least 0, got {value}.", native=True)
    return value


def _start(ctx: ServingContext, parsed: NativeRequest, ids: list[int]) -> RequestRun:
    # The simulator always samples the token that ends prefill, so 0 new tokens behaves as 1.
    max_new = max(1, ctx.check_lengths(len(ids), parsed.max_new_tokens, native=True))
    params = GenerationParams(
        max_new_tokens=max_new,
        min_new_tokens=checked_min_new_tokens(parsed.min_new_tokens, max_new, native=True),
        ignore_eos=parsed.ignore_eos,
        stop=parsed.stop,
        stop_token_ids=parsed.stop_token_ids,
        return_logprob=parsed.return_logprob,
        top_logprobs_num=parsed.top_logprobs_num,
        temperature=parsed.temperature,
    )
    rid = None if parsed.batched else parsed.rid
    req = ctx.engine.new_request(
        ids, params, stream=parsed.stream, seed=parsed.seed, rid=rid, adapter=parsed.adapter
    )
    req.bootstrap = parsed.bootstrap
    return RequestRun(ctx, req)


async def _stream(
    ctx: ServingContext, request: web.Request, run: RequestRun, parsed: NativeRequest
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    incremental = ctx.args.incremental_streaming_output
    received: list[int] = []
    sent_text = ""
    try:
        await response.prepare(request)
        async for update in run.updates():
            start = len(received)
            received.extend(update.token_ids)
            final = update.finished is not None
            if incremental:
                chunk = _result(ctx, run.req, update.token_ids, start, parsed, final)
                text = _text_of(ctx, run.req, received, final)
                chunk["text"], sent_text = text[len(sent_text) :], text
            else:
                chunk = _result(ctx, run.req, received, 0, parsed, final)
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
    finally:
        run.close()
    return response


def _text_of(ctx: ServingContext, req: SimRequest, ids: list[int], final: bool) -> str:
    return req.text if final else ctx.engine.tokenizer.decode(ids)


def _result(
    ctx: ServingContext,
    req: SimRequest,
    ids: list[int],
    start: int,
    parsed: NativeRequest,
    final: bool,
) -> dict[str, Any]:
    """One response object; ``ids`` are the output tokens it reports, from position ``start``."""
    meta: dict[str, Any] = {
        "id": req.rid,
        "finish_reason": req.finished.to_json() if final and req.finished else None,
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": len(req.output_ids) if final else start + len(ids),
        "cached_tokens": req.cached_tokens or 0,
        "weight_version": "default",
        "total_retractions": req.retractions,
    }
    if final:
        end = req.last_token_at or ctx.engine.now()
        meta["e2e_latency"] = round(end - req.arrival, 6)
        if ctx.args.enable_metrics:
            meta.update(meta_timing(req))
    meta.update(meta_spec(req))
    if parsed.return_logprob:
        meta.update(_logprobs(req, start, ids, parsed))
        # Input logprobs are about the prompt: sent with the first chunk (or every cumulative one).
        if start == 0:
            meta.update(_input_logprobs(req, parsed))
    text = _text_of(ctx, req, ids, final)
    return {"text": text, "output_ids": list(ids), "meta_info": meta}


def _logprobs(req: SimRequest, start: int, ids: list[int], parsed: NativeRequest) -> dict[str, Any]:
    rows = logprob_entries(req.source, start, ids, parsed.top_logprobs_num)
    return {
        "input_token_logprobs": [],
        "output_token_logprobs": [[own, token, None] for token, own, _ in rows],
        "input_top_logprobs": [],
        "output_top_logprobs": [
            [[lp, tid, None] for tid, lp in tops[: parsed.top_logprobs_num]] for *_, tops in rows
        ]
        if parsed.top_logprobs_num
        else [],
    }


def _input_logprobs(req: SimRequest, parsed: NativeRequest) -> dict[str, Any]:
    """Teacher-forced logprobs of the prompt from ``logprob_start_len`` (SGLang's shape)."""
    start = parsed.logprob_start_len
    if start == -1:
        start = len(req.input_ids) - 1
    tokens, tops = input_logprob_entries(req, start, parsed.top_logprobs_num)
    return {
        "input_token_logprobs": tokens,
        "input_top_logprobs": tops if parsed.top_logprobs_num else [],
    }
