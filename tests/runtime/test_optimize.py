"""The optimizer: valid candidates, the cheapest meets its SLOs, tighter SLOs never cost less."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.__main__ import main
from runtime.optimize import (
    PD_RANKING_MARGIN,
    WATERFALL,
    Candidate,
    Limits,
    OptimizeError,
    OptimizeRequest,
    OptimizeResult,
    Slo,
    Traffic,
    optimize,
    result_dict,
)
from runtime.spec import Architecture
from runtime.validate import has_errors, validate

# Two GPU types keep each search small; the full catalogue is the bench's business.
MODELS = st.sampled_from(["llama-3.1-8b", "qwen3-32b", "llama-3.1-70b"])
GPUS = st.sampled_from([("H100-SXM",), ("H200",), ("L40S", "B200")])
TRAFFIC = st.builds(
    Traffic,
    input_tokens=st.integers(128, 8000),
    output_tokens=st.integers(16, 1024),
    rate_rps=st.floats(0.2, 40),
    prefix_share=st.floats(0, 0.8),
    turns=st.integers(1, 4),
)
SLOS = st.builds(Slo, ttft_p90_s=st.floats(0.1, 5), itl_p90_s=st.floats(0.005, 0.2))
FEW = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _request(model: str, gpus: tuple[str, ...], traffic: Traffic, slo: Slo) -> OptimizeRequest:
    return OptimizeRequest(model=model, gpus=gpus, traffic=traffic, slo=slo)


def _returned(result: OptimizeResult) -> list[object]:
    steps = [step.candidate for step in result.waterfall if step.candidate]
    return [*result.ranked, *result.pareto, *steps]


@FEW
@given(MODELS, GPUS, TRAFFIC, SLOS)
def test_every_candidate_passes_validate(
    model: str, gpus: tuple[str, ...], traffic: Traffic, slo: Slo
) -> None:
    result = optimize(_request(model, gpus, traffic, slo))
    for candidate in [*result.ranked, *result.pareto]:
        assert not has_errors(validate(candidate.spec)), candidate.label
    for step in result.waterfall:
        if step.candidate is not None:
            assert not has_errors(validate(step.candidate.spec))


def _margin(candidate: Candidate) -> float:
    return PD_RANKING_MARGIN if candidate.spec.disaggregation.enabled else 0.0


@FEW
@given(MODELS, GPUS, TRAFFIC, SLOS)
def test_cheapest_meets_the_slo_and_is_cheapest(
    model: str, gpus: tuple[str, ...], traffic: Traffic, slo: Slo
) -> None:
    result = optimize(_request(model, gpus, traffic, slo))
    if result.best is None:
        assert result.notes  # a person is told why nothing came back
        return
    p = result.best.prediction
    assert p.meets_slo and p.ttft_p90_s <= slo.ttft_p90_s and p.itl_p90_s <= slo.itl_p90_s
    assert p.capacity_rps >= traffic.rate_rps  # type: ignore[operator]
    # The cheapest of those without a validation warning of their own (a warned one is listed
    # but never picked, issue 27); a P/D split is priced PD_RANKING_MARGIN dearer than predicted
    # (chosen only where it wins by more than the model's error on splits).
    assert result.best.warnings == ()
    assert all(p.cost_per_hour <= c.prediction.cost_per_hour * (1 + _margin(c))
               for c in result.ranked if not c.warnings)  # fmt: skip
    assert result.best.spec.hardware.gpu in gpus


@FEW
@given(MODELS, GPUS, TRAFFIC, SLOS, st.floats(0.2, 1), st.floats(0.2, 1))
def test_tightening_an_slo_never_lowers_the_cost(
    model: str,
    gpus: tuple[str, ...],
    traffic: Traffic,
    slo: Slo,
    ttft_factor: float,
    itl_factor: float,
) -> None:
    loose = optimize(_request(model, gpus, traffic, slo)).best
    tight_slo = Slo(slo.ttft_p90_s * ttft_factor, slo.itl_p90_s * itl_factor)
    tight = optimize(_request(model, gpus, traffic, tight_slo)).best
    if tight is not None:
        assert loose is not None
        assert tight.prediction.cost_per_hour >= loose.prediction.cost_per_hour


@FEW
@given(MODELS, GPUS, TRAFFIC, SLOS)
def test_waterfall_never_costs_more_as_optimizations_are_added(
    model: str, gpus: tuple[str, ...], traffic: Traffic, slo: Slo
) -> None:
    result = optimize(_request(model, gpus, traffic, slo))
    assert [step.step for step in result.waterfall] == ["baseline", *WATERFALL]
    # The baseline is the model's simplest deployment (issue 27), which may miss the targets
    # the steps after it meet: the costs fall from the first optimization on.
    costs = [s.candidate.prediction.cost_per_hour for s in result.waterfall[1:] if s.candidate]
    assert costs == sorted(costs, reverse=True)
    # Each step uses only the optimizations enabled so far.
    enabled: set[str] = set()
    for step in result.waterfall:
        if step.step != "baseline":
            enabled.add(step.step)
        if step.candidate is not None:
            assert step.candidate.features <= enabled
    if result.best is not None:
        last = result.waterfall[-1].candidate
        assert last is not None
        assert last.prediction.cost_per_hour == result.best.prediction.cost_per_hour


def test_pd_wins_long_prompts_under_a_tight_itl() -> None:
    """Long prompts stall an aggregated engine's decode steps; a P/D split removes the stall."""
    result = optimize(
        OptimizeRequest(
            model="llama-3.1-70b",
            gpus=("H100-SXM",),
            traffic=Traffic(input_tokens=6000, output_tokens=300, rate_rps=4),
            slo=Slo(ttft_p90_s=2.0, itl_p90_s=0.03),
        )
    )
    assert result.best is not None and result.best.spec.disaggregation.enabled
    assert "disaggregation" in result.best.features


def test_aggregated_wins_short_prompts() -> None:
    result = optimize(
        OptimizeRequest(
            model="llama-3.1-8b",
            gpus=("H100-SXM",),
            traffic=Traffic(input_tokens=200, output_tokens=200, rate_rps=2),
            slo=Slo(ttft_p90_s=1.0, itl_p90_s=0.05),
        )
    )
    assert result.best is not None and not result.best.spec.disaggregation.enabled
    assert result.best.prediction.gpus == 1


def test_limits_and_impossible_slos() -> None:
    request = OptimizeRequest(
        model="llama-3.1-70b",
        gpus=("H100-SXM",),
        traffic=Traffic(rate_rps=50),
        limits=Limits(max_gpus=2),
    )
    result = optimize(request)
    assert all(c.prediction.gpus <= 2 for c in result.ranked)
    impossible = optimize(OptimizeRequest(model="llama-3.1-8b", gpus=("L40S",),
                                          slo=Slo(ttft_p90_s=0.001, itl_p90_s=0.0001)))  # fmt: skip
    assert impossible.best is None and impossible.ranked == ()
    assert "nothing meets the SLOs" in impossible.notes[0]


def test_custom_architecture_and_unknown_model() -> None:
    arch = Architecture(
        num_layers=24, hidden_size=2048, num_attention_heads=16, num_kv_heads=4, head_dim=128,
        vocab_size=64000, params_b=2.0, max_context=32768,
    )  # fmt: skip
    result = optimize(OptimizeRequest(model="acme/tiny-2b", architecture=arch, gpus=("L40S",)))
    assert result.best is not None
    assert result.best.spec.model.architecture == arch
    with pytest.raises(OptimizeError, match="not in the catalogue"):
        optimize(OptimizeRequest(model="acme/unknown"))
    json.dumps(result_dict(result))  # the API's and the CLI's form is plain JSON


def test_cli_optimize(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["optimize", "llama-3.1-8b", "--gpu", "H100-SXM", "--rate", "5", "--itl", "0.04"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "cheapest meeting the SLOs: H100-SXM" in out and "waterfall:" in out
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["best"]["predicted"]["meets_slo"] is True
    assert main(["optimize", "nobody/nothing"]) == 2
    assert "not in the catalogue" in capsys.readouterr().err
