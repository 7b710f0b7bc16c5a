"""The optimizer: which RuntimeSpec serves a traffic profile cheapest within its SLOs.

One physics: every step time comes from ``runtime.perf`` (the simulator's model), every memory
figure from ``runtime.memory`` (the validator's), and every returned candidate is a RuntimeSpec
that ``runtime.validate`` passes without errors.

The search is analytic, not simulated. For each *engine shape* (GPU x TP x weight quantization x
KV-cache dtype x speculator) it finds, by bisection on the arrival rate, the most requests per
second one replica carries within the SLOs (its *capacity*): decode runs at the concurrency
Little's law gives, prefill steals engine time in an aggregated engine (and its chunks lengthen
the inter-token gaps they ride along), and queueing in front of prefill follows an M/D/1 wait.
Replicas then follow from the load, so replica counts are never enumerated. Disaggregated
layouts combine a prefill-only shape with a decode-only shape of the same GPU and formats, each
side's capacity computed once, so P/D adds no product of searches. Pruning: a shape whose weights
do not fit, or whose spec fails validation, is dropped before any rate is tried; a TP wider than
the GPUs of one node or than the KV heads' divisors is never built.

Two objectives. ``cost`` (the default) sizes every layout to carry the traffic's rate and picks
the cheapest. ``throughput`` is the question AIConfigurator answers: given a GPU budget (the
limits, the free GPUs, or one node), which layout serves the most output tokens/s per GPU within
the SLOs; every layout is then sized to the budget and loaded to its capacity, and a P/D
layout's prefill:decode pool sizes are the integer split of the budget that wastes least.

MoE models add two knobs per TP: attention data parallelism (SGLang ``--enable-dp-attention``,
``parallelism.attn_dp``: attention ranks of TP/DP GPUs, each with its own sequences and KV cache)
and the experts' layout (``parallelism.ep`` = TP, whole experts per GPU, or 1, each expert sliced
over the TP GPUs); the physics prices each (``runtime.perf.step``, calibrated to AIConfigurator's
SGLang MoE data).

Multi-turn history counts as cached only while the conversations in progress (the rate times a
turn's predicted time) fit in a replica's KV pool; past that, LRU evicts each history before its
next turn and only the shared prefix hits. A speculative engine's ITL p90 is a step over the
accept length of a bad step (its 10th percentile), not over the mean.

What the model leaves out (documented, not hidden): prefix-cache hits follow the traffic's
shared-prefix share and multi-turn depth, not a simulated radix tree; round-robin routing keeps
the shared prefix (every replica caches it) but loses multi-turn history; the KV transfer of a
disaggregated request is priced at a fixed RDMA bandwidth. ``bench/optimizer.py`` holds this
model's picks against AIConfigurator's; ``predict_layout`` prices a layout chosen elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import ValidationError

from runtime.catalog import GpuType, ModelArch, get_gpu, get_model, list_gpus, list_models
from runtime.issues import Issue
from runtime.memory import KV_DTYPE_BYTES, default_chunked_prefill, memory_fit, model_weight_bytes
from runtime.perf.hardware import GpuShape, ModelShape, _gpu_shape, _model_shape, lookup_model
from runtime.perf.spec import SpecConfig, resolve_spec
from runtime.perf.step import EngineShape, StepModel, StepWork
from runtime.spec import Architecture, ModelSettings, RuntimeSpec
from runtime.topology import engine_groups
from runtime.validate import has_errors, validate

# The optimizations the waterfall adds one at a time, in its order.
Feature = Literal["quantization", "speculator", "disaggregation", "cache_aware"]
WATERFALL: tuple[Feature, ...] = ("quantization", "speculator", "disaggregation", "cache_aware")
# cost: the cheapest layout carrying the traffic's rate; throughput: the most output tokens/s
# per GPU within the SLOs, each layout sized to the GPU budget.
Objective = Literal["cost", "throughput"]

P90_EXP = math.log(10)  # p90 of an exponential wait, in means
RDMA_BYTES_PER_S = 25e9  # one 200 Gb/s NIC: what a P/D KV transfer is priced at
MAX_PREFILL_UTIL = 0.9  # a queue run hotter than this has no stable p90
MAX_RATE_PER_REPLICA = 1e4
FRONT_LIMIT = 24
PD_PREFILL_TTFT_SHARE = 0.8  # the prefill side's TTFT budget; the transfer and decode start share
MAX_POOL_REPLICAS = 64  # the prefill pool sizes tried when splitting a budget between P and D
# A `throughput` search ranks a P/D layout at this much less than its predicted tokens/s/GPU: its
# figures assume an ideal KV transfer and perfectly rate-matched pools (AIConfigurator discounts
# the same ~10-17%), and it runs two pools and an RDMA link, so a split that gains less than
# this over an aggregated engine is not worth recommending.
PD_RANKING_MARGIN = 0.05
# Validation warnings a pick may carry, each with its reason (`_kept_warnings`): both count
# requests of the full context length, where the pick is sized for the traffic's own requests.
KEPT_WARNINGS = frozenset({"memory_below_max_running", "memory_low_concurrency"})


class OptimizeError(ValueError):
    """The request names no model the optimizer can size, or no usable GPU."""


@dataclass(frozen=True)
class Traffic:
    """What the endpoint will be asked to serve."""

    input_tokens: int = 1024  # mean prompt length, the whole conversation so far included
    output_tokens: int = 256
    rate_rps: float | None = None  # arrival rate; or
    concurrency: int | None = None  # users each waiting for their answer before the next
    prefix_share: float = 0.0  # share of each prompt that is a prefix shared by all requests
    turns: int = 1  # multi-turn depth: earlier turns are this prompt's cacheable history

    def arrival_rate(self, slo: Slo) -> float:
        """Requests per second. `concurrency` users served at the targets send C / e2e."""
        if self.rate_rps is not None:
            return self.rate_rps
        users = self.concurrency or 1
        per_token = min(slo.itl_p90_s, slo.tpot_mean_s or math.inf)
        return users / (slo.ttft_p90_s + self.output_tokens * per_token)

    def cached_share(self, cache_aware: bool) -> float:
        """Share of the prompt found in the prefix cache (history only where routing keeps it)."""
        history = (1 - self.prefix_share) * (self.turns - 1) / self.turns if cache_aware else 0.0
        return min(0.98, self.prefix_share + history)


@dataclass(frozen=True)
class Slo:
    ttft_p90_s: float = 1.0
    itl_p90_s: float = 0.05
    e2e_p90_s: float | None = None
    # Mean time per output token over the answers (the TPOT of AIConfigurator and Dynamo SLAs):
    # a prompt's chunk stalls a few gaps, which a mean spreads where a p90 may not.
    tpot_mean_s: float | None = None


@dataclass(frozen=True)
class Limits:
    max_cost_per_hour: float | None = None
    max_gpus: int | None = None


@dataclass(frozen=True)
class OptimizeRequest:
    model: str  # catalogue id / HF repo, or the source of `architecture`
    traffic: Traffic = Traffic()
    slo: Slo = Slo()
    limits: Limits = Limits()
    architecture: Architecture | None = None  # a model the catalogue does not know
    gpus: tuple[str, ...] = ()  # candidate GPU types; empty: the whole catalogue
    gpu_counts: dict[str, int] = field(default_factory=dict)  # free GPUs per type, if known
    features: frozenset[Feature] = frozenset(WATERFALL)  # optimizations allowed at all
    objective: Objective = "cost"


@dataclass(frozen=True)
class Prediction:
    """The model's figures for one candidate at the requested load."""

    rate_rps: float
    output_tokens_per_s: float
    capacity_rps: float  # the most requests/s the candidate carries within its SLOs
    ttft_p90_s: float
    itl_p90_s: float
    e2e_p90_s: float
    gpus: int
    cost_per_hour: float
    meets_slo: bool
    tpot_mean_s: float = 0.0

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.output_tokens_per_s / max(1, self.gpus)


@dataclass(frozen=True)
class Candidate:
    spec: RuntimeSpec
    prediction: Prediction
    features: frozenset[Feature]
    reasons: tuple[str, ...]
    warnings: tuple[Issue, ...] = ()

    @property
    def label(self) -> str:
        s = self.spec
        parts = [s.hardware.gpu, f"TP{s.parallelism.tp}"]
        if s.parallelism.attn_dp > 1:
            parts.append(f"attention-DP{s.parallelism.attn_dp}")
        if s.quantization.method:
            parts.append(s.quantization.method)
        if s.quantization.kv_cache_dtype != "auto":
            parts.append(f"KV {s.quantization.kv_cache_dtype}")
        if s.speculator.enabled:
            parts.append(s.speculator.algorithm)
        d = s.disaggregation
        if d.enabled:
            parts.append(
                f"P/D {d.prefill.replicas}xTP{d.prefill.tp}:{d.decode.replicas}xTP{d.decode.tp}"
            )
        else:
            parts.append(f"x{s.autoscaling.max_replicas}")
        return " ".join(parts)


@dataclass(frozen=True)
class WaterfallStep:
    step: str  # "baseline" or the feature added
    candidate: Candidate | None  # None: nothing meets the SLOs with these features


@dataclass(frozen=True)
class OptimizeResult:
    rate_rps: float
    best: Candidate | None  # the cheapest candidate meeting the SLOs and limits
    ranked: tuple[Candidate, ...]  # meeting ones by cost, then the closest misses
    pareto: tuple[Candidate, ...]
    waterfall: tuple[WaterfallStep, ...]
    evaluated: int  # layouts (within the limits) whose figures were predicted
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Layout:
    """A layout chosen elsewhere (another tool's pick), for `predict_layout` to price."""

    gpu: str
    tp: int
    quantization: str | None = None  # None: the checkpoint's own format
    kv_dtype: str = "auto"
    replicas: int = 1  # aggregated replicas, or the decode pool's when disaggregated
    prefill_tp: int | None = None  # set: disaggregated
    prefill_replicas: int = 0
    attn_dp: int = 1  # attention data parallelism inside each engine's TP group (MoE)
    ep: int | None = None  # MoE expert parallelism; None: EP = TP; 1: experts sliced (MoE TP)


# ---- engine shapes -----------------------------------------------------------------------------
@dataclass(frozen=True)
class _Knobs:
    """One engine's formats and parallelism: what its spec says."""

    gpu: GpuType
    tp: int
    quantization: str | None
    kv_dtype: str
    speculator: str  # "none", "NGRAM", "EAGLE", "EAGLE3", "MTP"
    draft: str | None
    attn_dp: int  # attention data-parallel ranks in the TP group (MoE models only; else 1)
    ep: int  # expert parallelism (MoE: TP, or 1 for experts sliced over the TP GPUs; dense: 1)


@dataclass(frozen=True)
class _Shape(_Knobs):
    """Knobs that fit and validate, with everything the rate search needs."""

    step: StepModel
    spec: SpecConfig | None
    kv_tokens: int  # tokens one replica's KV pool holds
    kv_bytes_per_token: float  # whole model, for the P/D transfer

    @property
    def features(self) -> frozenset[Feature]:
        used: set[Feature] = set()
        if self.quantization or self.kv_dtype != "auto":
            used.add("quantization")
        if self.speculator != "none":
            used.add("speculator")
        return frozenset(used)


def _tp_choices(gpu: GpuType, arch: ModelArch) -> list[int]:
    """Powers of two up to one node that divide the attention heads (SGLang's TP rule)."""
    out, tp = [], 1
    while tp <= gpu.gpus_per_node:
        if arch.num_attention_heads % tp == 0:
            out.append(tp)
        tp *= 2
    return out


def _attn_dp_choices(arch: ModelArch, tp: int) -> list[int]:
    """Attention DP sizes for a MoE model at `tp`: the powers of two dividing TP (attention runs
    as that many ranks of TP/DP GPUs; the experts stay spread over all TP GPUs). Dense: 1."""
    if not arch.is_moe:
        return [1]
    out, dp = [1], 2
    while dp <= tp:
        if tp % dp == 0:
            out.append(dp)
        dp *= 2
    return out


def _ep_choices(arch: ModelArch, tp: int) -> list[int]:
    """A MoE model's experts over TP GPUs: whole experts per GPU (EP = TP) or each expert
    sliced over them (SGLang's MoE TP, no --ep-size). Dense, or one GPU: 1."""
    return [tp, 1] if arch.is_moe and tp > 1 else [1]


def _quant_choices(gpu: GpuType, arch: ModelArch, allowed: bool) -> list[str | None]:
    """As shipped, plus online FP8 where the GPU has FP8 tensor cores and the weights are BF16."""
    choices: list[str | None] = [None]
    if allowed and arch.checkpoint_quantization is None and gpu.sm >= 89 and gpu.fp8_tflops:
        choices.append("fp8")
    return choices


def _kv_choices(gpu: GpuType, allowed: bool) -> list[str]:
    if not allowed:
        return ["auto"]
    choices = ["auto"]
    if gpu.sm >= 89:
        choices.append("fp8_e4m3")
    if gpu.sm >= 100:
        choices.append("nvfp4")
    return choices


def _spec_choices(arch: ModelArch, allowed: bool) -> list[tuple[str, str | None]]:
    """(algorithm, draft repo): NGRAM, EAGLE/EAGLE3 with a catalogued head, MTP if shipped."""
    choices: list[tuple[str, str | None]] = [("none", None)]
    if not allowed:
        return choices
    choices.append(("NGRAM", None))
    for draft in list_models():
        if arch.id in draft.draft_for and draft.draft_algorithm in ("EAGLE", "EAGLE3"):
            choices.append((draft.draft_algorithm, draft.hf_repo))
    if arch.has_mtp:
        choices.append(("MTP", None))
    return choices


def _base_spec(request: OptimizeRequest, arch: ModelArch, gpu: GpuType) -> dict[str, Any]:
    model: dict[str, Any] = {"source": request.model}
    if request.architecture is not None:
        model["architecture"] = request.architecture.model_dump(exclude_defaults=True)
    # The longest request the traffic sends, with headroom: a smaller context leaves KV for
    # concurrency instead of for one unlikely 128k prompt.
    longest = 2 * (request.traffic.input_tokens + request.traffic.output_tokens)
    model["context_length"] = min(arch.max_context, max(4096, 1 << (longest - 1).bit_length()))
    return {"model": model, "hardware": {"gpu": gpu.id}}


def _spec_data(
    base: dict[str, Any], shape: _Knobs, arch: ModelArch, *, max_running: int | None = None
) -> dict[str, Any]:
    data: dict[str, Any] = {**base, "parallelism": {"tp": shape.tp}}
    if shape.ep > 1:
        data["parallelism"]["ep"] = shape.ep  # whole experts spread over the TP group
    if shape.attn_dp > 1:
        data["parallelism"]["attn_dp"] = shape.attn_dp
    data["quantization"] = {"method": shape.quantization, "kv_cache_dtype": shape.kv_dtype}
    if shape.speculator != "none":
        data["speculator"] = {"algorithm": shape.speculator, "draft_model": shape.draft}
    if max_running is not None:
        data["batching"] = {"max_running_requests": max_running}
    return data


def _shapes(request: OptimizeRequest, arch: ModelArch, gpus: Sequence[GpuType]) -> Iterator[_Shape]:
    model = _model_shape(arch, request.model)
    allow = request.features
    for gpu in gpus:
        base = _base_spec(request, arch, gpu)
        gpu_shape = _gpu_shape(gpu)
        for tp in _tp_choices(gpu, arch):
            if request.limits.max_gpus is not None and tp > request.limits.max_gpus:
                continue
            knobs = (
                (quant, kv, algorithm, draft, dp, ep)
                for quant in _quant_choices(gpu, arch, "quantization" in allow)
                for kv in _kv_choices(gpu, "quantization" in allow)
                for algorithm, draft in _spec_choices(arch, "speculator" in allow)
                for dp in _attn_dp_choices(arch, tp)
                for ep in _ep_choices(arch, tp)
            )
            for quant, kv, algorithm, draft, dp, ep in knobs:
                shape = _shape(request, base, arch, model, gpu, gpu_shape, tp, quant, kv,
                               algorithm, draft, dp, ep)  # fmt: skip
                if shape is not None:
                    yield shape


def _shape(
    request: OptimizeRequest,
    base: dict[str, Any],
    arch: ModelArch,
    model: ModelShape,
    gpu: GpuType,
    gpu_shape: GpuShape,
    tp: int,
    quant: str | None,
    kv: str,
    algorithm: str,
    draft: str | None,
    attn_dp: int = 1,
    ep: int | None = None,
) -> _Shape | None:
    """The shape, or None when it does not fit or its spec does not validate. `ep` None: a MoE
    model's experts spread whole over the TP group (EP = TP)."""
    if ep is None:
        ep = tp if arch.is_moe and tp > 1 else 1
    knobs = _Knobs(gpu, tp, quant, kv, algorithm, draft, attn_dp, ep)
    spec = RuntimeSpec.model_validate(_spec_data(base, knobs, arch))
    fit = memory_fit(spec, gpu, arch, engine_groups(spec)[0])
    if not fit.fits or has_errors(validate(spec)):
        return None
    spec_config = None
    if algorithm != "none":
        draft_shape = lookup_model(draft) if draft else None
        name = "NEXTN" if algorithm == "MTP" else algorithm
        spec_config = resolve_spec(name, model, draft_shape)
    engine = EngineShape(
        tp=tp,
        quantization=quant or arch.checkpoint_quantization,
        weight_bytes=model_weight_bytes(spec, arch),
        kv_bytes_per_value=KV_DTYPE_BYTES[kv],
        spec=spec_config,
        attn_dp=attn_dp,
        ep=ep,
    )
    return _Shape(
        gpu=gpu,
        tp=tp,
        quantization=quant,
        kv_dtype=kv,
        speculator=algorithm,
        draft=draft,
        attn_dp=attn_dp,
        ep=ep,
        step=StepModel(gpu_shape, model, engine),
        spec=spec_config,
        kv_tokens=fit.max_concurrent_tokens,
        kv_bytes_per_token=arch.kv_bytes_per_token(KV_DTYPE_BYTES[kv]),
    )


# ---- the queueing model ------------------------------------------------------------------------
@dataclass(frozen=True)
class _Load:
    """One replica (or pool member) at one arrival rate."""

    ttft: float
    itl: float
    running: float  # decoding sequences
    ok: bool
    itl_mean: float = 0.0


class _Engine:
    """Per-request costs of one shape under one traffic profile."""

    def __init__(self, shape: _Shape, traffic: Traffic, cached: float) -> None:
        self.shape, self.traffic = shape, traffic
        prompt = traffic.input_tokens
        dp = shape.attn_dp
        # History is cached only while the replica's KV pool holds it (`load` bounds it).
        self.prefix_cached = min(cached, traffic.prefix_share)
        self.history_cached = max(0.0, cached - self.prefix_cached)
        self.prefill_latency, self.prefill_s, self.chunk_s = self._prefill(cached)
        self.context = prompt + traffic.output_tokens / 2
        spec = shape.spec
        self.accept = spec.accept_length if spec is not None else 1.0
        # A p90 gap is a step over the accept length of a bad step, not over the mean.
        self.accept_p90 = spec.accept_length_quantile(0.1) if spec is not None else 1
        self.verify = spec.shape.draft_tokens if spec is not None else 1
        self.kv_limit = shape.kv_tokens / (prompt + traffic.output_tokens)
        # SGLang's default under speculation; each attention-DP rank schedules its own batch.
        self.running_cap = (48 if spec is not None else 1024) * dp

    def _prefill(self, cached: float) -> tuple[float, float, float]:
        """(TTFT's prefill step, engine seconds per request, a chunk's step) at this cache hit."""
        step, prompt = self.shape.step, self.traffic.input_tokens
        new = max(1, round(prompt * (1 - cached)))
        # Attention-DP ranks prefill their own prompts side by side (the experts see them all):
        # a prompt waits for a step of one prompt per rank, and costs the engine a rank's share.
        dp = self.shape.attn_dp
        latency = step.step_seconds(
            StepWork(prefill_tokens=new * dp, prefill_pairs=dp * new * (prompt - new / 2))
        )
        # A chunk that rides along with decode steps lengthens those gaps: the whole prompt, or
        # SGLang's default chunk of it (sized from GPU memory) when the prompt is longer.
        chunk = default_chunked_prefill(self.shape.gpu.memory_gib)
        chunk_s = latency
        if new > chunk:
            chunk_s = step.step_seconds(
                StepWork(prefill_tokens=chunk, prefill_pairs=chunk * (prompt - new + chunk / 2))
            )
        return latency, latency / dp, chunk_s

    def history_fits(self, rate: float, ttft: float, itl_mean: float) -> bool:
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
        return conversations * footprint <= room

    def decode_step(self, running: float) -> float:
        seqs = max(1, math.ceil(running))
        work = StepWork(
            decode_seqs=seqs,
            decode_tokens=seqs * self.verify,
            decode_context=int(seqs * self.context),
        )
        return self.shape.step.step_seconds(work)

    def load(self, rate: float, slo: Slo, *, prefill: bool, decode: bool) -> _Load:
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
        costs = self._prefill(self.prefix_cached)  # history evicted: only the prefix hits
        return self._load(rate, slo, costs, prefill=prefill, decode=decode)

    def _load(
        self,
        rate: float,
        slo: Slo,
        costs: tuple[float, float, float],
        *,
        prefill: bool,
        decode: bool,
    ) -> _Load:
        latency, per_request, chunk_s = costs
        busy = rate * per_request if prefill else 0.0
        if busy >= MAX_PREFILL_UTIL:
            return _Load(math.inf, math.inf, 0.0, False, math.inf)
        ttft = itl = itl_mean = 0.0
        running = 0.0
        if decode:
            share = 1 - busy  # the engine time decode keeps
            itl_mean = self.decode_step(1) / self.accept / share
            for _ in range(6):  # Little's law fixed point: running = rate x output x ITL
                running = rate * self.traffic.output_tokens * itl_mean
                itl_mean = self.decode_step(running) / self.accept / share
            # p90: a step that accepts few tokens (speculation); once prefill keeps the
            # engine busy a tenth of the time, a tenth of the gaps carry a prompt's chunk.
            step = self.decode_step(running)
            itl = max(itl_mean, step / self.accept_p90 / share)
            if busy > 0.1:
                itl = max(itl, step / self.accept + chunk_s)
        if prefill:
            wait = busy * per_request / (2 * (1 - busy))  # M/D/1
            ttft = latency + P90_EXP * wait
            if decode:
                ttft += self.decode_step(running)  # waits for the step in flight
        limit = min(self.kv_limit, self.running_cap)
        ok = ttft <= slo.ttft_p90_s and itl <= slo.itl_p90_s and running <= limit
        if slo.e2e_p90_s is not None and decode and prefill:
            ok = ok and ttft + self.traffic.output_tokens * itl <= slo.e2e_p90_s
        if slo.tpot_mean_s is not None:
            ok = ok and itl_mean <= slo.tpot_mean_s
        return _Load(ttft, itl, running, ok, itl_mean)

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


# ---- the search --------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Config:
    """A layout of shapes with its predicted figures, before it becomes a RuntimeSpec."""

    prefill: _Shape | None  # None: aggregated
    decode: _Shape  # the aggregated engine, or the decode pool's
    replicas: int
    prefill_replicas: int
    cache_aware: bool
    prediction: Prediction
    max_running: int
    # The sequences one replica decodes at once at the predicted load: the spec's running cap is
    # never set below it, or the prediction would not hold.
    needed_running: int = 1
    routing_matters: bool = True  # False: no history to keep, every policy predicts the same

    @property
    def features(self) -> frozenset[Feature]:
        used = set(self.decode.features)
        if self.prefill is not None:
            used |= self.prefill.features | {"disaggregation"}
        if self.cache_aware and self.routing_matters:
            used.add("cache_aware")
        return frozenset(used)


def _resolve_model(request: OptimizeRequest) -> ModelArch:
    try:
        ModelSettings(source=request.model)
    except ValidationError as exc:
        raise OptimizeError(f"{request.model!r} is not a model source a spec accepts") from exc
    if request.architecture is not None:
        data = request.architecture.model_dump()
        data["active_params_b"] = data["active_params_b"] or data["params_b"]
        return ModelArch(id=request.model, hf_repo=request.model, **data)
    arch = get_model(request.model)
    if arch is None:
        raise OptimizeError(
            f"model {request.model!r} is not in the catalogue; describe its architecture"
        )
    return arch


def _resolve_gpus(request: OptimizeRequest) -> list[GpuType]:
    names = request.gpus or tuple(request.gpu_counts) or tuple(g.id for g in list_gpus())
    try:
        return [get_gpu(name) for name in names]
    except KeyError as exc:
        raise OptimizeError(str(exc)) from exc


def _gpu_budget(request: OptimizeRequest, gpu: GpuType) -> int | None:
    counts = [request.limits.max_gpus, request.gpu_counts.get(gpu.id)]
    known = [c for c in counts if c is not None]
    return min(known) if known else None


def _predict(
    rate: float,
    request: OptimizeRequest,
    engines: tuple[_Engine | None, _Engine],
    capacity: float,
    replicas: tuple[int, int],
) -> Prediction:
    prefill, decode = engines
    slo = request.slo
    if prefill is None:
        load = decode.load(rate / replicas[1], slo, prefill=True, decode=True)
        ttft, itl, itl_mean = load.ttft, load.itl, load.itl_mean
        gpus = replicas[1] * decode.shape.tp
        price = decode.shape.gpu.price_per_gpu_hour
    else:
        side = prefill.load(rate / replicas[0], slo, prefill=True, decode=False)
        transfer = request.traffic.input_tokens * prefill.shape.kv_bytes_per_token
        ttft = side.ttft + transfer / RDMA_BYTES_PER_S
        pool = decode.load(rate / replicas[1], slo, prefill=False, decode=True)
        itl, itl_mean = pool.itl, pool.itl_mean
        gpus = replicas[0] * prefill.shape.tp + replicas[1] * decode.shape.tp
        price = decode.shape.gpu.price_per_gpu_hour
    e2e = ttft + request.traffic.output_tokens * itl
    meets = ttft <= slo.ttft_p90_s and itl <= slo.itl_p90_s
    if slo.e2e_p90_s is not None:
        meets = meets and e2e <= slo.e2e_p90_s
    if slo.tpot_mean_s is not None:
        meets = meets and itl_mean <= slo.tpot_mean_s
    return Prediction(
        rate_rps=rate,
        output_tokens_per_s=rate * request.traffic.output_tokens,
        capacity_rps=capacity,
        ttft_p90_s=ttft,
        itl_p90_s=itl,
        e2e_p90_s=e2e,
        gpus=gpus,
        cost_per_hour=round(gpus * price, 4),
        meets_slo=meets,
        tpot_mean_s=itl_mean,
    )


def _configs(request: OptimizeRequest, shapes: list[_Shape], rate: float) -> Iterator[_Config]:
    slo, traffic = request.slo, request.traffic
    routings = [True, False] if "cache_aware" in request.features else [False]
    matters = traffic.turns > 1
    if not matters:
        routings = routings[:1]  # without history, routing changes no prediction
    for cache_aware in routings:
        cached = traffic.cached_share(cache_aware)
        engines = [_Engine(shape, traffic, cached) for shape in shapes]
        prefill_caps: dict[int, float] = {}
        decode_caps: dict[int, float] = {}
        for i, engine in enumerate(engines):
            cap = engine.capacity(slo, prefill=True, decode=True)
            if cap > 0:
                layout = _layout(request, rate, (None, engine), cap, cache_aware)
                yield replace(layout, routing_matters=matters)
            if "disaggregation" in request.features:
                decode_caps[i] = engine.capacity(slo, prefill=False, decode=True)
                if engine.shape.speculator == "none":
                    prefill_caps[i] = _prefill_capacity(engine, slo)
        # P/D pairs: same GPU and formats on both sides (KV layouts must match), any TPs; one
        # attention-DP size and expert sharding (the spec's parallelism holds one for both).
        for i, p_cap in prefill_caps.items():
            if p_cap <= 0:
                continue
            ps = engines[i].shape
            for j, d_cap in decode_caps.items():
                ds = engines[j].shape
                same = (ps.gpu.id, ps.quantization, ps.kv_dtype, ps.attn_dp, ps.ep > 1) == (
                    ds.gpu.id,
                    ds.quantization,
                    ds.kv_dtype,
                    ds.attn_dp,
                    ds.ep > 1,
                )
                if d_cap > 0 and same:
                    layout = _pd_layout(
                        request, rate, (engines[i], engines[j]), (p_cap, d_cap), cache_aware
                    )
                    yield replace(layout, routing_matters=matters)


def _prefill_capacity(engine: _Engine, slo: Slo) -> float:
    """A prefill-only engine's capacity with most of the TTFT budget (the KV transfer and the
    decode side's first step take the rest)."""
    budget = replace(slo, ttft_p90_s=slo.ttft_p90_s * PD_PREFILL_TTFT_SHARE)
    return engine.capacity(budget, prefill=True, decode=False)


def _sizing_budget(request: OptimizeRequest, gpu: GpuType) -> int:
    """The GPUs a `throughput` search sizes each layout to: the limits, else one node."""
    return _gpu_budget(request, gpu) or gpu.gpus_per_node


def _pd_pools(caps: tuple[float, float], tps: tuple[int, int], budget: int) -> tuple[int, int]:
    """Prefill and decode pool sizes within `budget` GPUs that carry the most requests per GPU.

    For each prefill pool size only the decode sizes next to the balanced one (and the most that
    fits) can be best, so the split costs O(pools), not O(pools^2). Ties go to the larger layout:
    the budget is there to be used. (1, 1) when even that exceeds the budget (the limits then
    drop the layout)."""
    best, pools = (0.0, 0.0), (1, 1)
    for p in range(1, min(budget // tps[0], MAX_POOL_REPLICAS) + 1):
        room = (budget - p * tps[0]) // tps[1]
        balanced = p * caps[0] / caps[1]
        for d in {math.floor(balanced), math.ceil(balanced), room}:
            if not 1 <= d <= room:
                continue
            rate = min(p * caps[0], d * caps[1])
            score = (rate / (p * tps[0] + d * tps[1]), rate)
            if score > best:
                best, pools = score, (p, d)
    return pools


def _layout(
    request: OptimizeRequest,
    rate: float,
    engines: tuple[None, _Engine],
    capacity: float,
    cache_aware: bool,
) -> _Config:
    engine = engines[1]
    replicas = max(1, math.ceil(rate / capacity))
    if request.objective == "throughput":
        # Fill the budget and run each replica at its capacity: tokens/s per GPU is then the
        # shape's own figure, whatever the traffic's rate.
        replicas = max(1, _sizing_budget(request, engine.shape.gpu) // engine.shape.tp)
        rate = capacity * replicas
    prediction = _predict(rate, request, engines, capacity * replicas, (0, replicas))
    running, needed = _max_running(engine, rate / replicas)
    return _Config(None, engine.shape, replicas, 0, cache_aware, prediction, running, needed)


def _pd_layout(
    request: OptimizeRequest,
    rate: float,
    engines: tuple[_Engine, _Engine],
    caps: tuple[float, float],
    cache_aware: bool,
) -> _Config:
    p_reps = max(1, math.ceil(rate / caps[0]))
    d_reps = max(1, math.ceil(rate / caps[1]))
    if request.objective == "throughput":
        tps = (engines[0].shape.tp, engines[1].shape.tp)
        budget = _sizing_budget(request, engines[1].shape.gpu)
        p_reps, d_reps = _pd_pools(caps, tps, budget)
        rate = min(caps[0] * p_reps, caps[1] * d_reps)
    capacity = min(caps[0] * p_reps, caps[1] * d_reps)
    prediction = _predict(rate, request, engines, capacity, (p_reps, d_reps))
    running, needed = _max_running(engines[1], rate / d_reps)
    return _Config(engines[0].shape, engines[1].shape, d_reps, p_reps, cache_aware, prediction,
                   running, needed)  # fmt: skip


def _max_running(engine: _Engine, rate: float) -> tuple[int, int]:
    """(A running-request cap with headroom over the predicted concurrency (bursts queue), the
    predicted concurrency itself)."""
    load = engine.load(rate, Slo(math.inf, math.inf), prefill=False, decode=True)
    want = max(8, math.ceil(2 * load.running))
    cap = int(min(want, engine.running_cap, max(1, int(engine.kv_limit))))
    return cap, min(cap, max(1, math.ceil(load.running)))


def _within_limits(request: OptimizeRequest, config: _Config) -> bool:
    p = config.prediction
    cap = request.limits.max_cost_per_hour
    budget = _gpu_budget(request, config.decode.gpu)
    return (cap is None or p.cost_per_hour <= cap) and (budget is None or p.gpus <= budget)


def _to_spec(request: OptimizeRequest, arch: ModelArch, config: _Config) -> RuntimeSpec:
    """The config as a spec that validates without warnings where the prediction allows:
    the running cap within what the KV cache holds at the full context length (never below the
    predicted concurrency), and the autoscaler's concurrency target at that cap."""
    spec = _spec_at(request, arch, config, config.max_running)
    fitting = _full_context_requests(spec, arch)
    if fitting < config.max_running:
        spec = _spec_at(request, arch, config, max(fitting, config.needed_running))
    return spec


def _spec_at(
    request: OptimizeRequest, arch: ModelArch, config: _Config, max_running: int
) -> RuntimeSpec:
    base = _base_spec(request, arch, config.decode.gpu)
    data = _spec_data(base, config.decode, arch, max_running=max_running)
    # The concurrency policy scales before a replica's running cap is reached (the validator
    # warns about a target above it); the pick's replica counts are fixed, but a person who
    # widens max_replicas inherits a target that agrees with the cap.
    scaling: dict[str, Any] = {"concurrency_target": max_running}
    if config.prefill is not None:
        data["disaggregation"] = {
            "enabled": True,
            "prefill": {"replicas": config.prefill_replicas, "tp": config.prefill.tp},
            "decode": {"replicas": config.replicas, "tp": config.decode.tp},
        }
        data["parallelism"]["tp"] = config.decode.tp
    else:
        scaling.update(min_replicas=config.replicas, max_replicas=config.replicas)
    data["autoscaling"] = scaling
    data["routing"] = {"policy": "cache_aware" if config.cache_aware else "round_robin"}
    return RuntimeSpec.model_validate(data)


def _full_context_requests(spec: RuntimeSpec, arch: ModelArch) -> int:
    """Requests of the full context length the smallest KV cache of the spec's engine groups
    (engine, or prefill and decode pools) holds at once: where the validator's headroom warning
    starts."""
    gpu = get_gpu(spec.hardware.gpu)
    return min(memory_fit(spec, gpu, arch, group).concurrent_requests
               for group in engine_groups(spec))  # fmt: skip


def _reasons(request: OptimizeRequest, config: _Config) -> tuple[str, ...]:
    p, slo = config.prediction, request.slo
    out = [
        f"predicted TTFT p90 {p.ttft_p90_s * 1000:.0f} ms (target {slo.ttft_p90_s * 1000:.0f}),"
        f" ITL p90 {p.itl_p90_s * 1000:.1f} ms (target {slo.itl_p90_s * 1000:.1f})",
        f"{p.gpus} x {config.decode.gpu.id} at ${p.cost_per_hour:.2f}/hour carry "
        f"{p.capacity_rps:.2f} req/s within the SLOs; the load is {p.rate_rps:.2f} req/s",
    ]
    if slo.tpot_mean_s is not None:
        out.insert(1, f"predicted mean TPOT {p.tpot_mean_s * 1000:.1f} ms "
                      f"(target {slo.tpot_mean_s * 1000:.1f})")  # fmt: skip
    d = config.decode
    if d.quantization:
        out.append(f"{d.quantization} weights: half the bytes streamed per decode step")
    if d.kv_dtype != "auto":
        out.append(f"{d.kv_dtype} KV cache: more concurrent sequences per GPU")
    if d.spec is not None:
        out.append(f"{d.speculator} speculation: {d.spec.accept_length:.2f} tokens per verify step")
    if d.attn_dp > 1:
        out.append(
            f"attention DP{d.attn_dp} x EP{d.tp}: each of {d.attn_dp} attention ranks keeps "
            "its own sequences' KV cache (no KV-head replication); the experts batch every "
            "rank's tokens"
        )
    if config.prefill is not None:
        out.append("prefill/decode split: prompts no longer stall the decode steps")
    if config.cache_aware and request.traffic.turns > 1:
        out.append("cache-aware routing keeps each conversation's history on its replica")
    return tuple(out)


def optimize(request: OptimizeRequest) -> OptimizeResult:
    """Search the configurations of `request`; every candidate returned passes `validate`."""
    arch = _resolve_model(request)
    gpus = _resolve_gpus(request)
    rate = request.traffic.arrival_rate(request.slo)
    shapes = list(_shapes(request, arch, gpus))
    configs = [c for c in _configs(request, shapes, rate) if _within_limits(request, c)]
    notes = []
    if not shapes:
        notes.append("no configuration fits the model in GPU memory on the GPUs given")
    if request.objective == "throughput":
        notes.append(
            "objective throughput: each layout is sized to the GPU budget and loaded to its "
            "capacity; the traffic's rate does not size it"
        )
    meeting = sorted((c for c in configs if c.prediction.meets_slo), key=_objective_order(request))
    cache: dict[int, Candidate | None] = {}

    def candidate(config: _Config) -> Candidate | None:
        key = id(config)
        if key not in cache:
            cache[key] = _candidate(request, arch, config)
        return cache[key]

    ranked = list(_valid(meeting, candidate, FRONT_LIMIT))
    best = ranked[0] if ranked else None
    if best is None:
        notes.append("nothing meets the SLOs within the limits; relax a target or a limit")
    front = _pareto(sorted(meeting, key=_front_order))
    pareto = list(_valid(front, candidate, FRONT_LIMIT))
    waterfall = []
    enabled: set[Feature] = set()
    for step in ("baseline", *WATERFALL):
        if step != "baseline":
            enabled.add(step)  # type: ignore[arg-type]
        subset = [c for c in meeting if c.features <= enabled]
        pick = next(iter(_valid(subset, candidate, 1)), None)
        waterfall.append(WaterfallStep(step, pick))
    return OptimizeResult(
        rate_rps=rate,
        best=best,
        ranked=tuple(ranked),
        pareto=tuple(pareto),
        waterfall=tuple(waterfall),
        evaluated=len(configs),
        notes=tuple(notes),
    )


def _candidate(request: OptimizeRequest, arch: ModelArch, config: _Config) -> Candidate | None:
    spec = _to_spec(request, arch, config)
    issues = validate(spec)
    if has_errors(issues):
        return None
    return Candidate(
        spec=spec,
        prediction=config.prediction,
        features=config.features,
        reasons=(*_reasons(request, config), *_kept_warnings(request, issues)),
        warnings=tuple(issues),
    )


def _kept_warnings(request: OptimizeRequest, issues: list[Issue]) -> list[str]:
    """Why each validation warning a pick still carries was left: a recommended spec either
    validates with no warning or says why (``KEPT_WARNINGS``)."""
    mean = request.traffic.input_tokens + request.traffic.output_tokens
    why = {
        "memory_below_max_running": (
            f"the cap is the concurrency this traffic's {mean}-token requests are predicted to "
            "run at; the warning counts requests of the full context length, which then wait "
            "for memory"
        ),
        "memory_low_concurrency": (
            f"the context length is the smallest the optimizer sets (it holds this traffic's "
            f"{mean}-token requests with room to spare); the prediction is for those requests"
        ),
    }
    return [
        f"validation warns ({issue.code}, {issue.field}): {issue.message}; kept because "
        + why.get(issue.code, "the prediction above does not account for it")
        for issue in issues
    ]


def _valid(configs: Iterable[_Config], build: Any, limit: int) -> Iterator[Candidate]:
    count = 0
    for config in configs:
        if count >= limit:
            return
        found = build(config)
        if found is not None:
            count += 1
            yield found


def _objective_order(request: OptimizeRequest) -> Any:
    """The sort key that puts the objective's best configuration first."""
    if request.objective == "throughput":

        def key(c: _Config) -> tuple[float, float]:
            margin = PD_RANKING_MARGIN if c.prefill is not None else 0.0
            return (-c.prediction.tokens_per_s_per_gpu * (1 - margin), c.prediction.cost_per_hour)

        return key
    return lambda c: (c.prediction.cost_per_hour, -c.prediction.capacity_rps)


def predict_layout(request: OptimizeRequest, layout: Layout) -> Prediction | None:
    """This model's figures for `layout` at its capacity within `request`'s SLOs.

    The layout is loaded to the most requests/s it carries (a P/D layout: the smaller of its two
    pools' capacities), so ``tokens_per_s_per_gpu`` is the figure a `throughput` search ranks by.
    None when the layout does not fit in GPU memory or its spec does not validate; a layout that
    fits but cannot meet the SLOs even unloaded comes back with ``meets_slo`` False.
    """
    arch = _resolve_model(request)
    try:
        gpu = get_gpu(layout.gpu)
    except KeyError as exc:
        raise OptimizeError(str(exc)) from exc
    base = _base_spec(request, arch, gpu)
    model, gpu_shape = _model_shape(arch, request.model), _gpu_shape(gpu)

    def engine(tp: int) -> _Engine | None:
        dp = layout.attn_dp if tp % layout.attn_dp == 0 else 1
        shape = _shape(request, base, arch, model, gpu, gpu_shape, tp, layout.quantization,
                       layout.kv_dtype, "none", None, dp, _layout_ep(layout, tp))  # fmt: skip
        cached = request.traffic.cached_share("cache_aware" in request.features)
        return None if shape is None else _Engine(shape, request.traffic, cached)

    decode = engine(layout.tp)
    if decode is None:
        return None
    slo = request.slo
    if layout.prefill_tp is None:
        cap = decode.capacity(slo, prefill=True, decode=True)
        rate = max(cap, 1e-6) * layout.replicas
        return _predict(rate, request, (None, decode), cap * layout.replicas, (0, layout.replicas))
    prefill = engine(layout.prefill_tp)
    if prefill is None:
        return None
    replicas = (max(1, layout.prefill_replicas), layout.replicas)
    cap = min(
        _prefill_capacity(prefill, slo) * replicas[0],
        decode.capacity(slo, prefill=False, decode=True) * replicas[1],
    )
    return _predict(max(cap, 1e-6), request, (prefill, decode), cap, replicas)


def _layout_ep(layout: Layout, tp: int) -> int | None:
    """`layout`'s EP for an engine of `tp` GPUs: None (EP = TP) unless it divides TP."""
    return None if layout.ep is None or tp % layout.ep else layout.ep


def predict_load(request: OptimizeRequest, layout: Layout) -> Prediction | None:
    """This model's figures for an aggregated `layout` at `request`'s own load (what a benchmark
    of that traffic profile should measure), rather than at the layout's capacity.

    A request rate is taken as it is; a concurrency is a closed loop of that many users, so the
    rate is the fixed point ``rate x e2e(rate) = users`` (found by bisection). None when the
    layout does not fit or is disaggregated (benchmarks compare aggregated endpoints here), and a
    load past what the engine can prefill comes back with infinite latencies.
    """
    if layout.prefill_tp is not None:
        return None
    arch = _resolve_model(request)
    try:
        gpu = get_gpu(layout.gpu)
    except KeyError as exc:
        raise OptimizeError(str(exc)) from exc
    base = _base_spec(request, arch, gpu)
    model, gpu_shape = _model_shape(arch, request.model), _gpu_shape(gpu)
    shape = _shape(request, base, arch, model, gpu, gpu_shape, layout.tp, layout.quantization,
                   layout.kv_dtype, "none", None, layout.attn_dp,
                   _layout_ep(layout, layout.tp))  # fmt: skip
    if shape is None:
        return None
    cached = request.traffic.cached_share("cache_aware" in request.features)
    decode = _Engine(shape, request.traffic, cached)
    slo, replicas = request.slo, max(1, layout.replicas)
    cap = decode.capacity(slo, prefill=True, decode=True) * replicas

    def at(rate: float) -> Prediction:
        return _predict(rate, request, (None, decode), cap, (0, replicas))

    if request.traffic.rate_rps is not None:
        return at(request.traffic.rate_rps)
    users = request.traffic.concurrency or 1
    low, high = 1e-6, MAX_RATE_PER_REPLICA * replicas
    for _ in range(40):
        mid = math.sqrt(low * high)
        e2e = at(mid).e2e_p90_s
        if math.isfinite(e2e) and mid * e2e < users:
            low = mid
        else:
            high = mid
    return at(low)


def _front_order(config: _Config) -> tuple[float, float, float, float]:
    p = config.prediction
    return (p.cost_per_hour, -p.capacity_rps, p.ttft_p90_s, p.itl_p90_s)


def _pareto(configs: list[_Config]) -> list[_Config]:
    """Non-dominated on cost (min), capacity (max), TTFT p90 (min), ITL p90 (min).

    `configs` come in `_front_order`, so whatever dominates a configuration precedes it and one
    pass against the front found so far suffices.
    """
    front: list[_Config] = []
    for c in configs:
        p = c.prediction
        dominated = any(
            q.prediction.cost_per_hour <= p.cost_per_hour
            and q.prediction.capacity_rps >= p.capacity_rps
            and q.prediction.ttft_p90_s <= p.ttft_p90_s
            and q.prediction.itl_p90_s <= p.itl_p90_s
            for q in front
        )
        if not dominated:
            front.append(c)
    return front


# ---- plain data for the API and the command line -----------------------------------------------
def candidate_dict(candidate: Candidate) -> dict[str, Any]:
    p = candidate.prediction
    return {
        "label": candidate.label,
        "spec": candidate.spec.model_dump(mode="json", exclude_defaults=True),
        "predicted": {
            "rate_rps": round(p.rate_rps, 4),
            "capacity_rps": round(p.capacity_rps, 4),
            "output_tokens_per_s": round(p.output_tokens_per_s, 1),
            "tokens_per_s_per_gpu": round(p.tokens_per_s_per_gpu, 1),
            "ttft_p90_s": round(p.ttft_p90_s, 4),
            "itl_p90_s": round(p.itl_p90_s, 5),
            "e2e_p90_s": round(p.e2e_p90_s, 3),
            "gpus": p.gpus,
            "cost_per_hour": p.cost_per_hour,
            "meets_slo": p.meets_slo,
        },
        "features": sorted(candidate.features),
        "reasons": list(candidate.reasons),
        "warnings": [issue.as_dict() for issue in candidate.warnings],
    }


def result_dict(result: OptimizeResult) -> dict[str, Any]:
    """The whole answer as JSON-ready data (the REST response and `--json`)."""
    return {
        "rate_rps": round(result.rate_rps, 4),
        "evaluated": result.evaluated,
        "best": candidate_dict(result.best) if result.best else None,
        "ranked": [candidate_dict(c) for c in result.ranked],
        "pareto": [candidate_dict(c) for c in result.pareto],
        "waterfall": [
            {"step": w.step, "candidate": candidate_dict(w.candidate) if w.candidate else None}
            for w in result.waterfall
        ],
        "notes": list(result.notes),
    }
