"""P/D priced as it runs (issue 27 item 3): the rate-matching loss of whole replicas, the KV
transfer over the GPU's NIC, the decode pool's batch limit, and a split chosen only where it
beats the best aggregated layout by more than the model's error on splits."""

from __future__ import annotations

from dataclasses import replace

import pytest

import runtime.optimize.rank as rank
from runtime.catalog.perf import perf_catalog
from runtime.optimize import PD_RANKING_MARGIN, OptimizeRequest, Slo, Traffic
from runtime.optimize.queueing import EngineLoad, prefill_capacity
from runtime.optimize.search import PricedLayout, build_candidate, price_layouts
from runtime.optimize.shapes import engine_shapes
from runtime.optimize.types import resolve_gpus, resolve_model

# Long prompts, short answers on an 8B: the search prices both splits and aggregated engines.
REQUEST = OptimizeRequest(
    model="llama-3.1-8b",
    gpus=("H200",),
    traffic=Traffic(input_tokens=4000, output_tokens=200, rate_rps=4),
    slo=Slo(ttft_p90_s=2.0, itl_p90_s=0.03),
)


def _layouts(request: OptimizeRequest = REQUEST) -> list[PricedLayout]:
    arch = resolve_model(request)
    shapes = list(engine_shapes(request, arch, resolve_gpus(request)))
    rate = request.traffic.arrival_rate(request.slo)
    return list(price_layouts(request, shapes, rate))


def _splits(layouts: list[PricedLayout]) -> list[PricedLayout]:
    found = [c for c in layouts if c.prefill is not None and c.prediction.meets_slo]
    assert found
    return found


def _engine(layout: PricedLayout, *, prefill: bool) -> EngineLoad:
    shape = layout.prefill if prefill and layout.prefill is not None else layout.decode
    return EngineLoad(shape, REQUEST.traffic, REQUEST.traffic.cached_share(layout.cache_aware))


def test_a_splits_ttft_carries_the_kv_transfer_over_the_gpus_nic() -> None:
    """Prompt tokens x KV bytes per token (model shape, KV dtype) over the catalogue's NIC line
    rate at the default backend's efficiency, plus its per-transfer latency."""
    catalog = perf_catalog().kv_transfer
    backend = catalog.backend(catalog.default_backend)
    for layout in _splits(_layouts())[:6]:
        assert layout.prefill is not None
        side = _engine(layout, prefill=True).load(
            layout.prediction.rate_rps / layout.prefill_replicas,
            REQUEST.slo,
            prefill=True,
            decode=False,
        )
        kv_bytes = REQUEST.traffic.input_tokens * layout.prefill.kv_bytes_per_token
        bandwidth = catalog.nic_gbs(layout.prefill.gpu.sm) * 1e9 * backend.efficiency
        transfer = backend.latency_us * 1e-6 + kv_bytes / bandwidth
        assert layout.prediction.ttft_p90_s == pytest.approx(side.ttft + transfer, rel=1e-9)


def test_a_splits_reasons_name_its_rate_matching_loss() -> None:
    """Whole replicas never match the traffic's ratio: the layout carries the smaller pool's
    capacity, pays for every GPU of both, and says how idle the larger pool is."""
    for layout in _splits(_layouts())[:6]:
        assert layout.prefill is not None
        p_cap = prefill_capacity(_engine(layout, prefill=True), REQUEST.slo)
        d_cap = _engine(layout, prefill=False).capacity(REQUEST.slo, prefill=False, decode=True)
        pools = (p_cap * layout.prefill_replicas, d_cap * layout.replicas)
        p = layout.prediction
        assert p.capacity_rps == pytest.approx(min(pools))
        assert p.gpus == layout.prefill_replicas * layout.prefill.tp + layout.replicas * (
            layout.decode.tp
        )
        side = "prefill" if pools[0] >= pools[1] else "decode"
        idle = 1 - min(pools) / max(pools)
        candidate = build_candidate(REQUEST, resolve_model(REQUEST), layout)
        assert candidate is not None
        said = [r for r in candidate.reasons if r.startswith("rate matching:")]
        assert said == [
            f"rate matching: {layout.prefill_replicas} prefill and {layout.replicas} decode "
            f"replica(s) carry {pools[0]:.2f} and {pools[1]:.2f} req/s; the {side} pool is "
            f"{idle:.0%} idle at the layout's capacity, and its GPUs are priced all the same"
        ]


def test_the_decode_pools_kv_cache_caps_its_capacity() -> None:
    """Long requests: a decode replica never runs more sequences than its KV cache holds."""
    request = replace(REQUEST, traffic=Traffic(input_tokens=8000, output_tokens=1000, rate_rps=8))
    for layout in _splits(_layouts(request)):
        engine = EngineLoad(layout.decode, request.traffic, 0.0)
        per_replica = layout.prediction.rate_rps / layout.replicas
        running = engine.load(per_replica, request.slo, prefill=False, decode=True).running
        assert running <= engine.kv_limit


def _pair(request: OptimizeRequest) -> tuple[PricedLayout, PricedLayout]:
    """The cheapest aggregated and split layouts meeting the SLOs."""
    layouts = [c for c in _layouts(request) if c.prediction.meets_slo]
    aggregated = min(
        (c for c in layouts if c.prefill is None), key=lambda c: c.prediction.cost_per_hour
    )
    split = min(
        (c for c in layouts if c.prefill is not None), key=lambda c: c.prediction.cost_per_hour
    )
    return aggregated, split


def _costing(layout: PricedLayout, cost: float) -> PricedLayout:
    return replace(layout, prediction=replace(layout.prediction, cost_per_hour=cost))


def test_a_cost_search_picks_a_split_only_beyond_the_models_margin() -> None:
    aggregated, split = _pair(REQUEST)
    key = rank.objective_order(REQUEST)
    cost = aggregated.prediction.cost_per_hour
    close = _costing(split, cost * (1 - PD_RANKING_MARGIN / 2))
    assert sorted([close, aggregated], key=key)[0] is aggregated
    far = _costing(split, cost * (1 - 2 * PD_RANKING_MARGIN))
    assert sorted([far, aggregated], key=key)[0] is far


def test_a_split_says_why_it_was_or_was_not_chosen() -> None:
    aggregated, split = _pair(REQUEST)
    arch = resolve_model(REQUEST)
    cost = aggregated.prediction.cost_per_hour
    agg = build_candidate(REQUEST, arch, aggregated)
    close = build_candidate(REQUEST, arch, _costing(split, cost / (1 + PD_RANKING_MARGIN / 2)))
    far = build_candidate(REQUEST, arch, _costing(split, cost / (1 + 2 * PD_RANKING_MARGIN)))
    assert agg is not None and close is not None and far is not None
    agg, close, far = (replace(c, warnings=()) for c in (agg, close, far))
    ranked = rank.with_margin_reasons([far, agg, close], REQUEST)
    assert ranked[0].reasons[-1].startswith(f"P/D split: {2 * PD_RANKING_MARGIN:.0%} cheaper")
    assert ranked[1].reasons == agg.reasons
    assert ranked[2].reasons[-1] == (
        f"not chosen over the aggregated {agg.label}: only {PD_RANKING_MARGIN / 2:.0%} cheaper, "
        f"within the model's {PD_RANKING_MARGIN:.0%} error on splits"
    )
