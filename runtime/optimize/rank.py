"""Ranking the priced layouts: the objective's order, the pick, the Pareto front and the waterfall.

The pick is the first candidate in the objective's order that meets the SLOs and carries no
validation warning of its own: a warned candidate (say, a running cap above what its KV cache
holds at the full context length) is listed, after the clean ones, but never recommended.

The waterfall starts from the request's current revision (``OptimizeRequest.current``) priced at
its traffic, or, when there is none, from the simplest valid deployment of the model: its shipped
formats on the fewest GPUs that hold it (the cheapest such GPU), aggregated, with as many replicas
as keep the prompts within the TTFT target. That baseline may miss the per-token targets; each
step after it adds one optimization and is the pick with the optimizations so far.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from runtime.catalog import GpuType, ModelArch, get_gpu
from runtime.optimize.queueing import EngineLoad, max_running, prefill_capacity
from runtime.optimize.search import (
    PricedLayout,
    aggregated_layout,
    build_candidate,
    predict_figures,
    price_layouts,
    reasons,
    within_limits,
)
from runtime.optimize.shapes import (
    ShapeKnobs,
    build_shape,
    default_ep,
    engine_shapes,
    shape_context,
    tp_choices,
)
from runtime.optimize.types import (
    FRONT_LIMIT,
    PD_RANKING_MARGIN,
    WATERFALL,
    Candidate,
    Feature,
    OptimizeRequest,
    OptimizeResult,
    Slo,
    WaterfallStep,
    resolve_gpus,
    resolve_model,
)
from runtime.spec import RuntimeSpec
from runtime.validate import has_errors, validate

# How many warned candidates a search builds past the ranking's length looking for a clean pick.
CLEAN_SCAN_LIMIT = 200
SHOWN_PASSED_OVER = 3  # warned candidates named in the pick's reasons
# The algorithms the optimizer prices (``runtime.optimize.shapes.spec_choices``).
PRICED_SPECULATORS = ("NGRAM", "EAGLE", "EAGLE3", "MTP")

Build = Callable[[PricedLayout], Candidate | None]


def optimize(request: OptimizeRequest) -> OptimizeResult:
    """Search the configurations of `request`; every candidate returned passes `validate`."""
    arch = resolve_model(request)
    gpus = resolve_gpus(request)
    rate = request.traffic.arrival_rate(request.slo)
    shapes = list(engine_shapes(request, arch, gpus))
    configs = [c for c in price_layouts(request, shapes, rate) if within_limits(request, c)]
    notes = []
    if not shapes:
        notes.append("no configuration fits the model in GPU memory on the GPUs given")
    if request.objective == "throughput":
        notes.append(
            "objective throughput: each layout is sized to the GPU budget and loaded to its "
            "capacity; the traffic's rate does not size it"
        )
    meeting = sorted((c for c in configs if c.prediction.meets_slo), key=objective_order(request))
    cache: dict[int, Candidate | None] = {}

    def candidate(config: PricedLayout) -> Candidate | None:
        key = id(config)
        if key not in cache:
            cache[key] = build_candidate(request, arch, config)
        return cache[key]

    listed = list(first_valid(meeting, candidate, FRONT_LIMIT))
    best = first_clean(meeting, candidate)
    if best is not None:
        best = with_passed_over(best, listed, request)
    ranked = with_margin_reasons(clean_first(best, listed)[:FRONT_LIMIT], request)
    if best is None:
        notes.append(nothing_recommended(listed))
    front = pareto_front(sorted(meeting, key=front_order))
    pareto = list(first_valid(front, candidate, FRONT_LIMIT))
    base, base_note = baseline(request, arch, gpus, rate)
    if base_note:
        notes.append(base_note)
    waterfall = [WaterfallStep("baseline", base)]
    enabled: set[Feature] = set()
    for step in WATERFALL:
        enabled.add(step)
        subset = [c for c in meeting if c.features <= enabled]
        waterfall.append(WaterfallStep(step, first_clean(subset, candidate)))
    return OptimizeResult(
        rate_rps=rate,
        best=best,
        ranked=tuple(ranked),
        pareto=tuple(pareto),
        waterfall=tuple(waterfall),
        evaluated=len(configs),
        notes=tuple(notes),
    )


def first_valid(configs: Iterable[PricedLayout], build: Build, limit: int) -> Iterator[Candidate]:
    count = 0
    for config in configs:
        if count >= limit:
            return
        found = build(config)
        if found is not None:
            count += 1
            yield found


def first_clean(configs: Iterable[PricedLayout], build: Build) -> Candidate | None:
    """The first candidate of `configs` that validates with no warning: what may be picked."""
    for config in itertools.islice(configs, FRONT_LIMIT + CLEAN_SCAN_LIMIT):
        found = build(config)
        if found is not None and not found.warnings:
            return found
    return None


def clean_first(best: Candidate | None, listed: Sequence[Candidate]) -> list[Candidate]:
    """The pick first, then the other candidates without a warning of their own, then the
    warned ones, each part in the objective's order."""
    others = [c for c in listed if best is None or c.spec is not best.spec]
    head = [best] if best is not None else []
    return head + [c for c in others if not c.warnings] + [c for c in others if c.warnings]


def with_passed_over(
    best: Candidate, listed: Sequence[Candidate], request: OptimizeRequest
) -> Candidate:
    """`best` with a reason naming the warned candidates the objective ranks above it."""
    ahead = []
    for c in listed:
        if c.label == best.label:
            break
        if c.warnings:
            ahead.append(c)
    if not ahead:
        return best
    order = "cheaper" if request.objective == "cost" else "more tokens/s per GPU"
    named = "; ".join(
        f"{c.label} ({', '.join(sorted({w.code for w in c.warnings}))})"
        for c in ahead[:SHOWN_PASSED_OVER]
    )
    more = f" and {len(ahead) - SHOWN_PASSED_OVER} more" if len(ahead) > SHOWN_PASSED_OVER else ""
    why = (
        f"recommended over {len(ahead)} {order} candidate(s) that carry a validation warning "
        f"of their own, listed but never picked: {named}{more}"
    )
    return replace(best, reasons=(*best.reasons, why))


def nothing_recommended(listed: Sequence[Candidate]) -> str:
    if not listed:
        return "nothing meets the SLOs within the limits; relax a target or a limit"
    codes = sorted({w.code for c in listed for w in c.warnings})
    return (
        f"{len(listed)} candidate(s) meet the SLOs within the limits, but each carries a "
        f"validation warning of its own ({', '.join(codes)}): none is recommended; relax a "
        "target or a limit, or allow more GPUs"
    )


def objective_order(request: OptimizeRequest) -> Any:
    """The sort key that puts the objective's best configuration first. A P/D split is ranked
    at ``PD_RANKING_MARGIN`` worse than its prediction (fewer tokens/s per GPU, a higher cost):
    it goes first only where it beats the best aggregated layout by more than that."""
    if request.objective == "throughput":

        def key(c: PricedLayout) -> tuple[float, float]:
            margin = PD_RANKING_MARGIN if c.prefill is not None else 0.0
            return (-c.prediction.tokens_per_s_per_gpu * (1 - margin), c.prediction.cost_per_hour)

        return key

    def by_cost(c: PricedLayout) -> tuple[float, float]:
        margin = PD_RANKING_MARGIN if c.prefill is not None else 0.0
        return (c.prediction.cost_per_hour * (1 + margin), -c.prediction.capacity_rps)

    return by_cost


def split_gain(request: OptimizeRequest, split: Candidate, aggregated: Candidate) -> float:
    """How much better `split` predicts than `aggregated` by the objective (0.1: 10%)."""
    s, a = split.prediction, aggregated.prediction
    if request.objective == "throughput":
        return s.tokens_per_s_per_gpu / max(a.tokens_per_s_per_gpu, 1e-9) - 1
    return a.cost_per_hour / max(s.cost_per_hour, 1e-9) - 1


def with_margin_reasons(ranked: list[Candidate], request: OptimizeRequest) -> list[Candidate]:
    """Each P/D split that predicts better than the best aggregated candidate says whether it
    won by more than the model's error on splits (``PD_RANKING_MARGIN``) or was passed over."""
    aggregated = next(
        (c for c in ranked if not c.spec.disaggregation.enabled and not c.warnings), None
    )
    if aggregated is None:
        return ranked
    order = "cheaper" if request.objective == "cost" else "more tokens/s per GPU"
    out = []
    for c in ranked:
        gain = split_gain(request, c, aggregated) if c.spec.disaggregation.enabled else 0.0
        if gain > PD_RANKING_MARGIN:
            why = (
                f"P/D split: {gain:.0%} {order} than the best aggregated layout "
                f"({aggregated.label}), more than the model's {PD_RANKING_MARGIN:.0%} error "
                "on splits"
            )
            c = replace(c, reasons=(*c.reasons, why))
        elif gain > 0:
            why = (
                f"not chosen over the aggregated {aggregated.label}: only {gain:.0%} {order}, "
                f"within the model's {PD_RANKING_MARGIN:.0%} error on splits"
            )
            c = replace(c, reasons=(*c.reasons, why))
        out.append(c)
    return out


def front_order(config: PricedLayout) -> tuple[float, float, float, float]:
    p = config.prediction
    return (p.cost_per_hour, -p.capacity_rps, p.ttft_p90_s, p.itl_p90_s)


def pareto_front(configs: list[PricedLayout]) -> list[PricedLayout]:
    """Non-dominated on cost (min), capacity (max), TTFT p90 (min), ITL p90 (min).

    `configs` come in `front_order`, so whatever dominates a configuration precedes it and one
    pass against the front found so far suffices.
    """
    front: list[PricedLayout] = []
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


def baseline(
    request: OptimizeRequest, arch: ModelArch, gpus: Sequence[GpuType], rate: float
) -> tuple[Candidate | None, str | None]:
    """The waterfall's first step, and a note when the current revision could not be it."""
    note = None
    current = request.current
    if current is not None:
        if current.model.source != request.model:
            note = (
                f"the current revision serves {current.model.source}, not {request.model}: "
                "the waterfall starts from the simplest deployment instead"
            )
        else:
            found = current_candidate(request, arch, current, rate)
            if found is not None:
                return found, None
            note = (
                "the current revision cannot be priced at this traffic (it does not fit or "
                "does not validate): the waterfall starts from the simplest deployment instead"
            )
    return simplest_candidate(request, arch, gpus, rate), note


def current_candidate(
    request: OptimizeRequest, arch: ModelArch, spec: RuntimeSpec, rate: float
) -> Candidate | None:
    """The current revision as it stands, priced at the request's traffic and SLOs."""
    issues = validate(spec)
    try:
        gpu = get_gpu(spec.hardware.gpu)
    except KeyError:
        return None
    if has_errors(issues):
        return None
    config = spec_layout(request, arch, spec, gpu, rate)
    if config is None:
        return None
    why = "the current revision, priced at this traffic: where the waterfall starts"
    return Candidate(
        spec=spec,
        prediction=config.prediction,
        features=config.features,
        reasons=(why, *reasons(request, config)),
        warnings=tuple(issues),
    )


def spec_knobs(spec: RuntimeSpec, gpu: GpuType, arch: ModelArch, tp: int) -> ShapeKnobs:
    """An engine of `tp` GPUs with `spec`'s formats, expert layout and speculator."""
    par, spec_s = spec.parallelism, spec.speculator
    algorithm = spec_s.algorithm if spec_s.algorithm in PRICED_SPECULATORS else "none"
    return ShapeKnobs(
        gpu=gpu,
        tp=tp,
        quantization=spec.quantization.method,
        kv_dtype=spec.quantization.kv_cache_dtype,
        ep=par.ep if par.ep > 1 and tp % par.ep == 0 else 1,
        speculator=algorithm,
        draft=spec_s.draft_model if algorithm != "none" else None,
        attn_dp=par.attn_dp if tp % par.attn_dp == 0 else 1,
        moe_a2a=par.moe_a2a if par.ep == tp else "none",
    )


def spec_layout(
    request: OptimizeRequest, arch: ModelArch, spec: RuntimeSpec, gpu: GpuType, rate: float
) -> PricedLayout | None:
    """`spec`'s layout at `rate`: an aggregated one at the replicas its autoscaling bounds allow
    for the rate, a split one at its pools' sizes."""
    context = shape_context(request, arch, gpu)
    cache_aware = spec.routing.policy == "cache_aware"
    cached = request.traffic.cached_share(cache_aware)
    d, slo = spec.disaggregation, request.slo

    def engine(tp: int) -> EngineLoad | None:
        shape = build_shape(request, context, spec_knobs(spec, gpu, arch, tp))
        return None if shape is None else EngineLoad(shape, request.traffic, cached)

    decode = engine((d.decode.tp or spec.parallelism.tp) if d.enabled else spec.parallelism.tp)
    if decode is None:
        return None
    matters = request.traffic.turns > 1
    if not d.enabled:
        cap = decode.capacity(slo, prefill=True, decode=True)
        scale = spec.autoscaling
        wanted = math.ceil(rate / cap) if cap > 0 else scale.max_replicas
        replicas = min(max(wanted, scale.min_replicas, 1), scale.max_replicas)
        prediction = predict_figures(rate, request, (None, decode), cap * replicas, (0, replicas))
        running = max_running(decode, rate / replicas)
        return PricedLayout(None, decode.shape, replicas, 0, cache_aware, prediction, *running,
                            routing_matters=matters)  # fmt: skip
    prefill = engine(d.prefill.tp or spec.parallelism.tp)
    if prefill is None:
        return None
    pools = (d.prefill.replicas, d.decode.replicas)
    caps = (
        prefill_capacity(prefill, slo) * pools[0],
        decode.capacity(slo, prefill=False, decode=True) * pools[1],
    )
    prediction = predict_figures(rate, request, (prefill, decode), min(caps), pools)
    running = max_running(decode, rate / pools[1])
    return PricedLayout(prefill.shape, decode.shape, pools[1], pools[0], cache_aware, prediction,
                        *running, routing_matters=matters, pool_caps=caps)  # fmt: skip


def simplest_candidate(
    request: OptimizeRequest, arch: ModelArch, gpus: Sequence[GpuType], rate: float
) -> Candidate | None:
    """The model's simplest valid deployment: shipped formats, no speculator, aggregated, on
    the fewest GPUs that hold it (the cheapest such GPU type), round-robin routing, with as many
    replicas as keep the prompts within the TTFT target (the per-token targets may be missed:
    that is what the optimizations after it buy)."""
    config = simplest_layout(request, arch, gpus, rate)
    if config is None:
        return None
    found = build_candidate(request, arch, config)
    if found is None:
        return None
    why = (
        "the simplest valid deployment of the model (its shipped formats, no speculator, "
        "aggregated, on the fewest GPUs that hold it, as many replicas as keep prompts within "
        "the TTFT target): where the waterfall starts"
    )
    return replace(found, reasons=(why, *found.reasons))


def simplest_layout(
    request: OptimizeRequest, arch: ModelArch, gpus: Sequence[GpuType], rate: float
) -> PricedLayout | None:
    plain = []
    for gpu in gpus:
        context = shape_context(request, arch, gpu)
        for tp in tp_choices(gpu, arch):
            knobs = ShapeKnobs(gpu=gpu, tp=tp, quantization=None, kv_dtype="auto",
                               ep=default_ep(arch, tp))  # fmt: skip
            shape = build_shape(request, context, knobs)
            if shape is not None:
                plain.append(shape)
                break
    if not plain:
        return None
    shape = min(plain, key=lambda s: (s.tp, s.gpu.price_per_gpu_hour, s.gpu.id))
    engine = EngineLoad(shape, request.traffic, request.traffic.cached_share(False))
    slo = request.slo
    cap = engine.capacity(slo, prefill=True, decode=True)
    # Sized as a first deployment is: enough replicas to keep up with the prompts in time
    # (else to keep up at all), whatever the gaps between tokens.
    sizing = engine.capacity(Slo(slo.ttft_p90_s, math.inf), prefill=True, decode=True)
    if sizing <= 0:
        sizing = engine.capacity(Slo(math.inf, math.inf), prefill=True, decode=True)
    if sizing <= 0:
        return None
    config = aggregated_layout(request, rate, (None, engine), sizing, False)
    within = replace(config.prediction, capacity_rps=cap * config.replicas)
    return replace(config, prediction=within, routing_matters=request.traffic.turns > 1)
