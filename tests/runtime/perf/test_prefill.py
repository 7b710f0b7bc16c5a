"""runtime/perf: what a tensor-parallel prefill spends besides its GEMMs.

Reference figures: AIConfigurator 0.12 (aisimulate 0.13 gives the same for Llama), h200_sxm,
SGLang 0.5.14 silicon data: its static_ctx estimates and the per-op tables they are summed
from (custom all-reduce, add_norm, act_gate, context_attention), quoted beside each test
(bench/calibration.py prints the step times). A TP8 prefill of an 8B model came out 20-32% fast:
its all-reduces ran at the NVLink peak where SGLang's reach ~60% of it, and its elementwise
kernels and short-prompt attention were priced as nothing.
"""

from __future__ import annotations

import pytest

from runtime.perf.hardware import lookup_model, resolve_gpu
from runtime.perf.quant import bytes_per_param
from runtime.perf.step import EngineShape, StepModel


def llama_8b_h200(tp: int, quantization: str | None = None) -> StepModel:
    model = lookup_model("llama-3.1-8b")
    assert model is not None
    weights = model.quantized_weight_bytes(bytes_per_param(quantization, "auto"))
    engine = EngineShape(tp=tp, quantization=quantization, weight_bytes=weights)
    return StepModel(resolve_gpu("H200"), model, engine)


@pytest.mark.parametrize(
    ("quantization", "tokens", "aic_ms"),
    [(None, 512, 5.54), (None, 2048, 15.85), ("fp8", 512, 5.32), ("fp8", 2048, 14.32)],
)
def test_tp8_prefill_of_an_8b_model_is_calibrated(
    quantization: str | None, tokens: int, aic_ms: float
) -> None:
    """AIC h200_sxm TP8 Llama-3.1-8B prefill (before: -20%, -25%, -29%, -32%)."""
    ours = llama_8b_h200(8, quantization).prefill_seconds(tokens) * 1e3
    assert ours == pytest.approx(aic_ms, rel=0.15)


@pytest.mark.parametrize(("tp", "aic_us"), [(4, 83.6), (8, 107.6)])
def test_a_prefills_all_reduce_runs_at_the_measured_bus_rate(tp: int, aic_us: float) -> None:
    """One all-reduce of a 2,048-token prefill's hidden states (8M BF16 values): AIC's SGLang
    custom all-reduce table (CUDA graph) gives 83.6 us at TP4 and 107.6 us at TP8, ~290 GB/s of
    ring bus bandwidth (before: 450 GB/s, 47 and 70 us)."""
    physics = llama_8b_h200(tp)
    one = physics.allreduce_seconds(2048) / (2 * physics.model.num_layers) * 1e6
    assert one == pytest.approx(aic_us, rel=0.10)


@pytest.mark.parametrize(("tp", "aic_ms"), [(1, 10.64), (8, 5.50)])
def test_elementwise_kernels_grow_with_tokens_and_norms_are_not_split_by_tp(
    tp: int, aic_ms: float
) -> None:
    """AIC's add_norm (both per layer) and act_gate over an 8,192-token prefill: 4.67 + 5.97 ms
    at TP1, 4.67 + 0.83 ms at TP8: the norms run over the whole hidden state on every rank,
    only the activation's FFN slice shrinks."""
    physics = llama_8b_h200(tp)
    assert physics.elementwise_seconds(8192) * 1e3 == pytest.approx(aic_ms, rel=0.10)


def test_a_short_prompts_attention_at_tp8_is_bound_by_the_kernels_floor() -> None:
    """AIC's context attention for a 512-token prompt takes 29.7 us a layer at TP8 (4 heads per
    GPU) and 31.2 us at TP1 (32 heads): a floor, not FLOPs (which give 0.4 us at TP8)."""
    physics = llama_8b_h200(8)
    layers = physics.model.num_layers
    per_layer = physics.prefill_attention_seconds(512, 512 * 512 / 2) / layers * 1e6
    assert per_layer == pytest.approx(29.7, rel=0.20)
