"""runtime/perf: a small model's decode step as tensor parallelism widens.

Reference figures: AIConfigurator 0.12 / aisimulate 0.13 (same SGLang 0.5.14 silicon data here),
h200_sxm static_gen, Llama-3.1-8B BF16, 1024-token contexts, quoted beside each test
(bench/calibration.py prints them). Figures are the model's deterministic output.
"""

from __future__ import annotations

import pytest

from runtime.perf.hardware import lookup_model, resolve_gpu
from runtime.perf.quant import bytes_per_param
from runtime.perf.step import EngineShape, StepModel, gemm_depth_share


def llama_8b_h200(tp: int) -> StepModel:
    model = lookup_model("llama-3.1-8b")
    assert model is not None
    return StepModel(resolve_gpu("H200"), model, EngineShape(tp=tp))


def test_a_one_token_step_gets_faster_from_tp4_to_tp8() -> None:
    """Each GPU streams half the weights at TP8 and its GEMMs are half as wide, so a batch-1
    step is shorter (AIC: TP4 2.52 ms, TP8 1.90 ms for Qwen3-8B / Llama-3.1-8B). The GEMMs'
    compute floor used to grow with 1/width exactly as their FLOPs shrink, so it stayed the
    same at every TP and made TP8 no faster than TP4."""
    tp4 = llama_8b_h200(4).decode_step_seconds(1, 1024)
    tp8 = llama_8b_h200(8).decode_step_seconds(1, 1024)
    assert tp8 < 0.95 * tp4


@pytest.mark.parametrize(("batch", "aic_ms"), [(1, 1.90), (32, 2.28), (128, 3.23)])
def test_tp8_decode_of_an_8b_model_is_calibrated(batch: int, aic_ms: float) -> None:
    """AIC h200_sxm TP8 Llama-3.1-8B BF16 decode at 1024 tokens (before: +42%, +30%, +18%)."""
    ours = llama_8b_h200(8).decode_step_seconds(batch, 1024) * 1e3
    assert ours == pytest.approx(aic_ms, rel=0.10)


def llama_8b_h200_fp8(tp: int) -> StepModel:
    model = lookup_model("llama-3.1-8b")
    assert model is not None
    engine = EngineShape(
        tp=tp,
        quantization="fp8",
        weight_bytes=model.quantized_weight_bytes(bytes_per_param("fp8", "auto")),
    )
    return StepModel(resolve_gpu("H200"), model, engine)


def test_fp8_gemms_fixed_part_shrinks_with_the_row_parallel_depth() -> None:
    """The output and down projections' K is split over TP, and a block-scaled FP8 GEMM's fixed
    part follows its K loop: a layer's GEMM depth at TP8 is ~40% of TP1's for an 8B model."""
    model = lookup_model("llama-3.1-8b")
    assert model is not None
    assert gemm_depth_share(model, 1) == pytest.approx(1.0)
    assert gemm_depth_share(model, 8) == pytest.approx((2 * 4096 + 18432 / 8) / 26624, rel=1e-3)


@pytest.mark.parametrize(("batch", "aic_ms"), [(1, 1.97), (32, 2.29), (128, 3.10)])
def test_tp8_fp8_decode_of_an_8b_model_is_calibrated(batch: int, aic_ms: float) -> None:
    """AIC h200_sxm TP8 Llama-3.1-8B fp8_block decode at 1024 tokens (before: +34%, +26%, +17%:
    FP8's per-GEMM fixed cost was charged at its TP1 depth on every TP)."""
    ours = llama_8b_h200_fp8(8).decode_step_seconds(batch, 1024) * 1e3
    assert ours == pytest.approx(aic_ms, rel=0.10)
