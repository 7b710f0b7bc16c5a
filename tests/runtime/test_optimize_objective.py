"""The optimizer's `throughput` objective (AIConfigurator's question) and `predict_layout`."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.optimize import (
    PD_RANKING_MARGIN,
    Candidate,
    Layout,
    Limits,
    OptimizeRequest,
    Slo,
    Traffic,
    optimize,
    predict_layout,
)
from runtime.optimize.search import pd_pools
from runtime.spec import RuntimeSpec

MODELS = st.sampled_from(["llama-3.1-8b", "qwen3-32b", "llama-3.1-70b"])
GPUS = st.sampled_from(["H100-SXM", "H200"])
TRAFFIC = st.builds(
    Traffic,
    input_tokens=st.integers(128, 8000),
    output_tokens=st.integers(16, 1024),
    rate_rps=st.just(1.0),
)
SLOS = st.builds(Slo, ttft_p90_s=st.floats(0.3, 5), itl_p90_s=st.floats(0.01, 0.2))
FEW = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _score(tokens_per_s_per_gpu: float, spec: RuntimeSpec) -> float:
    """What a throughput search ranks by: P/D gives up its margin."""
    margin = PD_RANKING_MARGIN if spec.disaggregation.enabled else 0.0
    return tokens_per_s_per_gpu * (1 - margin)


def _rank(candidate: Candidate) -> float:
    return _score(candidate.prediction.tokens_per_s_per_gpu, candidate.spec)


def _request(model: str, gpu: str, traffic: Traffic, slo: Slo, budget: int) -> OptimizeRequest:
    return OptimizeRequest(
        model=model,
        gpus=(gpu,),
        traffic=traffic,
        slo=slo,
        limits=Limits(max_gpus=budget),
        objective="throughput",
    )


@FEW
@given(MODELS, GPUS, TRAFFIC, SLOS, st.sampled_from([4, 8, 16]))
def test_throughput_pick_serves_the_most_per_gpu_within_the_budget(
    model: str, gpu: str, traffic: Traffic, slo: Slo, budget: int
) -> None:
    result = optimize(_request(model, gpu, traffic, slo, budget))
    if result.best is None:
        assert result.notes
        return
    best = _rank(result.best)
    assert result.best.warnings == ()
    for candidate in result.ranked:
        p = candidate.prediction
        assert p.meets_slo and p.gpus <= budget
        # A candidate with a validation warning of its own may serve more, but is never the
        # pick (issue 27).
        assert candidate.warnings or _rank(candidate) <= best
        # Loaded to capacity: the rate it is predicted at is the most it carries.
        assert p.rate_rps == p.capacity_rps


@FEW
@given(MODELS, GPUS, TRAFFIC, SLOS)
def test_the_cost_objective_never_beats_throughput_per_gpu(
    model: str, gpu: str, traffic: Traffic, slo: Slo
) -> None:
    """The cheapest pick, priced at its own capacity, is one of the layouts throughput ranks."""
    request = _request(model, gpu, traffic, slo, 8)
    ranked = optimize(request).ranked
    # The throughput search's top score: its pick's, or a candidate's it lists but never picks
    # for a validation warning of its own (issue 27).
    fast = max(ranked, key=_rank, default=None)
    cheap = optimize(replace(request, objective="cost")).best
    if cheap is None:
        return
    assert fast is not None
    s = cheap.spec
    layout = Layout(
        gpu=s.hardware.gpu,
        tp=s.disaggregation.decode.tp or s.parallelism.tp,
        quantization=s.quantization.method,
        kv_dtype=s.quantization.kv_cache_dtype,
        replicas=s.disaggregation.decode.replicas if s.disaggregation.enabled else 1,
        prefill_tp=s.disaggregation.prefill.tp if s.disaggregation.enabled else None,
        prefill_replicas=s.disaggregation.prefill.replicas if s.disaggregation.enabled else 0,
    )
    if s.speculator.enabled:
        return  # predict_layout prices plain engines; a speculating pick has no twin there
    priced = predict_layout(request, layout)
    assert priced is not None
    assert _score(priced.tokens_per_s_per_gpu, s) <= _rank(fast) * 1.0001


def test_predict_layout_agrees_with_the_search_and_refuses_what_does_not_fit() -> None:
    request = _request("llama-3.1-8b", "H200", Traffic(1024, 256, 1.0), Slo(1.0, 0.05), 8)
    request = replace(request, features=frozenset({"disaggregation"}))
    best = optimize(request).best
    assert best is not None
    s = best.spec
    d = s.disaggregation
    layout = Layout(
        gpu="H200",
        tp=(d.decode.tp or s.parallelism.tp) if d.enabled else s.parallelism.tp,
        replicas=d.decode.replicas if d.enabled else s.autoscaling.max_replicas,
        prefill_tp=(d.prefill.tp or s.parallelism.tp) if d.enabled else None,
        prefill_replicas=d.prefill.replicas if d.enabled else 0,
    )
    priced = predict_layout(request, layout)
    assert priced is not None and priced.meets_slo
    assert priced.tokens_per_s_per_gpu == best.prediction.tokens_per_s_per_gpu
    # A P/D layout is priced at its smaller pool's capacity.
    pd = predict_layout(request, Layout("H200", 1, replicas=1, prefill_tp=1, prefill_replicas=7))
    assert pd is not None and pd.gpus == 8 and pd.tokens_per_s_per_gpu > 0
    # 70B in BF16 does not fit one L40S; an impossible SLO fits but never meets.
    big = replace(request, model="llama-3.1-70b", gpus=("L40S",))
    assert predict_layout(big, Layout("L40S", 1)) is None
    hard = replace(request, slo=Slo(0.001, 0.0001))
    missed = predict_layout(hard, Layout("H200", 1))
    assert missed is not None and not missed.meets_slo


@given(
    st.floats(0.1, 100),
    st.floats(0.1, 100),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2, 4]),
    st.integers(2, 24),
)
def test_pd_pools_are_the_best_split_of_the_budget(
    p_cap: float, d_cap: float, p_tp: int, d_tp: int, budget: int
) -> None:
    """Against brute force: no split within the budget carries more requests per GPU."""
    p, d = pd_pools((p_cap, d_cap), (p_tp, d_tp), budget)
    if p_tp + d_tp > budget:
        assert (p, d) == (1, 1)
        return
    assert p * p_tp + d * d_tp <= budget

    def per_gpu(p: int, d: int) -> float:
        return min(p * p_cap, d * d_cap) / (p * p_tp + d * d_tp)

    brute = max(
        per_gpu(i, j)
        for i in range(1, budget // p_tp + 1)
        for j in range(1, (budget - i * p_tp) // d_tp + 1)
    )
    assert per_gpu(p, d) >= brute * (1 - 1e-9)
