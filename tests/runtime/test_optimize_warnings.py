"""Every spec the optimizer returns validates with no warning, or its reasons say why it kept it.

The reported case: the pick set ``max_running_requests`` 8 and left the autoscaler's concurrency
target at its default 32, which the validator warns about. Over the catalogues (models, GPUs)
and many traffic profiles and SLOs, the only warnings a returned candidate may carry are the
ones the optimizer keeps on purpose (``KEPT_WARNINGS``), each explained in its reasons.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.catalog import list_gpus, list_models
from runtime.optimize import (
    KEPT_WARNINGS,
    Candidate,
    Objective,
    OptimizeRequest,
    OptimizeResult,
    Slo,
    Traffic,
    optimize,
)
from runtime.validate import validate

TARGETS = st.sampled_from(sorted(m.id for m in list_models() if not m.draft_for))
GPUS = st.sampled_from([g.id for g in list_gpus()])
TRAFFIC = st.builds(
    Traffic,
    input_tokens=st.integers(64, 12000),
    output_tokens=st.integers(8, 2048),
    rate_rps=st.none() | st.floats(0.05, 60),
    concurrency=st.none() | st.integers(1, 256),
    prefix_share=st.floats(0, 0.9),
    turns=st.integers(1, 5),
)
SLOS = st.builds(Slo, ttft_p90_s=st.floats(0.05, 8), itl_p90_s=st.floats(0.005, 0.3))
OBJECTIVES = st.sampled_from(["cost", "throughput"])
SOME = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def returned(result: OptimizeResult) -> list[Candidate]:
    steps = [step.candidate for step in result.waterfall if step.candidate]
    return [*result.ranked, *result.pareto, *steps]


def assert_validates_or_says_why(candidate: Candidate) -> None:
    warnings = [issue for issue in validate(candidate.spec) if not issue.is_error]
    assert list(candidate.warnings) == warnings, candidate.label
    for issue in warnings:
        assert issue.code in KEPT_WARNINGS, (candidate.label, issue)
        assert any(issue.code in reason and "kept because" in reason
                   for reason in candidate.reasons), (candidate.label, issue)  # fmt: skip
    scale, running = candidate.spec.autoscaling, candidate.spec.batching.max_running_requests
    assert running is not None and scale.concurrency_target <= running, candidate.label


@SOME
@given(TARGETS, GPUS, TRAFFIC, SLOS, OBJECTIVES)
def test_every_returned_spec_validates_without_warnings_or_says_why(
    model: str, gpu: str, traffic: Traffic, slo: Slo, objective: Objective
) -> None:
    request = OptimizeRequest(model=model, gpus=(gpu,), traffic=traffic, slo=slo,
                              objective=objective)  # fmt: skip
    for candidate in returned(optimize(request)):
        assert_validates_or_says_why(candidate)


def test_the_reported_pick_carries_no_warning() -> None:
    # The default profile over the whole catalogue: the pick runs at most 8 requests at once,
    # and its concurrency target was the default 32.
    result = optimize(OptimizeRequest(model="meta-llama/Llama-3.1-8B-Instruct"))
    best = result.best
    assert best is not None
    assert best.spec.batching.max_running_requests == 8
    assert validate(best.spec) == [] and best.warnings == ()
    assert best.spec.autoscaling.concurrency_target == 8
    for candidate in returned(result):
        assert_validates_or_says_why(candidate)
