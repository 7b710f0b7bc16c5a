"""The search: price every layout of the engine shapes and turn each into a RuntimeSpec that
validates (``runtime.optimize.rank`` orders them, picks and builds the waterfall).

For each shape the queueing model finds its capacity once; replicas then follow from the load,
so replica counts are never enumerated. Disaggregated layouts pair a prefill-only shape with a
decode-only shape of the same GPU and formats, each side's capacity computed once.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from runtime.catalog import GpuType, ModelArch, get_gpu
from runtime.issues import Issue
from runtime.memory import memory_fit
from runtime.optimize.queueing import EngineLoad, max_running, prefill_capacity
from runtime.optimize.shapes import Shape, base_spec, gpu_budget, spec_data
from runtime.optimize.types import (
    MAX_POOL_REPLICAS,
    Candidate,
    Feature,
    OptimizeRequest,
    Prediction,
)
from runtime.perf.kv_transfer import transfer_link
from runtime.spec import RuntimeSpec
from runtime.topology import engine_groups
from runtime.validate import has_errors, validate


@dataclass(frozen=True)
class PricedLayout:
    """A layout of shapes with its predicted figures, before it becomes a RuntimeSpec."""

    prefill: Shape | None  # None: aggregated
    decode: Shape  # the aggregated engine, or the decode pool's
    replicas: int
    prefill_replicas: int
    cache_aware: bool
    prediction: Prediction
    max_running: int
    # The sequences one replica decodes at once at the predicted load: the spec's running cap is
    # never set below it, or the prediction would not hold.
    needed_running: int = 1
    routing_matters: bool = True  # False: no history to keep, every policy predicts the same
    # A split's (prefill pool's, decode pool's) req/s within the SLOs; it carries the smaller.
    pool_caps: tuple[float, float] | None = None

    @property
    def features(self) -> frozenset[Feature]:
        used = set(self.decode.features)
        if self.prefill is not None:
            used |= self.prefill.features | {"disaggregation"}
        if self.cache_aware and self.routing_matters:
            used.add("cache_aware")
        return frozenset(used)


def predict_figures(
    rate: float,
    request: OptimizeRequest,
    engines: tuple[EngineLoad | None, EngineLoad],
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
        ttft = side.ttft + kv_transfer_s(request, prefill.shape)
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


def kv_transfer_s(request: OptimizeRequest, shape: Shape) -> float:
    """Seconds to move one prompt's KV cache from the prefill pool to the decode pool: the
    prompt's KV bytes (the model's shape at the KV dtype) over the link the simulator moves it on
    (``runtime.perf.kv_transfer``: the GPU's scale-out NIC at the default transfer backend's share
    of line rate, plus its per-transfer latency; figures in ``runtime/catalog/perf.yaml``)."""
    kv_bytes = request.traffic.input_tokens * shape.kv_bytes_per_token
    return transfer_link(shape.gpu, None).seconds(kv_bytes)


def price_layouts(
    request: OptimizeRequest, shapes: list[Shape], rate: float
) -> Iterator[PricedLayout]:
    slo, traffic = request.slo, request.traffic
    routings = [True, False] if "cache_aware" in request.features else [False]
    matters = traffic.turns > 1
    if not matters:
        routings = routings[:1]  # without history, routing changes no prediction
    for cache_aware in routings:
        cached = traffic.cached_share(cache_aware)
        engines = [EngineLoad(shape, traffic, cached) for shape in shapes]
        prefill_caps: dict[int, float] = {}
        decode_caps: dict[int, float] = {}
        for i, engine in enumerate(engines):
            cap = engine.capacity(slo, prefill=True, decode=True)
            if cap > 0:
                layout = aggregated_layout(request, rate, (None, engine), cap, cache_aware)
                yield replace(layout, routing_matters=matters)
            if "disaggregation" in request.features:
                decode_caps[i] = engine.capacity(slo, prefill=False, decode=True)
                if engine.shape.speculator == "none":
                    prefill_caps[i] = prefill_capacity(engine, slo)
        # P/D pairs: same GPU and formats on both sides (KV layouts must match), any TPs; one
        # attention-DP size, expert sharding and KV tiers (the spec holds one for both pools:
        # a prefill pool priced with a host tier its spec would not deploy is no candidate).
        # Decode pools grouped by what a pair must share, so each prefill pool meets only its
        # own group (the same pairs, in the same order, as trying every decode pool).
        by_pool: dict[tuple[object, ...], list[tuple[int, float]]] = {}
        for j, d_cap in decode_caps.items():
            if d_cap > 0:
                by_pool.setdefault(pd_held(engines[j].shape), []).append((j, d_cap))
        for i, p_cap in prefill_caps.items():
            if p_cap <= 0:
                continue
            for j, d_cap in by_pool.get(pd_held(engines[i].shape), ()):
                layout = pd_layout(
                    request, rate, (engines[i], engines[j]), (p_cap, d_cap), cache_aware
                )
                yield replace(layout, routing_matters=matters)


def pd_held(shape: Shape) -> tuple[object, ...]:
    """What a spec's prefill and decode pools must share to pair."""
    return (
        shape.gpu.id,
        shape.quantization,
        shape.kv_dtype,
        shape.attn_dp,
        shape.ep > 1,
        shape.moe_a2a,
        shape.hicache_ratio,
    )


def sizing_budget(request: OptimizeRequest, gpu: GpuType) -> int:
    """The GPUs a `throughput` search sizes each layout to: the limits, else one node."""
    return gpu_budget(request, gpu) or gpu.gpus_per_node


def pd_pools(caps: tuple[float, float], tps: tuple[int, int], budget: int) -> tuple[int, int]:
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


def aggregated_layout(
    request: OptimizeRequest,
    rate: float,
    engines: tuple[None, EngineLoad],
    capacity: float,
    cache_aware: bool,
) -> PricedLayout:
    engine = engines[1]
    replicas = max(1, math.ceil(rate / capacity))
    if request.objective == "throughput":
        # Fill the budget and run each replica at its capacity: tokens/s per GPU is then the
        # shape's own figure, whatever the traffic's rate.
        replicas = max(1, sizing_budget(request, engine.shape.gpu) // engine.shape.tp)
        rate = capacity * replicas
    prediction = predict_figures(rate, request, engines, capacity * replicas, (0, replicas))
    running, needed = max_running(engine, rate / replicas)
    return PricedLayout(None, engine.shape, replicas, 0, cache_aware, prediction, running, needed)


def pd_layout(
    request: OptimizeRequest,
    rate: float,
    engines: tuple[EngineLoad, EngineLoad],
    caps: tuple[float, float],
    cache_aware: bool,
) -> PricedLayout:
    p_reps = max(1, math.ceil(rate / caps[0]))
    d_reps = max(1, math.ceil(rate / caps[1]))
    if request.objective == "throughput":
        tps = (engines[0].shape.tp, engines[1].shape.tp)
        budget = sizing_budget(request, engines[1].shape.gpu)
        p_reps, d_reps = pd_pools(caps, tps, budget)
        rate = min(caps[0] * p_reps, caps[1] * d_reps)
    pools = (caps[0] * p_reps, caps[1] * d_reps)
    prediction = predict_figures(rate, request, engines, min(pools), (p_reps, d_reps))
    running, needed = max_running(engines[1], rate / d_reps)
    return PricedLayout(
        engines[0].shape,
        engines[1].shape,
        d_reps,
        p_reps,
        cache_aware,
        prediction,
        running,
        needed,
        pool_caps=pools,
    )


def within_limits(request: OptimizeRequest, config: PricedLayout) -> bool:
    p = config.prediction
    cap = request.limits.max_cost_per_hour
    budget = gpu_budget(request, config.decode.gpu)
    return (cap is None or p.cost_per_hour <= cap) and (budget is None or p.gpus <= budget)


def to_spec(request: OptimizeRequest, arch: ModelArch, config: PricedLayout) -> RuntimeSpec:
    """The config as a spec that validates without warnings where the prediction allows:
    the running cap within what the KV cache holds at the full context length (never below the
    predicted concurrency), and the autoscaler's concurrency target at that cap."""
    spec = spec_at(request, arch, config, config.max_running)
    fitting = full_context_requests(spec, arch)
    if fitting < config.max_running:
        spec = spec_at(request, arch, config, max(fitting, config.needed_running))
    return spec


def spec_at(
    request: OptimizeRequest, arch: ModelArch, config: PricedLayout, max_running: int
) -> RuntimeSpec:
    base = base_spec(request, arch, config.decode.gpu)
    data = spec_data(base, config.decode, arch, max_running=max_running)
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


def full_context_requests(spec: RuntimeSpec, arch: ModelArch) -> int:
    """Requests of the full context length the smallest KV cache of the spec's engine groups
    (engine, or prefill and decode pools) holds at once: where the validator's headroom warning
    starts."""
    gpu = get_gpu(spec.hardware.gpu)
    return min(memory_fit(spec, gpu, arch, group).concurrent_requests
               for group in engine_groups(spec))  # fmt: skip


def reasons(request: OptimizeRequest, config: PricedLayout) -> tuple[str, ...]:
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
    if d.moe_a2a == "deepep":
        out.append(
            "DeepEP: each token goes only to the GPUs holding its experts, and the experts run "
            "DeepGEMM's grouped GEMMs, several times faster than the fused MoE on prompts"
        )
    if config.prefill is not None:
        out.append("prefill/decode split: prompts no longer stall the decode steps")
        if config.pool_caps is not None:
            out.append(rate_matching(config.pool_caps, config))
    if config.cache_aware and request.traffic.turns > 1:
        out.append("cache-aware routing keeps each conversation's history on its replica")
    return tuple(out)


def rate_matching(caps: tuple[float, float], config: PricedLayout) -> str:
    """The rate-matching loss of a split: whole replicas of each pool never match the traffic's
    ratio, so the pool with more capacity than the other idles that share, and its GPUs are
    priced all the same."""
    p_cap, d_cap = caps
    side, idle = ("prefill", 1 - d_cap / p_cap) if p_cap >= d_cap else ("decode", 1 - p_cap / d_cap)
    return (
        f"rate matching: {config.prefill_replicas} prefill and {config.replicas} decode "
        f"replica(s) carry {p_cap:.2f} and {d_cap:.2f} req/s; the {side} pool is {idle:.0%} "
        "idle at the layout's capacity, and its GPUs are priced all the same"
    )


def build_candidate(
    request: OptimizeRequest, arch: ModelArch, config: PricedLayout
) -> Candidate | None:
    spec = to_spec(request, arch, config)
    issues = validate(spec)
    if has_errors(issues):
        return None
    return Candidate(
        spec=spec,
        prediction=config.prediction,
        features=config.features,
        reasons=(*reasons(request, config), *kept_warnings(request, issues)),
        warnings=tuple(issues),
    )


def kept_warnings(request: OptimizeRequest, issues: list[Issue]) -> list[str]:
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
