"""Quantization arithmetic: bytes per weight and KV value, and which GEMM path a method runs on.

Functions of method names (SGLang's ``--quantization`` / ``--kv-cache-dtype`` choices) over the
quantization catalogue (``runtime.catalog.quantization``), the same bytes ``runtime.memory`` prices
for the validator and the optimizer: the simulator's memory plan and the step-time model use them.
"""

from __future__ import annotations

from runtime.catalog.quantization import kv_format, runs_natively, weight_format
from runtime.perf.hardware import GpuShape


def bytes_per_param(quantization: str | None, dtype: str) -> float:
    """Bytes per weight parameter: the quantization catalogue's for a method, else the dtype's."""
    form = weight_format(quantization)
    if form is not None:
        return form.bytes
    return 4.0 if dtype in ("float", "float32") else 2.0


def kv_dtype_bytes(kv_cache_dtype: str, dtype: str) -> float:
    """Bytes per KV value: the catalogue's for a named KV dtype, the model dtype's for ``auto``."""
    form = kv_format(kv_cache_dtype)
    if form is not None and kv_cache_dtype != "auto":
        return form.bytes
    return 4.0 if dtype in ("float", "float32") else 2.0


def gemm_dtype(gpu: GpuShape, quantization: str | None) -> str:
    """The data type the GEMMs run in: FP8/FP4 only where the GPU has a native path.

    Weight-only methods (AWQ, GPTQ, ...) dequantize to BF16 and run BF16 tensor cores.
    """
    form = weight_format(quantization)
    if form is None or not runs_natively(gpu, form):
        return "bf16"
    return form.compute


def compute_tflops(gpu: GpuShape, quantization: str | None) -> float:
    """Peak dense TFLOP/s of the GEMMs: FP8/FP4 only where the GPU has a native path."""
    dtype = gemm_dtype(gpu, quantization)
    if dtype == "fp8" and gpu.fp8_tflops:
        return gpu.fp8_tflops
    if dtype == "fp4" and gpu.fp4_tflops:
        return gpu.fp4_tflops
    return gpu.bf16_tflops
