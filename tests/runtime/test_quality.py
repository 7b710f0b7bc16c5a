"""The KL quality gate's math (``runtime.quality``) and the runner's prompt loading.

Properties hold for any top-k distributions: KL is never negative, a distribution scored against
itself costs nothing, top-1 agreement stays in [0, 1]. Examples pin the tail-mass handling, the
per-prompt summaries and the verdict.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.quality import (
    GateThresholds,
    PromptScore,
    QualityReport,
    percentile,
    score_prompt,
    token_kl,
    top1,
    top1_agreement,
)
from runtime.quality_run import QualityRunError, builtin_prompts, load_prompts


@st.composite
def top_k(draw: st.DrawFn) -> dict[int, float]:
    """A top-k of a normalised distribution: k token ids with logprobs summing to at most 1."""
    ids = draw(st.lists(st.integers(0, 60), min_size=1, max_size=8, unique=True))
    weights = draw(st.lists(st.floats(1e-6, 1.0), min_size=len(ids) + 1, max_size=len(ids) + 1))
    total = sum(weights)  # the last weight is the tail mass outside the top-k
    return {token: math.log(w / total) for token, w in zip(ids, weights, strict=False)}


@settings(max_examples=200, deadline=None)
@given(top_k(), top_k())
def test_kl_is_never_negative(baseline: dict[int, float], candidate: dict[int, float]) -> None:
    assert token_kl(baseline, candidate) >= 0.0


@settings(max_examples=200, deadline=None)
@given(top_k())
def test_kl_of_a_distribution_with_itself_is_zero(dist: dict[int, float]) -> None:
    assert token_kl(dist, dict(dist)) == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(top_k(), top_k()), max_size=12))
def test_top1_agreement_is_a_share(pairs: list[tuple[dict[int, float], dict[int, float]]]) -> None:
    share = top1_agreement([b for b, _ in pairs], [c for _, c in pairs])
    assert 0.0 <= share <= 1.0


def test_kl_counts_the_tail_and_tokens_the_candidate_did_not_list() -> None:
    baseline = {1: math.log(0.6), 2: math.log(0.3)}  # tail 0.1
    # Same listed mass, tail moved: only the tail bucket differs.
    moved = {1: math.log(0.6), 2: math.log(0.2)}  # tail 0.2
    expected = 0.3 * math.log(0.3 / 0.2) + 0.1 * math.log(0.1 / 0.2)
    assert token_kl(baseline, moved) == pytest.approx(expected)
    # Token 2 missing from the candidate's top-k: estimated below its smallest listed
    # probability, so the divergence is large but finite.
    missing = {1: math.log(0.9), 3: math.log(0.05)}
    assert 0.3 < token_kl(baseline, missing) < 10


def test_top1_breaks_ties_by_token_id() -> None:
    assert top1({7: -0.5, 3: -0.5, 9: -2.0}) == 3


def test_per_prompt_summaries_and_report() -> None:
    same = {1: math.log(0.7), 2: math.log(0.2)}
    flipped = {1: math.log(0.2), 2: math.log(0.7)}
    calm = score_prompt(0, "calm prompt", [same, same], [same, same])
    rough = score_prompt(1, "rough prompt", [same, same], [same, flipped])
    assert (calm.mean_kl, calm.top1_agreement) == (0.0, 1.0)
    assert rough.top1_agreement == 0.5 and rough.max_kl == rough.p99_kl > 0
    report = QualityReport(prompts=(calm, rough))
    assert report.tokens == 4 and report.top1_agreement == 0.75
    assert report.mean_kl == pytest.approx(rough.max_kl / 4)
    assert [p.prompt for p in report.worst(1)] == ["rough prompt"]
    body = report.as_dict()
    assert body["worst_prompts"][0]["prompt"] == "rough prompt"
    assert body["passed"] is False and len(body["reasons"]) == 2


def test_verdict_uses_the_revision_thresholds() -> None:
    score = PromptScore(index=0, prompt="p", kls=(0.02, 0.04), agreements=2)
    assert QualityReport(prompts=(score,)).verdict().passed
    strict = GateThresholds(max_mean_kl=0.01, min_top1_agreement=0.95)
    verdict = QualityReport(prompts=(score,), thresholds=strict).verdict()
    assert not verdict.passed and "mean KL 0.0300" in verdict.reasons[0]
    assert not QualityReport(prompts=()).verdict().passed  # nothing scored proves nothing
    with pytest.raises(ValueError):
        GateThresholds(min_top1_agreement=1.5)


def test_percentile_is_nearest_rank() -> None:
    values = [float(i) for i in range(1, 101)]
    assert percentile(values, 0.99) == 99.0 and percentile(values, 1.0) == 100.0
    assert percentile([], 0.99) == 0.0


def test_prompt_sets(tmp_path: Path) -> None:
    assert len(builtin_prompts()) >= 10 and all(builtin_prompts())
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"prompt": "one"}\n\n{"text": "two"}\n')
    assert load_prompts(path) == ["one", "two"]
    path.write_text('{"prompt": ""}\n')
    with pytest.raises(QualityRunError, match=":1:"):
        load_prompts(path)
