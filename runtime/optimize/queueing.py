"""The queueing model: what one engine shape carries under one traffic profile within SLOs.

Decode runs at the concurrency Little's law gives, prefill steals engine time in an aggregated
engine (its chunks lengthen the inter-token gaps they ride along), and queueing in front of
prefill follows an M/D/1 wait. ``runtime.capacity`` asks the same model of a running spec.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from runtime.memory import default_chunked_prefill, rank_chunk
from runtime.optimize.shapes import Shape
from runtime.optimize.types import Slo, Traffic
from runtime.perf.lora import expected_distinct
from runtime.perf.step import StepWork

P90_EXP = math.log(10)  # p90 of an exponential wait, in means
MAX_PREFILL_UTIL = 0.9  # a queue run hotter than this has no stable p90
MAX_RATE_PER_REPLICA = 1e4
# A prefill pool (P/D) is budgeted this share of the TTFT target: the KV transfer and the decode
# pool's first step take the rest. The optimizer and the autoscaler's capacity model both use it.
PREFILL_TTFT_SHARE = 0.8


@dataclass(frozen=True)
class Load:
    """One replica (or pool member) at one arrival rate."""

    ttft: float
    itl: float
    running: float  # decoding sequences
    ok: bool
    itl_mean: float = 0.0


class EngineLoad:
    """Per-request costs of one shape under one traffic profile."""

    def __init__(self, shape: Shape, traffic: Traffic, cached: float) -> None:
        self.shape, self.traffic = shape, traffic
        prompt = traffic.input_tokens
        dp = shape.attn_dp
        # History is cached only while the replica's KV pool holds it (`load` bounds it); the
        # shared prefix only as far as the tiers hold its working set (`prefix_reach`).
        shared = min(cached, traffic.prefix_share)
        gpu_reach, reach = prefix_reach(traffic, shape)
        self.prefix_cached = shared * reach
        self.prefix_host = shared * (reach - gpu_reach)  # loaded back from HiCache's host tier
        self.history_cached = max(0.0, cached - shared)
        self.prefill_latency, self.prefill_s, self.chunk_s = self._prefill(
            self.prefix_cached + self.history_cached, self.prefix_host
        )
        self.context = prompt + traffic.output_tokens / 2
        spec = shape.spec
        self.accept = spec.accept_length if spec is not None else 1.0
        # A p90 gap is a step over the accept length of a bad step, not over the mean.
        self.accept_p90 = spec.accept_length_quantile(0.1) if spec is not None else 1
        self.verify = spec.shape.draft_tokens if spec is not None else 1
        self.kv_limit = shape.kv_tokens / (prompt + traffic.output_tokens)
        # SGLang's default under speculation; each attention-DP rank schedules its own batch.
        self.running_cap = (48 if spec is not None else 1024) * dp
        # Step times by batch size: the rate search asks for the same few batches many times.
        self._decode_steps: dict[int, float] = {}

    def _prefill(self, cached: float, from_host: float = 0.0) -> tuple[float, float, float]:
        """(TTFT's prefill step, engine seconds per request, a chunk's step) at this cache hit,
        of which ``from_host`` (a share of the prompt) HiCache loads back from host memory."""
        step, prompt = self.shape.step, self.traffic.input_tokens
        new = max(1, round(prompt * (1 - cached)))
        # Attention-DP ranks prefill their own prompts side by side (the experts see them all):
        # a prompt waits for a step of one prompt per rank, and costs the engine a rank's share.
        dp = self.shape.attn_dp
        latency = step.step_seconds(
            StepWork(
                prefill_tokens=new * dp,
                prefill_pairs=dp * new * (prompt - new / 2),
                lora_adapters=self._adapters(dp),
            )
        )
        # Loads from host run beside the compute, layer by layer (runtime.perf.kv_tiers).
        latency = max(latency, self._load_back_s(prompt * from_host))
        # A chunk that rides along with decode steps lengthens those gaps: the whole prompt, or
        # SGLang's default chunk of it (sized from GPU memory, divided among the attention-DP
        # ranks, each prefilling its own chunk in the same step) when the prompt is longer.
        chunk = rank_chunk(default_chunked_prefill(self.shape.gpu.memory_gib), dp)
        chunk_s = latency
        if new > chunk:
            chunk_s = step.step_seconds(
                StepWork(
                    prefill_tokens=chunk * dp,
                    prefill_pairs=dp * chunk * (prompt - new + chunk / 2),
                    lora_adapters=self._adapters(dp),
                )
            )
        return latency, latency / dp, chunk_s

    def _adapters(self, requests: float) -> float:
        """Distinct LoRA adapters expected among `requests` requests of one step."""
        return expected_distinct(self.shape.adapters, requests, self.shape.lora_cap)

    def _load_back_s(self, tokens: float) -> float:
        """Seconds to load ``tokens`` of KV from host memory: each GPU its own shard."""
        if tokens <= 0 or self.shape.host_gbs <= 0:
            return 0.0
        per_gpu = self.shape.kv_bytes_per_token / max(1, self.shape.tp // self.shape.attn_dp)
        return tokens * per_gpu / (self.shape.host_gbs * 1e9)

    def history_fits(
        self, rate: float, ttft: float, itl_mean: float, with_host: bool = False
    ) -> bool:
        """Whether the conversations in progress keep their history in the KV pool.

        Conversations in progress at once (Little's law: the rate times a conversation turn's
        predicted time, TTFT plus the answer at the mean gap, as ``runtime.confirm`` counts
        them) each hold their whole context between turns. While they fit in the pool beside
        the shared prefix every history is found; once they overflow it, LRU over
        conversations that come back in the order they left (each after one answer) is a
        cyclic scan: each history is evicted just before its next turn, and only the shared
        prefix still hits (``runtime.confirm`` measured exactly that: a 70B 3-turn profile
        whose pool held 93% of its conversations prefilled whole prompts, TTFT 0.4 -> 5.8 s).
        """
        conversations = max(1.0, rate * (ttft + self.traffic.output_tokens * itl_mean))
        footprint = self.traffic.input_tokens + self.traffic.output_tokens
        room = self.shape.kv_tokens - self.traffic.input_tokens * self.prefix_cached
        if with_host:
            room += self.shape.host_tokens  # HiCache keeps what the GPU evicts
        return conversations * footprint <= room

    def decode_step(self, running: float) -> float:
        seqs = max(1, math.ceil(running))
        known = self._decode_steps.get(seqs)
        if known is None:
            work = StepWork(
                decode_seqs=seqs,
                decode_tokens=seqs * self.verify,
                decode_context=int(seqs * self.context),
                lora_adapters=self._adapters(seqs),
            )
            known = self._decode_steps[seqs] = self.shape.step.step_seconds(work)
        return known

    def load(self, rate: float, slo: Slo, *, prefill: bool, decode: bool) -> Load:
        """Figures at `rate` req/s on one engine that prefills, decodes, or both (aggregated)."""
        costs = (self.prefill_latency, self.prefill_s, self.chunk_s)
        load = self._load(rate, slo, costs, prefill=prefill, decode=decode)
        if not prefill or self.history_cached <= 0 or not math.isfinite(load.ttft):
            return load
        # A prefill-only engine's conversations decode elsewhere: their answers are priced at
        # this shape's own decode gap (same GPU and formats).
        itl_mean = (
            load.itl_mean
            if decode
            else self._load(rate, slo, costs, prefill=False, decode=True).itl_mean
        )
        if self.history_fits(rate, load.ttft, itl_mean):
            return load
        if self.shape.host_tokens and self.history_fits(rate, load.ttft, itl_mean, True):
            # Evicted from the GPU but kept in host memory: loaded back, not recomputed.
            cached = self.prefix_cached + self.history_cached
            costs = self._prefill(cached, self.prefix_host + self.history_cached)
            return self._load(rate, slo, costs, prefill=prefill, decode=decode)
        costs = self._prefill(self.prefix_cached, self.prefix_host)  # only the prefix hits
        return self._load(rate, slo, costs, prefill=prefill, decode=decode)

    def _load(
        self,
        rate: float,
        slo: Slo,
        costs: tuple[float, float, float],
        *,
        prefill: bool,
        decode: bool,
    ) -> Load:
        latency, per_request, chunk_s = costs
        busy = rate * per_request if prefill else 0.0
        if busy >= MAX_PREFILL_UTIL:
            return Load(math.inf, math.inf, 0.0, False, math.inf)
        ttft = itl = itl_mean = 0.0
        running = 0.0
        if decode:
            share = 1 - busy  # the engine time decode keeps
            step = self.decode_step(1)
            itl_mean = step / self.accept / share
            batch = 1
            for _ in range(6):  # Little's law fixed point: running = rate x output x ITL
                running = rate * self.traffic.output_tokens * itl_mean
                if max(1, math.ceil(running)) == batch:
                    break  # the step is priced per whole batch: this one's gap is known
                batch = max(1, math.ceil(running))
                step = self.decode_step(running)
                itl_mean = step / self.accept / share
            # `step` is now the step of `running` sequences (the batch it rounds up to).
            # p90: a step that accepts few tokens (speculation); once prefill keeps the
            # engine busy a tenth of the time, a tenth of the gaps carry a prompt's chunk.
            itl = max(itl_mean, step / self.accept_p90 / share)
            if busy > 0.1:
                itl = max(itl, step / self.accept + chunk_s)
        if prefill:
            wait = busy * per_request / (2 * (1 - busy))  # M/D/1
            ttft = latency + P90_EXP * wait
            if decode:
                ttft += step  # waits for the step in flight
        limit = min(self.kv_limit, self.running_cap)
        ok = ttft <= slo.ttft_p90_s and itl <= slo.itl_p90_s and running <= limit
        if slo.e2e_p90_s is not None and decode and prefill:
            ok = ok and ttft + self.traffic.output_tokens * itl <= slo.e2e_p90_s
        if slo.tpot_mean_s is not None:
            ok = ok and itl_mean <= slo.tpot_mean_s
        return Load(ttft, itl, running, ok, itl_mean)

    def capacity(self, slo: Slo, *, prefill: bool, decode: bool) -> float:
        """The most req/s one engine carries within the SLOs (0 when even one request misses)."""
        if not self.load(1e-6, slo, prefill=prefill, decode=decode).ok:
            return 0.0
        low, high = 1e-6, MAX_RATE_PER_REPLICA
        if prefill:
            high = min(high, MAX_PREFILL_UTIL / self.prefill_s)
        for _ in range(22):
            mid = math.sqrt(low * high)
            if self.load(mid, slo, prefill=prefill, decode=decode).ok:
                low = mid
            else:
                high = mid
            if high / low < 1.01:
                break
        return low


def prefix_reach(traffic: Traffic, shape: Shape) -> tuple[float, float]:
    """(Share of shared-prefix hits the GPU's pool keeps, share the GPU and HiCache's host tier
    keep): the tiers' room over the prefix working set, reused uniformly under LRU."""
    working_set = traffic.working_set_tokens
    if working_set <= 0:
        return 1.0, 1.0
    gpu = min(1.0, shape.kv_tokens / working_set)
    return gpu, min(1.0, (shape.kv_tokens + shape.host_tokens) / working_set)


def prefill_capacity(engine: EngineLoad, slo: Slo) -> float:
    """A prefill-only engine's capacity with most of the TTFT budget (the KV transfer and the
    decode side's first step take the rest)."""
    budget = replace(slo, ttft_p90_s=slo.ttft_p90_s * PREFILL_TTFT_SHARE)
    return engine.capacity(budget, prefill=True, decode=False)


def max_running(engine: EngineLoad, rate: float) -> tuple[int, int]:
    """(A running-request cap with headroom over the predicted concurrency (bursts queue), the
    predicted concurrency itself)."""
    load = engine.load(rate, Slo(math.inf, math.inf), prefill=False, decode=True)
    want = max(8, math.ceil(2 * load.running))
    cap = int(min(want, engine.running_cap, max(1, int(engine.kv_limit))))
    return cap, min(cap, max(1, math.ceil(load.running)))
