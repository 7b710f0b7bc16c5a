"""What the HTTP routes share: the serving context, and one request's run through the engine.

A ``RequestRun`` submits a request, yields its updates (applying an injected stall), and on close
aborts it if the caller went away, records its request-level metrics once (and its line in the
``--export-metrics-to-file`` file), and counts it towards an injected crash.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from runtime.sim.args import EngineArgs
from runtime.sim.engine import Engine
from runtime.sim.errors import RequestError
from runtime.sim.faults import FaultInjector
from runtime.sim.lora import LORA_DISABLED, LoraError
from runtime.sim.request import SimRequest, Update
from runtime.sim.request_export import RequestMetricsFile
from runtime.sim.sampling import TokenSource, teacher_forced_logprobs


@dataclass
class ServingContext:
    args: EngineArgs
    engine: Engine
    faults: FaultInjector
    accepting: bool = False  # False while loading and while draining
    active_runs: int = 0
    metrics_file: RequestMetricsFile | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.args.export_metrics_to_file and self.args.export_metrics_to_file_dir:
            self.metrics_file = RequestMetricsFile(self.args.export_metrics_to_file_dir)

    def admit(self, native: bool) -> None:
        """Gate a generation request: not while starting or draining, and maybe a fault."""
        if not self.accepting:
            raise RequestError(
                "The server is not ready or is shutting down.",
                status=503,
                err_type="ServiceUnavailableError",
                native=native,
            )
        limit = self.args.max_queued_requests
        queued = len(self.engine.scheduler.waiting)
        # SGLang ignores the queue limit under PD disaggregation.
        if limit is not None and self.args.disaggregation_mode == "null" and queued >= limit:
            raise RequestError(
                "The request queue is full.",
                status=503,
                err_type="ServiceUnavailableError",
                native=native,
            )
        if self.faults.on_arrival():
            raise RequestError(
                "Internal server error: simulated fault (--sim-error-rate)",
                status=500,
                err_type="InternalServerError",
            )

    def adapter(self, name: str | None, native: bool) -> str | None:
        """The LoRA adapter a request names, refused (400) unless it is loaded; None: base."""
        if name is None:
            return None
        if self.engine.lora is None:
            raise RequestError(LORA_DISABLED, native=native, param="model")
        try:
            return self.engine.lora.resolve(name)
        except LoraError as exc:
            raise RequestError(str(exc), native=native, param="model") from None

    @property
    def context_length(self) -> int:
        return self.engine.plan.context_length

    def check_lengths(self, prompt_tokens: int, max_new_tokens: int | None, native: bool) -> int:
        """Refuse prompts the engine cannot hold; return the effective ``max_new_tokens``."""
        limit = self.context_length
        if prompt_tokens >= limit:
            raise RequestError(
                f"The input ({prompt_tokens} tokens) is longer than the model's context length "
                f"({limit} tokens).",
                native=native,
            )
        if prompt_tokens >= self.engine.pool.capacity:
            raise RequestError(
                f"The input ({prompt_tokens} tokens) does not fit in the KV cache "
                f"({self.engine.pool.capacity} tokens).",
                native=native,
            )
        if max_new_tokens is None:
            return limit - prompt_tokens
        if prompt_tokens + max_new_tokens > limit:
            raise RequestError(
                f"Requested token count exceeds the model's maximum context length of {limit} "
                f"tokens. You requested a total of {prompt_tokens + max_new_tokens} tokens: "
                f"{prompt_tokens} tokens from the input messages and {max_new_tokens} tokens for "
                "the completion. Please reduce the number of tokens in the input messages or the "
                "completion to fit within the limit.",
                native=native,
            )
        return max_new_tokens


def checked_min_new_tokens(value: int | None, max_new_tokens: int, native: bool) -> int:
    """SGLang's check of ``min_new_tokens`` against the effective ``max_new_tokens``."""
    if value is None:
        return 0
    if not 0 <= value <= max_new_tokens:
        raise RequestError(
            f"min_new_tokens must be in [0, max_new_tokens({max_new_tokens})], got {value}.",
            native=native,
        )
    return value


class RequestRun:
    def __init__(self, ctx: ServingContext, req: SimRequest) -> None:
        self.ctx = ctx
        self.req = req
        self.sent_tokens = 0
        self._closed = False
        ctx.active_runs += 1
        ctx.engine.submit(req)

    async def updates(self) -> AsyncIterator[Update]:
        while True:
            update = await self.req.updates.get()
            before = self.sent_tokens
            self.sent_tokens += len(update.token_ids)
            await self.ctx.faults.maybe_stall(before, self.sent_tokens)
            yield update
            if update.finished is not None:
                return

    async def collect(self) -> None:
        async for _ in self.updates():
            pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.ctx.active_runs -= 1
        if self.req.finished is None:
            self.ctx.engine.abort(self.req)
        self.ctx.engine.record_finished(self.req)
        if self.ctx.metrics_file is not None:
            self.ctx.metrics_file.write(self.req.rid, _parameters(self.req), self._meta_info())
        if self.req.finished is not None and self.req.finished.kind != "abort":
            self.ctx.faults.on_finished()

    def _meta_info(self) -> dict[str, Any]:
        req, engine = self.req, self.ctx.engine
        end = req.last_token_at or engine.now()
        return {
            "id": req.rid,
            "finish_reason": req.finished.to_json() if req.finished else None,
            "prompt_tokens": req.prompt_tokens,
            "completion_tokens": req.completion_tokens,
            "cached_tokens": req.cached_tokens or 0,
            "e2e_latency": round(end - req.arrival, 6),
            **meta_timing(req),
            **meta_spec(req),
        }


def _parameters(req: SimRequest) -> dict[str, Any]:
    """The part of SGLang's ``GenerateReqInput`` a record names (prompts are left out)."""
    sampling = {"max_new_tokens": req.params.max_new_tokens, "ignore_eos": req.params.ignore_eos}
    chosen = {"rid": req.rid, "stream": req.stream, "sampling_params": sampling}
    return chosen | ({"lora_path": req.adapter} if req.adapter else {})


def meta_timing(req: SimRequest) -> dict[str, Any]:
    """SGLang's per-request timing stats in ``meta_info`` (metrics on), in simulated seconds:
    ``queue_time`` from arrival to the first forward batch, ``prefill_launch_latency`` from
    there to the end of the prefill (the first token). Their sum is the engine's part of TTFT."""
    entered, first = req.forward_entry_at, req.first_token_at
    if entered is None:
        return {}
    timing = {"queue_time": round(entered - req.arrival, 6)}
    if first is not None:
        timing["prefill_launch_latency"] = round(first - entered, 6)
    return timing


def logprob_entries(
    source: TokenSource, start: int, token_ids: list[int], top: int
) -> list[tuple[int, float, list[tuple[int, float]]]]:
    """(token, its logprob, [(id, logprob) for the top ``top``]) for each new token."""
    rows = []
    for offset, token in enumerate(token_ids):
        own, tops = source.top_logprobs(start + offset, token, max(1, top))
        rows.append((token, own, [(t.token_id, t.logprob) for t in tops]))
    return rows


def input_logprob_entries(
    req: SimRequest, start: int, top: int
) -> tuple[list[list[Any]], list[list[list[Any]] | None]]:
    """SGLang's ``input_token_logprobs`` and ``input_top_logprobs`` from input position ``start``.

    Each token row is ``[logprob, token_id, None]`` (``None`` text: the simulator never decodes
    logprob tokens); the first row's logprob and top list are None, as SGLang pads them.
    """
    rows = teacher_forced_logprobs(
        req.input_ids, start, req.source.noise, max(1, top), req.source.salt
    )
    tokens: list[list[Any]] = []
    tops: list[list[list[Any]] | None] = []
    for token, row in zip(req.input_ids[start:], rows, strict=True):
        if row is None:
            tokens.append([None, token, None])
            tops.append(None)
            continue
        own, candidates = row
        tokens.append([own, token, None])
        tops.append([[c.logprob, c.token_id, None] for c in candidates[:top]])
    return tokens, tops


def meta_spec(req: SimRequest) -> dict[str, Any]:
    if not req.spec_verify_ct:
        return {}
    return {
        "spec_verify_ct": req.spec_verify_ct,
        "spec_accept_length": round(req.completion_tokens / req.spec_verify_ct, 4),
    }
