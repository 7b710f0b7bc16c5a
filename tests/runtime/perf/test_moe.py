"""runtime/perf: mixture-of-experts steps and attention data parallelism, and the spread of
speculative accept lengths. Figures are the model's deterministic output (simulated seconds).
"""

from __future__ import annotations

import pytest

from runtime.perf.hardware import ModelShape, lookup_model, resolve_gpu
from runtime.perf.spec import resolve_spec
from runtime.perf.step import EngineShape, StepModel, StepWork


def shape(model_id: str) -> ModelShape:
    found = lookup_model(model_id)
    assert found is not None
    return found


QWEN_MOE = shape("qwen3-235b-a22b")
H200 = resolve_gpu("H200")


def step(tp: int, attn_dp: int = 1, ep: int | None = None) -> StepModel:
    """EP = TP (whole experts per GPU) unless `ep` says otherwise (1: experts sliced)."""
    engine = EngineShape(tp=tp, attn_dp=attn_dp, ep=tp if ep is None else ep)
    return StepModel(H200, QWEN_MOE, engine)


def test_expert_weights_follow_the_routing_not_the_active_share() -> None:
    # Qwen3-235B-A22B: 128 experts, 8 per token; ~227B of routed experts, ~8B of the rest.
    assert QWEN_MOE.expert_params_b == pytest.approx(227.1, rel=0.01)
    assert shape("llama-3.1-70b").expert_params_b == 0.0
    one = step(8)
    # One token streams a few experts; a large batch streams them all (once).
    small, large = one.decode_step_seconds(1, 1024), one.decode_step_seconds(256, 1024)
    assert small < large < 256 * small


def test_attention_dp_reads_a_ranks_share_of_the_kv_cache() -> None:
    """Qwen3-235B has 4 KV heads: TP8 replicates each on two GPUs, attention DP8 does not."""
    tp8, dp8 = step(8), step(8, attn_dp=8)
    assert dp8.attn_dp == 8 and dp8.attn_tp == 1 and tp8.attn_dp == 1
    long = StepWork(decode_seqs=512, decode_tokens=512, decode_context=512 * 32_000)
    short = StepWork(decode_seqs=512, decode_tokens=512, decode_context=512 * 256)
    # A rank reads its own sequences' cache: the long-context cost grows less under DP.
    assert dp8.step_seconds(long) - dp8.step_seconds(short) < (
        tp8.step_seconds(long) - tp8.step_seconds(short)
    )


def test_attention_dp_that_does_not_divide_tp_is_ignored() -> None:
    assert step(8, attn_dp=3).attn_dp == 1


def test_a_dense_model_keeps_its_physics_under_the_moe_fields() -> None:
    llama = shape("llama-3.1-70b")
    plain = StepModel(H200, llama, EngineShape(tp=4))
    assert plain.moe is None
    assert plain.decode_step_seconds(32, 2048) == StepModel(
        H200, llama, EngineShape(tp=4)
    ).decode_step_seconds(32, 2048)


@pytest.mark.parametrize(
    ("tp", "attn_dp", "ep", "batch", "aic_ms"),
    [
        # AIConfigurator 0.12 h200_sxm SGLang static_gen, 1024 tokens of context, batch per
        # attention rank (bench/calibration.py's MoE rows): EP = TP, and experts sliced (ep 1).
        (8, 1, 8, 128, 31.28),
        (8, 8, 8, 128, 63.51),
        (8, 8, 8, 1024, 376.98),
        (4, 1, 4, 32, 32.01),
        (8, 8, 1, 128, 51.77),
        (8, 8, 1, 512, 122.29),
        (4, 1, 1, 128, 38.14),
    ],
)
def test_moe_decode_is_calibrated_against_aiconfigurator(
    tp: int, attn_dp: int, ep: int, batch: int, aic_ms: float
) -> None:
    ours = step(tp, attn_dp, ep).decode_step_seconds(batch * attn_dp, 1024) * 1e3
    assert ours == pytest.approx(aic_ms, rel=0.25)


def test_a_bad_speculative_step_accepts_fewer_tokens_than_the_mean() -> None:
    llama = shape("llama-3.1-8b")
    spec = resolve_spec("NGRAM", llama, None)
    assert spec.accept_length_quantile(0.1) <= spec.accept_length
    assert spec.accept_length_quantile(0.1) <= spec.accept_length_quantile(0.5)
    assert spec.accept_length_quantile(0.999) <= spec.shape.num_steps + 1
