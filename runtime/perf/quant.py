"""Quantization arithmetic: bytes per weight and KV token, and which GEMM path a method runs on.

Pure functions of method names (SGLang's ``--quantization`` / ``--kv-cache-dtype`` choices); the
simulator's memory plan and the step-time model both use them.
"""

from __future__ import annotations

from runtime.perf.hardware import GpuShape

ONE_BYTE = frozenset(
    {
        "fp8",
        "mxfp8",
        "modelopt",
        "modelopt_fp8",
        "w8a8_fp8",
        "w8a8_int8",
        "compressed-tensors",
        "quark",
        "mlx_q8",
        "auto-round-int8",
    }
)
FP4_COMPUTE = frozenset({"modelopt_fp4", "nvfp4_online", "mxfp4", "petit_nvfp4", "quark_mxfp4"})
FOUR_BIT = FP4_COMPUTE | {
    "awq",
    "awq_marlin",
    "gptq",
    "gptq_marlin",
    "moe_wna16",
    "w4afp8",
    "auto-round",
    "mxfp_w4a8",
    "quark_int4fp8_moe",
    "mlx_q4",
    "humming",
    "bitsandbytes",
    "gguf",
    "modelslim",
}
FP8_COMPUTE = frozenset({"fp8", "mxfp8", "modelopt", "modelopt_fp8", "w8a8_fp8", "w4afp8"})


def bytes_per_param(quantization: str | None, dtype: str) -> float:
    if quantization in ONE_BYTE:
        return 1.0
    if quantization in FOUR_BIT:
        return 0.5625  # 4-bit values plus one scale per 16 or 32 of them
    if quantization == "modelopt_mixed":
        return 0.75
    return 4.0 if dtype in ("float", "float32") else 2.0


def kv_dtype_bytes(kv_cache_dtype: str, dtype: str) -> float:
    if kv_cache_dtype in ("fp8_e5m2", "fp8_e4m3", "mxfp8"):
        return 1.0
    if kv_cache_dtype in ("nvfp4", "fp4_mx_block16"):
        return 0.5625
    return 4.0 if dtype in ("float", "float32") else 2.0


def gemm_dtype(gpu: GpuShape, quantization: str | None) -> str:
    """The data type the GEMMs run in: FP8/FP4 only where the GPU has a native path.

    Weight-only methods (AWQ, GPTQ, ...) dequantize to BF16 and run BF16 tensor cores.
    """
    if quantization in FP8_COMPUTE and gpu.sm >= 89 and gpu.fp8_tflops:
        return "fp8"
    if quantization in FP4_COMPUTE and gpu.sm >= 100 and gpu.fp4_tflops:
        return "fp4"
    return "bf16"


def compute_tflops(gpu: GpuShape, quantization: str | None) -> float:
    """Peak dense TFLOP/s of the GEMMs: FP8/FP4 only where the GPU has a native path."""
    dtype = gemm_dtype(gpu, quantization)
    if dtype == "fp8" and gpu.fp8_tflops:
        return gpu.fp8_tflops
    if dtype == "fp4" and gpu.fp4_tflops:
        return gpu.fp4_tflops
    return gpu.bf16_tflops
