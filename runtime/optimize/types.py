"""The optimizer's request and answer: traffic, SLOs, limits, candidates, and the layout a caller
names for pricing; plus the resolution of a request's model and GPUs against the catalogue."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from pydantic import ValidationError

from runtime.catalog import GpuType, ModelArch, get_gpu, get_model, list_gpus
from runtime.issues import Issue
from runtime.lora import LoraSettings
from runtime.spec import Architecture, ModelSettings, RuntimeSpec

# The optimizations the waterfall adds one at a time, in its order.
Feature = Literal["quantization", "speculator", "disaggregation", "cache_aware", "hicache"]
WATERFALL: tuple[Feature, ...] = (
    "quantization", "speculator", "disaggregation", "cache_aware", "hicache",
)  # fmt: skip
# cost: the cheapest layout carrying the traffic's rate; throughput: the most output tokens/s
# per GPU within the SLOs, each layout sized to the GPU budget.
Objective = Literal["cost", "throughput"]

FRONT_LIMIT = 24
MAX_POOL_REPLICAS = 64  # the prefill pool sizes tried when splitting a budget between P and D
# A P/D layout ranks at this much worse than its prediction (a `throughput` search: fewer
# tokens/s per GPU; a `cost` search: a higher cost), so a split is chosen only where it beats
# the best aggregated layout by more than the model's own error on splits. 10%: issue 27's
# independent check found the decode step ~15% fast at TP1 (TPOT 0.84-0.86x of AIConfigurator's),
# which flatters a decode pool over an aggregated engine, and AIConfigurator discounts its own
# P/D figures 10-17%; the rate-matching loss, KV transfer and the decode pool's KV limit are
# priced in the prediction itself, so the margin takes the low end of that range.
PD_RANKING_MARGIN = 0.10
# Validation warnings a pick may carry, each with its reason (`kept_warnings`): both count
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
    # The prefix working set, tokens: all the distinct shared contexts (documents, tenants'
    # system prompts) the shared prefix is drawn from. 0: one prefix. Past a replica's KV pool,
    # only the pool's share of it hits (uniform reuse under LRU), unless HiCache keeps the rest
    # in host memory.
    working_set_tokens: int = 0
    # LoRA: distinct adapters the requests spread over, evenly (None: every adapter the
    # endpoint lists, or max_loras_per_batch when it lists none; 0: all go to the base model).
    # A batch then holds the expected number of distinct ones, each priced by runtime.perf.lora.
    adapters_in_use: int | None = None

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


DEFAULT_TTFT_P90_S = 1.0
DEFAULT_ITL_P90_S = 0.05


@dataclass(frozen=True)
class Slo:
    """Latency targets. Every target is a p90 unless its name says mean."""

    ttft_p90_s: float = DEFAULT_TTFT_P90_S
    itl_p90_s: float = DEFAULT_ITL_P90_S
    e2e_p90_s: float | None = None
    # Mean time per output token over the answers (the TPOT of AIConfigurator and Dynamo SLAs):
    # a prompt's chunk stalls a few gaps, which a mean spreads where a p90 may not.
    tpot_mean_s: float | None = None

    @classmethod
    def targets(
        cls,
        ttft_p90_s: float | None = None,
        itl_p90_s: float | None = None,
        e2e_p90_s: float | None = None,
        tpot_mean_s: float | None = None,
    ) -> Slo:
        """The SLO a request's targets ask for, None where the request gave none.

        The gaps between tokens are always held at p90: a request that gives only a mean
        per-token target gets its ITL p90 held to that target too (a fixed default p90 far
        above it let picks stall 5-8x the mean), and one that wants the mean alone says so by
        giving a looser ITL p90 of its own.
        """
        if itl_p90_s is None:
            itl_p90_s = DEFAULT_ITL_P90_S if tpot_mean_s is None else tpot_mean_s
        return cls(
            ttft_p90_s=DEFAULT_TTFT_P90_S if ttft_p90_s is None else ttft_p90_s,
            itl_p90_s=itl_p90_s,
            e2e_p90_s=e2e_p90_s,
            tpot_mean_s=tpot_mean_s,
        )


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
    # The endpoint's serving revision, when the question is about one: the waterfall starts
    # from it (priced at this traffic) rather than from the model's simplest deployment.
    current: RuntimeSpec | None = None
    # The LoRA adapters every candidate serves (default: the current revision's): their pool
    # comes out of each candidate's KV cache and their kernels out of its steps.
    lora: LoraSettings | None = None

    @property
    def served_lora(self) -> LoraSettings | None:
        """The adapters the candidates serve, or None without LoRA."""
        lora = self.lora or (self.current.lora if self.current is not None else None)
        return lora if lora is not None and lora.active else None

    def adapters_in_use(self) -> int:
        """How many distinct adapters the traffic spreads over (0 without LoRA)."""
        lora = self.served_lora
        if lora is None:
            return 0
        if self.traffic.adapters_in_use is not None:
            return self.traffic.adapters_in_use
        return len(lora.adapters) or lora.resolved_max_loras_per_batch


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
            sp = s.speculator
            shape = (sp.num_steps, sp.eagle_topk, sp.num_draft_tokens)
            # Candidates differ by tree shape too: (steps, top-k, draft tokens) when set.
            shown = "/".join(str(n) for n in shape) if any(shape) else ""
            parts.append(f"{sp.algorithm} {shown}".strip())
        if s.kv_cache.hicache:
            parts.append("HiCache")
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
    # The objective's first candidate meeting the SLOs and limits with no warning of its own.
    best: Candidate | None
    ranked: tuple[Candidate, ...]  # meeting ones in the objective's order, warned ones after
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
    moe_a2a: str = "none"  # MoE: how tokens reach whole experts ("deepep": DeepEP)


def resolve_model(request: OptimizeRequest) -> ModelArch:
    """The architecture `request` names: its own, or the catalogue's row for its model."""
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


def resolve_gpus(request: OptimizeRequest) -> list[GpuType]:
    """The GPU types to search: those named, those with free GPUs, else the whole catalogue."""
    names = request.gpus or tuple(request.gpu_counts) or tuple(g.id for g in list_gpus())
    try:
        return [get_gpu(name) for name in names]
    except KeyError as exc:
        raise OptimizeError(str(exc)) from exc
