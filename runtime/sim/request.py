"""One generation request inside the simulated engine, and the updates it streams to its caller."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from runtime.sim.disagg import Bootstrap
from runtime.sim.radix import RadixNode
from runtime.sim.sampling import TokenSource


@dataclass(frozen=True)
class GenerationParams:
    max_new_tokens: int = 128
    # SGLang's ``min_new_tokens`` (``min_tokens`` on the OpenAI routes): no EOS or stop token
    # ends the answer before this many tokens; ``ignore_eos``: none ends it at all.
    min_new_tokens: int = 0
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    return_logprob: bool = False
    top_logprobs_num: int = 0
    temperature: float = 1.0  # SGLang's default; 0 is greedy


@dataclass(frozen=True)
class FinishReason:
    """SGLang's ``meta_info.finish_reason``: ``{"type": "length", "length": N}`` and friends."""

    kind: str  # "stop" | "length" | "abort"
    matched: int | str | None = None
    length: int | None = None
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"type": self.kind}
        if self.kind == "length":
            body["length"] = self.length
        elif self.kind == "stop":
            body["matched"] = self.matched
        else:
            body["message"] = self.message
        return body

    @property
    def openai(self) -> str:
        return "length" if self.kind == "length" else "stop" if self.kind == "stop" else "abort"


@dataclass
class Update:
    """New output since the last update; ``finished`` is set on the last one."""

    token_ids: list[int]
    finished: FinishReason | None = None


@dataclass(eq=False)
class SimRequest:
    rid: str
    input_ids: list[int]
    params: GenerationParams
    source: TokenSource
    stream: bool = False
    adapter: str | None = None  # the LoRA adapter it runs with (None: the base model)
    arrival: float = field(default_factory=time.monotonic)
    updates: asyncio.Queue[Update] = field(default_factory=asyncio.Queue)
    # Generated so far; ``text`` is the visible text (EOS renders empty, stop strings trimmed).
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    finished: FinishReason | None = None
    # KV state: tokens of ``fill_ids`` computed so far, the locked cached prefix, private KV slots.
    fill_ids: list[int] = field(default_factory=list)
    prefilled: int = 0
    locked_len: int = 0
    node: RadixNode | None = None
    private_tokens: int = 0
    cached_tokens: int | None = None
    # Of cached_tokens, those HiCache loaded back from the host tier / prefetched from storage.
    cached_host: int = 0
    cached_storage: int = 0
    # HiCache's storage prefetch: when the pages it reads for this request are in host memory,
    # and how many tokens they hold.
    prefetch_until: float | None = None
    prefetched_storage: int = 0
    retractions: int = 0
    pending_stream_tokens: list[int] = field(default_factory=list)
    # Timings (simulated seconds) and speculative counts, for meta_info and metrics.
    # forward_entry_at: when its first forward batch (prefill) started, SGLang's forward entry.
    forward_entry_at: float | None = None
    admitted_at: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    spec_verify_ct: int = 0
    # P/D disaggregation: where the KV comes from (decode) or goes to (prefill).
    bootstrap: Bootstrap | None = None
    kv_published: bool = False

    def __post_init__(self) -> None:
        if not self.fill_ids:
            self.fill_ids = self.keyed(self.input_ids)

    def keyed(self, ids: list[int]) -> list[int]:
        """``ids`` as the prefix cache keys them: an adapter's KV is its own (its projections
        differ), so as SGLang keys its radix tree by LoRA id, an adapter's tokens are moved
        into a range of their own, by its salt; the base model's stay as they are."""
        offset = self.source.salt << 32  # token ids stay below 2^32
        return [token + offset for token in ids] if offset else list(ids)

    @property
    def prompt_tokens(self) -> int:
        return len(self.input_ids)

    @property
    def completion_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def remaining_tokens(self) -> int:
        return max(0, self.params.max_new_tokens - len(self.output_ids))
