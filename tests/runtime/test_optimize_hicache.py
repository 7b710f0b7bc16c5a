"""HiCache in the optimizer (issue 29 item 3): a traffic profile whose prefix working set outgrows
the GPU's KV pool makes a host tier a candidate, priced by what it keeps from recomputation, and
a waterfall step; a working set that fits leaves it out."""

from __future__ import annotations

from runtime.optimize import OptimizeRequest, Traffic, optimize
from runtime.optimize.queueing import EngineLoad
from runtime.optimize.rank import resolve_gpus, resolve_model
from runtime.optimize.shapes import engine_shapes
from runtime.validate import has_errors, validate

MODEL = "meta-llama/Llama-3.1-70B-Instruct"


def request(working_set: int) -> OptimizeRequest:
    traffic = Traffic(
        input_tokens=6000,
        output_tokens=64,
        rate_rps=4.0,
        prefix_share=0.95,
        working_set_tokens=working_set,
    )
    return OptimizeRequest(model=MODEL, gpus=("H100-SXM",), traffic=traffic)


def test_a_working_set_past_the_kv_pool_makes_hicache_the_cheaper_pick() -> None:
    result = optimize(request(600_000))
    assert result.best is not None
    host = result.best.spec.kv_cache.tiers.host
    assert host is not None and host.resolved_ratio > 1
    assert not has_errors(validate(result.best.spec))
    steps = {step.step: step.candidate for step in result.waterfall}
    before, after = steps["cache_aware"], steps["hicache"]
    assert before is not None and after is not None
    assert before.spec.kv_cache.tiers.host is None
    assert after.prediction.cost_per_hour < before.prediction.cost_per_hour


def test_a_working_set_that_fits_gets_no_host_tier() -> None:
    result = optimize(request(0))
    assert result.best is not None and result.best.spec.kv_cache.tiers.host is None
    shapes = list(engine_shapes(request(0), resolve_model(request(0)), resolve_gpus(request(0))))
    assert shapes and all(s.hicache_ratio is None for s in shapes)


def test_a_working_set_past_the_pool_costs_hits_and_the_host_tier_gives_them_back() -> None:
    big = request(600_000)
    shapes = list(engine_shapes(big, resolve_model(big), resolve_gpus(big)))
    plain = next(s for s in shapes if s.hicache_ratio is None and s.kv_tokens < 600_000)
    tiered = next(
        s for s in shapes if s.hicache_ratio is not None and s.tp == plain.tp
        and s.quantization == plain.quantization and s.kv_dtype == plain.kv_dtype
        and s.speculator == plain.speculator
    )  # fmt: skip
    cached = big.traffic.cached_share(True)
    fits = EngineLoad(plain, request(0).traffic, cached)
    spills = EngineLoad(plain, big.traffic, cached)
    kept = EngineLoad(tiered, big.traffic, cached)
    assert spills.prefill_latency > 2 * fits.prefill_latency  # most documents recomputed
    assert kept.prefill_latency < spills.prefill_latency / 2  # loaded back instead
    assert kept.prefix_host > 0


def test_the_autoscalers_replica_capacity_counts_the_host_tier() -> None:
    """A replica whose GPU pool cannot keep every conversation's history between turns: with a
    host tier the histories come back from host memory, so it carries more within the same
    targets than the same replica without one (which the capacity ignored before)."""
    from runtime.capacity import Workload, replica_model
    from runtime.spec import RuntimeSpec

    base = {
        "model": {"source": MODEL, "context_length": 65536},
        "hardware": {"gpu": "H100-SXM"},
        "parallelism": {"tp": 2},
        "quantization": {"method": "fp8"},
    }
    plain = RuntimeSpec.model_validate(base)
    tiered = RuntimeSpec.model_validate({**base, "kv_cache": {"tiers": {"host": {"ratio": 4}}}})
    agent = Workload(input_tokens=30_000, output_tokens=50, cached_share=0.95)
    without, with_host = (
        replica_model(plain, "engine", agent),
        replica_model(tiered, "engine", agent),
    )
    assert without is not None and with_host is not None
    assert with_host.capacity_rps(5.0, 0.5) > without.capacity_rps(5.0, 0.5)


def test_no_two_candidates_are_one_spec_and_pd_pools_share_their_kv_tiers() -> None:
    """A P/D spec holds one set of KV tiers for both pools: a prefill pool priced with a host
    tier beside a decode pool without one was the same spec twice, at two capacities."""
    from runtime.optimize import Slo

    traffic = Traffic(input_tokens=2000, output_tokens=200, rate_rps=6.0, turns=2)
    result = optimize(
        OptimizeRequest(
            model="meta-llama/Llama-3.1-8B-Instruct",
            gpus=("H100-SXM", "L40S"),
            traffic=traffic,
            slo=Slo(ttft_p90_s=1.0, itl_p90_s=0.04),
        )
    )
    specs = [c.spec.model_dump_json() for c in result.ranked]
    assert len(specs) == len(set(specs)), "a spec ranked twice"
    for candidate in result.ranked:
        assert ("hicache" in candidate.features) == candidate.spec.kv_cache.hicache
