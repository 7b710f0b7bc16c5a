"""The SLO policy of the pure decision: the performance model (the real one, for a real spec)
turns TTFT/ITL targets into per-replica capacity, corrected by what the endpoint showed; a split
endpoint's prefill and decode pools each answer their own signals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from deployments.autoscaling.correction import CORRECTION_DEADBAND
from deployments.autoscaling.decide import decide, decide_pools
from deployments.autoscaling.types import Observations, Sample, State
from runtime.capacity import Workload, replica_model
from runtime.spec import AutoscalingSettings, RuntimeSpec
from runtime.validate import validate

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
LONG_AGO = NOW - timedelta(hours=2)
SLO = {"ttft_p90_ms": 500, "itl_p90_ms": 40}
POLICY = {"min_replicas": 1, "max_replicas": 8, "window_seconds": 60,
          "scale_down_delay_seconds": 120, "target_utilization": 1.0, "slo": SLO}  # fmt: skip
SPLIT = {**POLICY, "prefill": {"min_replicas": 1, "max_replicas": 4},
         "decode": {"min_replicas": 1, "max_replicas": 4}}  # fmt: skip


def spec(disaggregated: bool = False, **autoscaling: Any) -> RuntimeSpec:
    data: dict[str, Any] = {
        "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
        "hardware": {"gpu": "H100-SXM"},
        "autoscaling": autoscaling or POLICY,
    }
    if disaggregated:
        data["disaggregation"] = {"enabled": True}
    return RuntimeSpec.model_validate(data)


def steady(seconds: int = 300, **figures: Any) -> list[Sample]:
    return [
        Sample(NOW - timedelta(seconds=s), **{"in_flight": 0.0, **figures})
        for s in range(0, seconds + 1, 15)
    ]


def models(endpoint: RuntimeSpec) -> dict[str, Any]:
    roles = ("prefill", "decode") if endpoint.disaggregation.enabled else ("engine",)
    return {role: replica_model(endpoint, role, Workload()) for role in roles}  # type: ignore[arg-type]


def engine_decision(
    samples: list[Sample], replicas: int = 1, corrections: dict[str, float] | None = None
) -> Any:
    endpoint = spec()
    observations = Observations(samples=samples, models=models(endpoint),
                                corrections={"engine": corrections or {}})  # fmt: skip
    state = State(replicas=replicas, last_scaled_at=LONG_AGO)
    return decide(endpoint.autoscaling, observations, state, NOW)


def test_an_arrival_rate_past_one_replicas_capacity_adds_replicas() -> None:
    model = replica_model(spec(), "engine", Workload())
    assert model is not None
    capacity = model.capacity_rps(0.5, 0.04)
    decision = engine_decision(steady(requests_per_s=2.5 * capacity, ready=1))
    assert (decision.current, decision.desired) == (1, 2)  # at most doubling
    assert "arrival rate" in decision.reason
    assert decision.inputs["up_target"] == 3
    assert decision.inputs["capacity_rps_per_replica"] == pytest.approx(capacity, rel=0.01)


def test_a_load_the_model_says_fits_holds() -> None:
    model = replica_model(spec(), "engine", Workload())
    assert model is not None
    rate = 0.5 * model.capacity_rps(0.5, 0.04)
    predicted = model.predict(rate)
    samples = steady(requests_per_s=rate, ttft_p90=predicted.ttft_s, itl_p90=predicted.itl_s,
                     ready=1, kv_usage=0.2)  # fmt: skip
    decision = engine_decision(samples)
    assert not decision.changed, decision.reason
    assert decision.inputs["correction"] == {"ttft": 1.0, "itl": 1.0}


def test_observed_latency_above_the_prediction_corrects_the_capacity() -> None:
    model = replica_model(spec(), "engine", Workload())
    assert model is not None
    rate = 0.6 * model.capacity_rps(0.5, 0.04)
    predicted = model.predict(rate)
    # The endpoint decodes twice as slowly as the model says (still within the ITL target).
    samples = steady(requests_per_s=rate, ttft_p90=predicted.ttft_s, itl_p90=2 * predicted.itl_s,
                     ready=1)  # fmt: skip
    decision = engine_decision(samples)
    assert decision.inputs["correction"]["itl"] == pytest.approx(2.0, rel=0.01)
    assert decision.inputs["capacity_rps_per_replica"] < model.capacity_rps(0.5, 0.04)
    assert decision.desired == 2, decision.reason


def test_the_correction_is_bounded() -> None:
    model = replica_model(spec(), "engine", Workload())
    assert model is not None
    rate = 0.8 * model.capacity_rps(0.5, 0.04)
    samples = steady(requests_per_s=rate, itl_p90=100 * model.predict(rate).itl_s, ready=1)
    decision = engine_decision(samples)
    assert decision.inputs["correction"]["itl"] == 4.0


def test_light_load_latencies_are_left_out_of_the_fit() -> None:
    # At a tenth of capacity the model predicts an ITL far below the target: a p90 five times
    # it (a few tokens that met a prompt's chunk) says nothing about where capacity ends.
    model = replica_model(spec(), "engine", Workload())
    assert model is not None
    rate = 0.1 * model.capacity_rps(0.5, 0.04)
    samples = steady(requests_per_s=rate, itl_p90=5 * model.predict(rate).itl_s, ready=1)
    assert engine_decision(samples).inputs["correction"]["itl"] == 1.0


def faster(share: float, replicas: int, speed: float) -> list[Sample]:
    """Samples of ``replicas`` replicas sharing ``share`` of one modelled replica's capacity each,
    on an endpoint whose latencies are ``speed`` times what the model predicts at that rate."""
    model = replica_model(spec(), "engine", Workload())
    assert model is not None
    rate = share * model.capacity_rps(0.5, 0.04)
    predicted = model.predict(rate)
    return steady(requests_per_s=rate * replicas, ttft_p90=speed * predicted.ttft_s,
                  itl_p90=speed * predicted.itl_s, ready=replicas)  # fmt: skip


def test_an_endpoint_faster_than_its_model_is_corrected_down_and_needs_fewer_replicas() -> None:
    # Two replicas at three quarters of the model's capacity each, answering twice as fast as
    # the model says: one replica of this endpoint carries it all.
    samples = faster(0.75, replicas=2, speed=0.5)
    corrections: dict[str, float] = {}
    steps = []
    for _ in range(6):  # passes, each starting from the corrections the last one applied
        decision = engine_decision(samples, replicas=2, corrections=corrections)
        if decision.corrected is not None:
            assert decision.corrected.before == corrections
            corrections = dict(decision.corrected.after)
            steps.append(corrections["itl"])
    # Down a bounded step per pass, until the fit is within the deadband below what is applied.
    assert steps == [0.8, 0.64, 0.512]
    assert decision.inputs["correction_fitted"]["itl"] == pytest.approx(0.5, rel=0.02)
    assert decision.inputs["correction"]["itl"] == 0.512
    assert decision.inputs["capacity_rps_per_replica"] > 1.8 * replica_model(
        spec(), "engine", Workload()
    ).capacity_rps(0.5, 0.04)  # type: ignore[union-attr]
    assert (decision.current, decision.desired) == (2, 1), decision.reason


def test_a_fit_within_the_deadband_leaves_the_correction_and_a_slower_one_moves_it_up() -> None:
    held = engine_decision(faster(0.6, replicas=1, speed=0.72), corrections={"itl": 0.8})
    assert held.corrected is None and held.inputs["correction"]["itl"] == 0.8
    up = engine_decision(faster(0.6, replicas=1, speed=1.5), corrections={"itl": 0.6})
    assert up.corrected is not None and up.corrected.after["itl"] == pytest.approx(1.5, rel=0.02)
    assert "ITL x0.60 -> x1." in up.corrected.message


def test_a_correction_lapses_when_light_load_shows_no_evidence() -> None:
    # At a tenth of capacity the model's ITL is far below the target: nothing to fit.
    decision = engine_decision(faster(0.1, replicas=1, speed=0.5), corrections={"itl": 0.6})
    assert decision.inputs["correction_fitted"] == {}
    assert decision.corrected is not None and dict(decision.corrected.after) == {}
    assert "ITL x0.60 -> x1.00" in decision.corrected.message


def test_a_steady_endpoint_settles_on_one_correction() -> None:
    samples = faster(0.6, replicas=1, speed=0.7)
    corrections: dict[str, float] = {}
    moves = 0
    for _ in range(10):
        decision = engine_decision(samples, corrections=corrections)
        if decision.corrected is not None:
            moves += 1
            corrections = dict(decision.corrected.after)
    # One move, to within the deadband above the fit; then it holds however often it is asked.
    assert moves == 1 and corrections["itl"] * (1 - CORRECTION_DEADBAND) <= 0.7 * 1.02
    assert engine_decision(samples, corrections=corrections).corrected is None


def test_a_nearly_full_kv_cache_adds_a_replica_whatever_the_rate() -> None:
    decision = engine_decision(steady(kv_usage=0.97, ready=2), replicas=2)
    assert decision.desired == 3 and "KV-cache usage" in decision.reason


def test_queued_prefill_tokens_past_the_ttft_budget_add_replicas() -> None:
    model = replica_model(spec(), "engine", Workload())
    assert model is not None
    tokens = 3 * model.prefill_tokens_per_s * 0.5  # three TTFT targets' worth of prompts
    decision = engine_decision(steady(queued_prefill_tokens=tokens, ready=1))
    assert decision.desired == 2 and "queued prefill tokens" in decision.reason
    assert decision.inputs["up_target"] == 3


def test_a_quiet_endpoint_steps_down_after_the_delay() -> None:
    decision = engine_decision(steady(requests_per_s=0.1, kv_usage=0.01, ready=3), replicas=3)
    assert (decision.current, decision.desired) == (3, 2), decision.reason


def pool_decisions(
    prefill: list[Sample], decode: list[Sample], policy: dict[str, Any] = SPLIT
) -> dict[str, Any]:
    endpoint = spec(disaggregated=True, **policy)
    observations = Observations(pools={"prefill": prefill, "decode": decode},
                                models=models(endpoint))  # fmt: skip
    state = State(replicas=1, disaggregated=True, pools={"prefill": 1, "decode": 1})
    decisions = decide_pools(endpoint.autoscaling, observations, state, NOW)
    return {str(d.pool): d for d in decisions}


def test_a_prefill_backlog_scales_the_prefill_pool_and_not_decode() -> None:
    quiet = steady(in_flight=1.0, kv_usage=0.05, itl_p90=0.01, ready=1)
    backlog = steady(queued=8, queued_prefill_tokens=80_000, ttft_p90=2.0, ready=1)
    decisions = pool_decisions(backlog, quiet)
    assert decisions["prefill"].desired == 2, decisions["prefill"].reason
    assert decisions["prefill"].inputs["pool"] == "prefill"
    assert not decisions["decode"].changed, decisions["decode"].reason
    assert decisions["decode"].reason.startswith("decode pool:")


def test_a_full_decode_cache_scales_the_decode_pool_and_not_prefill() -> None:
    idle = steady(ttft_p90=0.05, ready=1)
    full = steady(in_flight=40, kv_usage=0.95, itl_p90=0.02, ready=1)
    decisions = pool_decisions(idle, full)
    assert decisions["decode"].desired == 2 and "KV-cache usage" in decisions["decode"].reason
    assert not decisions["prefill"].changed


def test_a_pool_without_bounds_keeps_its_size() -> None:
    policy = {**POLICY, "decode": {"min_replicas": 1, "max_replicas": 4}}
    backlog = steady(queued=8, queued_prefill_tokens=80_000, ttft_p90=2.0, ready=1)
    decisions = pool_decisions(backlog, steady(kv_usage=0.95, ready=1), policy)
    assert not decisions["prefill"].changed
    assert "no autoscaling.prefill bounds" in decisions["prefill"].reason
    assert decisions["decode"].desired == 2


def test_the_endpoint_decision_leaves_split_pools_alone() -> None:
    endpoint = spec(disaggregated=True, **SPLIT)
    state = State(replicas=1, disaggregated=True, pools={"prefill": 1, "decode": 1})
    decision = decide(endpoint.autoscaling, Observations(), state, NOW)
    assert not decision.changed and "disaggregated" in decision.reason


# --- settings ------------------------------------------------------------------------------------


def test_an_slo_needs_a_target() -> None:
    with pytest.raises(ValidationError, match="needs a TTFT or an ITL target"):
        AutoscalingSettings.model_validate({"slo": {}})


def codes(**autoscaling: Any) -> set[str]:
    return {issue.code for issue in validate(spec(disaggregated=True, **autoscaling))}


def test_pool_bounds_are_checked() -> None:
    assert "autoscaling_pool_min_above_max" in codes(
        slo=SLO, prefill={"min_replicas": 3, "max_replicas": 2}
    )
    assert "autoscaling_pools_without_slo" in codes(decode={"min_replicas": 1, "max_replicas": 2})
    assert not codes(**SPLIT) & {"autoscaling_pool_min_above_max", "autoscaling_pools_without_slo",
                                 "autoscaling_ignored_with_disaggregation"}  # fmt: skip


def test_pools_hold_while_the_split_endpoint_is_at_zero() -> None:
    endpoint = spec(disaggregated=True, **SPLIT)
    backlog = steady(queued=8, queued_prefill_tokens=80_000, ttft_p90=2.0, ready=1)
    observations = Observations(pools={"prefill": backlog, "decode": backlog},
                                models=models(endpoint))  # fmt: skip
    state = State(replicas=0, disaggregated=True, pools={"prefill": 1, "decode": 1})
    decisions = decide_pools(endpoint.autoscaling, observations, state, NOW)
    assert [d.changed for d in decisions] == [False, False]
    assert all("at zero" in d.reason for d in decisions)


def test_a_split_endpoint_may_scale_to_zero() -> None:
    assert not {issue.code for issue in validate(spec(
        disaggregated=True, **{**SPLIT, "min_replicas": 0, "scale_to_zero": True}
    ))}  # fmt: skip
