"""Pricing a layout chosen elsewhere: at its capacity (``predict_layout``, what a ``throughput``
search ranks by) or at a request's own load (``predict_load``, what a benchmark should measure)."""

from __future__ import annotations

import math

from runtime.catalog import GpuType, ModelArch, get_gpu
from runtime.optimize.queueing import MAX_RATE_PER_REPLICA, EngineLoad, prefill_capacity
from runtime.optimize.search import predict_figures
from runtime.optimize.shapes import ShapeContext, ShapeKnobs, build_shape, default_ep, shape_context
from runtime.optimize.types import Layout, OptimizeError, OptimizeRequest, Prediction, resolve_model


def predict_layout(request: OptimizeRequest, layout: Layout) -> Prediction | None:
    """This model's figures for `layout` at its capacity within `request`'s SLOs.

    The layout is loaded to the most requests/s it carries (a P/D layout: the smaller of its two
    pools' capacities), so ``tokens_per_s_per_gpu`` is the figure a `throughput` search ranks by.
    None when the layout does not fit in GPU memory or its spec does not validate; a layout that
    fits but cannot meet the SLOs even unloaded comes back with ``meets_slo`` False.
    """
    context, gpu = layout_context(request, layout)

    def engine(tp: int) -> EngineLoad | None:
        dp = layout.attn_dp if tp % layout.attn_dp == 0 else 1
        shape = build_shape(request, context, layout_knobs(layout, gpu, context.arch, tp, dp))
        cached = request.traffic.cached_share("cache_aware" in request.features)
        return None if shape is None else EngineLoad(shape, request.traffic, cached)

    decode = engine(layout.tp)
    if decode is None:
        return None
    slo = request.slo
    if layout.prefill_tp is None:
        cap = decode.capacity(slo, prefill=True, decode=True)
        rate = max(cap, 1e-6) * layout.replicas
        replicas = (0, layout.replicas)
        return predict_figures(rate, request, (None, decode), cap * layout.replicas, replicas)
    prefill = engine(layout.prefill_tp)
    if prefill is None:
        return None
    replicas = (max(1, layout.prefill_replicas), layout.replicas)
    cap = min(
        prefill_capacity(prefill, slo) * replicas[0],
        decode.capacity(slo, prefill=False, decode=True) * replicas[1],
    )
    return predict_figures(max(cap, 1e-6), request, (prefill, decode), cap, replicas)


def layout_context(request: OptimizeRequest, layout: Layout) -> tuple[ShapeContext, GpuType]:
    """The shape context of `layout`'s model on its GPU (an unknown GPU is an OptimizeError)."""
    arch = resolve_model(request)
    try:
        gpu = get_gpu(layout.gpu)
    except KeyError as exc:
        raise OptimizeError(str(exc)) from exc
    return shape_context(request, arch, gpu), gpu


def layout_knobs(layout: Layout, gpu: GpuType, arch: ModelArch, tp: int, dp: int) -> ShapeKnobs:
    """An engine of `tp` GPUs in `layout`, with `dp` attention ranks and no speculator."""
    return ShapeKnobs(
        gpu=gpu,
        tp=tp,
        quantization=layout.quantization,
        kv_dtype=layout.kv_dtype,
        ep=layout_ep(layout, arch, tp),
        attn_dp=dp,
        moe_a2a=layout.moe_a2a,
    )


def layout_ep(layout: Layout, arch: ModelArch, tp: int) -> int:
    """`layout`'s EP for an engine of `tp` GPUs: EP = TP (``default_ep``) unless it divides TP."""
    return default_ep(arch, tp) if layout.ep is None or tp % layout.ep else layout.ep


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
    context, gpu = layout_context(request, layout)
    knobs = layout_knobs(layout, gpu, context.arch, layout.tp, layout.attn_dp)
    shape = build_shape(request, context, knobs)
    if shape is None:
        return None
    cached = request.traffic.cached_share("cache_aware" in request.features)
    decode = EngineLoad(shape, request.traffic, cached)
    slo, replicas = request.slo, max(1, layout.replicas)
    cap = decode.capacity(slo, prefill=True, decode=True) * replicas

    def at(rate: float) -> Prediction:
        return predict_figures(rate, request, (None, decode), cap, (0, replicas))

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
