"""OpenAI-compatible ``/v1/completions`` and ``/v1/chat/completions``, in SGLang's shapes.

Chat messages are tokenized as a real chat template does (``Tokenizer.encode_chat``: BOS, then per
message a role-header token, the content's tokens and an end-of-turn token, then the assistant
header), so turn n+1's prompt starts with exactly turn n's prompt plus its answer and the prefix
cache reports both as cached.
Streams are SSE ending in ``data: [DONE]``; with ``stream_options.include_usage`` (or
``--stream-response-default-include-usage``) a last chunk with ``choices: []`` carries the usage.
"""

from __future__ import annotations

import json
import time
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
    logprob_entries,
)
from runtime.sim.request import GenerationParams, SimRequest
from runtime.sim.tokenizer import CHAT_ROLES, Tokenizer

MAX_TOP_LOGPROBS = 20


@dataclass(frozen=True)
class OpenAIRequest:
    chat: bool
    model: str
    prompt_ids: list[int]
    params: GenerationParams
    seed: int | None
    stream: bool
    include_usage: bool
    continuous_usage: bool
    bootstrap: Bootstrap | None = None
    adapter: str | None = None  # LoRA: "<served_name>:<adapter>" in `model`


async def handle_chat(ctx: ServingContext, request: web.Request) -> web.StreamResponse:
    return await _handle(ctx, request, chat=True)


async def handle_completions(ctx: ServingContext, request: web.Request) -> web.StreamResponse:
    return await _handle(ctx, request, chat=False)


async def _handle(ctx: ServingContext, request: web.Request, chat: bool) -> web.StreamResponse:
    try:
        body = await read_json_object(request)
        parsed = parse_request(ctx, body, chat)
        ctx.admit(native=False)
    except RequestError as exc:
        return exc.response()
    prefix = "chatcmpl" if chat else "cmpl"
    req = ctx.engine.new_request(
        parsed.prompt_ids,
        parsed.params,
        stream=parsed.stream,
        seed=parsed.seed,
        adapter=parsed.adapter,
    )
    req.rid = f"{prefix}-{req.rid}"
    req.bootstrap = parsed.bootstrap
    run = RequestRun(ctx, req)
    if parsed.stream:
        return await _stream(ctx, request, run, parsed)
    try:
        await run.collect()
    finally:
        run.close()
    return web.json_response(_full_response(ctx, parsed, req))


# ---- parsing ---------------------------------------------------------------------------------
def parse_request(ctx: ServingContext, body: dict[str, Any], chat: bool) -> OpenAIRequest:
    tokenizer = ctx.engine.tokenizer
    prompt_ids = _chat_prompt(tokenizer, body) if chat else _completion_prompt(tokenizer, body)
    _check_sampling(body)
    max_tokens = optional_int(body, "max_completion_tokens", minimum=0)
    if max_tokens is None:
        max_tokens = optional_int(body, "max_tokens", minimum=0)
    max_new = max(1, ctx.check_lengths(len(prompt_ids), max_tokens, native=False))
    min_new = checked_min_new_tokens(optional_int(body, "min_tokens"), max_new, native=False)
    stream = optional_bool(body, "stream")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise RequestError("stream_options must be an object", param="stream_options")
    default_usage = ctx.args.stream_response_default_include_usage
    model = str(body.get("model") or ctx.args.served_model_name)
    # SGLang reads `base:adapter` and runs the adapter; the base part is not checked.
    adapter = model.split(":", 1)[1] if ":" in model else None
    return OpenAIRequest(
        chat=chat,
        model=model,
        adapter=ctx.adapter(adapter, native=False),
        prompt_ids=prompt_ids,
        params=GenerationParams(
            max_new_tokens=max_new,
            min_new_tokens=min_new,
            ignore_eos=optional_bool(body, "ignore_eos"),
            stop=string_list(body, "stop"),
            stop_token_ids=int_list(body, "stop_token_ids"),
            return_logprob=_top_logprobs(body, chat) is not None,
            top_logprobs_num=_top_logprobs(body, chat) or 0,
            temperature=_temperature(body),
        ),
        seed=optional_int(body, "seed"),
        stream=stream,
        include_usage=bool(options.get("include_usage", default_usage)),
        continuous_usage=bool(options.get("continuous_usage_stats", False)),
        bootstrap=bootstrap_of(body),
    )


def _chat_prompt(tokenizer: Tokenizer, body: dict[str, Any]) -> list[int]:
    messages = body.get("messages")
    if messages is None:
        raise RequestError("messages: Field required", param="messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("Messages cannot be empty.", param="messages")
    return tokenizer.encode_chat([_message(i, m) for i, m in enumerate(messages)])


def _message(index: int, message: Any) -> tuple[str, str]:
    if not isinstance(message, dict):
        raise RequestError(f"messages.{index}: Input should be an object", param="messages")
    role = message.get("role")
    if role not in CHAT_ROLES:
        raise RequestError(
            f"messages.{index}.role: Input should be one of {', '.join(CHAT_ROLES)}",
            param="messages",
        )
    return str(role), _content_text(index, message.get("content"))


def _content_text(index: int, content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise RequestError(
                    f"messages.{index}.content: only text parts are supported by the simulator",
                    param="messages",
                )
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise RequestError(
        f"messages.{index}.content: Input should be a string or a list of parts", param="messages"
    )


def _completion_prompt(tokenizer: Tokenizer, body: dict[str, Any]) -> list[int]:
    prompt = body.get("prompt")
    if prompt is None:
        raise RequestError("prompt: Field required", param="prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str) and prompt:
        return tokenizer.encode(prompt)
    if isinstance(prompt, list) and prompt and all(_is_token(t) for t in prompt):
        return list(prompt)
    raise RequestError(
        "prompt must be a non-empty string or list of token ids (batches are not supported)",
        param="prompt",
    )


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _temperature(body: dict[str, Any]) -> float:
    # SGLang decodes greedily at a temperature under 1e-6, and with top_k 1.
    temperature = optional_float(body, "temperature", 0.0, 2.0)
    if (temperature is not None and temperature < 1e-6) or body.get("top_k") == 1:
        return 0.0
    return 1.0 if temperature is None else temperature


def _check_sampling(body: dict[str, Any]) -> None:
    optional_float(body, "temperature", 0.0, 2.0)
    top_p = optional_float(body, "top_p")
    if top_p is not None and not 0 < top_p <= 1:
        raise RequestError(f"top_p must be in (0, 1], got {top_p}.", param="top_p")
    optional_float(body, "presence_penalty", -2.0, 2.0)
    optional_float(body, "frequency_penalty", -2.0, 2.0)
    n = optional_int(body, "n", minimum=1)
    if n is not None and n > 1:
        raise RequestError("n > 1 is not supported by the simulated engine.", param="n")


def _top_logprobs(body: dict[str, Any], chat: bool) -> int | None:
    """How many alternatives to report per token, or None when logprobs are off."""
    if chat:
        if not optional_bool(body, "logprobs"):
            if body.get("top_logprobs"):
                raise RequestError(
                    "top_logprobs requires logprobs to be true", param="top_logprobs"
                )
            return None
        top = optional_int(body, "top_logprobs", minimum=0) or 0
    else:
        top_or_none = optional_int(body, "logprobs", minimum=0)
        if top_or_none is None:
            return None
        top = top_or_none
    if top > MAX_TOP_LOGPROBS:
        raise RequestError(
            f"top_logprobs must be at most {MAX_TOP_LOGPROBS}.", param="top_logprobs"
        )
    return top


# ---- responses -------------------------------------------------------------------------------
def _usage(ctx: ServingContext, req: SimRequest) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": req.prompt_tokens,
        "completion_tokens": req.completion_tokens,
        "total_tokens": req.prompt_tokens + req.completion_tokens,
        "prompt_tokens_details": None,
    }
    if ctx.args.enable_cache_report:
        usage["prompt_tokens_details"] = {"cached_tokens": req.cached_tokens or 0}
    return usage


def _envelope(parsed: OpenAIRequest, req: SimRequest, chunk: bool) -> dict[str, Any]:
    kind = "chat.completion" if parsed.chat else "text_completion"
    return {
        "id": req.rid,
        "object": f"{kind}.chunk" if chunk and parsed.chat else kind,
        "created": int(time.time()),
        "model": parsed.model,
    }


def _full_response(ctx: ServingContext, parsed: OpenAIRequest, req: SimRequest) -> dict[str, Any]:
    finished = req.finished
    choice: dict[str, Any] = {
        "index": 0,
        "logprobs": _logprobs(ctx, parsed, req, 0, req.output_ids),
        "finish_reason": finished.openai if finished else None,
        "matched_stop": finished.matched if finished else None,
    }
    if parsed.chat:
        choice["message"] = {
            "role": "assistant",
            "content": req.text,
            "reasoning_content": None,
            "tool_calls": None,
        }
    else:
        choice["text"] = req.text
    return {**_envelope(parsed, req, chunk=False), "choices": [choice], "usage": _usage(ctx, req)}


def _logprobs(
    ctx: ServingContext, parsed: OpenAIRequest, req: SimRequest, start: int, ids: list[int]
) -> dict[str, Any] | None:
    if not parsed.params.return_logprob or not ids:
        return None
    piece = ctx.engine.tokenizer.id_to_piece
    rows = logprob_entries(req.source, start, ids, parsed.params.top_logprobs_num)
    top_n = parsed.params.top_logprobs_num
    if parsed.chat:
        return {"content": [_chat_logprob(piece, *row, top_n) for row in rows]}
    return {
        "tokens": [piece(token) for token, _, _ in rows],
        "token_logprobs": [own for _, own, _ in rows],
        "top_logprobs": [{piece(t): lp for t, lp in tops[:top_n]} for *_, tops in rows],
        "text_offset": [],
    }


def _chat_logprob(
    piece: Any, token: int, own: float, tops: list[tuple[int, float]], top_n: int
) -> Any:
    def entry(token_id: int, logprob: float) -> dict[str, Any]:
        text = piece(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    return {**entry(token, own), "top_logprobs": [entry(t, lp) for t, lp in tops[:top_n]]}


async def _stream(
    ctx: ServingContext, request: web.Request, run: RequestRun, parsed: OpenAIRequest
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    req, sent_text = run.req, ""
    received: list[int] = []
    try:
        await response.prepare(request)
        async for update in run.updates():
            if parsed.chat and not received:
                # As SGLang does, the role chunk goes out with the first token, not before.
                await _send(
                    response, _chunk(ctx, parsed, req, {"role": "assistant", "content": ""})
                )
            start = len(received)
            received.extend(update.token_ids)
            text = req.text if update.finished else ctx.engine.tokenizer.decode(received)
            delta, sent_text = text[len(sent_text) :], text
            chunk = _chunk(ctx, parsed, req, delta, update.finished is not None)
            chunk["choices"][0]["logprobs"] = _logprobs(ctx, parsed, req, start, update.token_ids)
            await _send(response, chunk)
        if parsed.include_usage:
            usage_chunk = {**_envelope(parsed, req, chunk=True), "choices": []}
            await _send(response, {**usage_chunk, "usage": _usage(ctx, req)})
        await response.write(b"data: [DONE]\n\n")
    finally:
        run.close()
    return response


def _chunk(
    ctx: ServingContext,
    parsed: OpenAIRequest,
    req: SimRequest,
    delta: str | dict[str, Any],
    last: bool = False,
) -> dict[str, Any]:
    finished = req.finished if last else None
    choice: dict[str, Any] = {
        "index": 0,
        "logprobs": None,
        "finish_reason": finished.openai if finished else None,
        "matched_stop": finished.matched if finished else None,
    }
    if parsed.chat:
        choice["delta"] = delta if isinstance(delta, dict) else {"content": delta}
    else:
        choice["text"] = delta
    chunk = {**_envelope(parsed, req, chunk=True), "choices": [choice]}
    if parsed.continuous_usage:
        chunk["usage"] = _usage(ctx, req)
    return chunk


async def _send(response: web.StreamResponse, payload: dict[str, Any]) -> None:
    await response.write(f"data: {json.dumps(payload)}\n\n".encode())
