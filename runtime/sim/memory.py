"""How the simulated engine sizes itself: bytes per weight and KV token, memory fraction, KV pool.

Follows SGLang 0.5.23's resolution rules where ``reference/SGLANG.md`` states them (default
``--mem-fraction-static``, ``--chunked-prefill-size`` by GPU memory, ``--max-running-requests``
forced to 48 with speculation) so ``/server_info`` reports numbers of the right size.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.sim.args import EngineArgs, StartupError
from runtime.sim.hardware import GpuShape, ModelShape

GIB = 1024**3
_ONE_BYTE = {
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
_FP4_COMPUTE = {"modelopt_fp4", "nvfp4_online", "mxfp4", "petit_nvfp4", "quark_mxfp4"}
_FOUR_BIT = _FP4_COMPUTE | {
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
_FP8_COMPUTE = {"fp8", "mxfp8", "modelopt", "modelopt_fp8", "w8a8_fp8", "w4afp8"}


def effective_quantization(args: EngineArgs, model: ModelShape) -> str | None:
    """The method in force: the flag, else what SGLang detects from a pre-quantized checkpoint."""
    return args.quantization or model.checkpoint_quantization


def weight_bytes_per_param(args: EngineArgs, model: ModelShape) -> float:
    if args.quantization is None and args.dtype not in ("float", "float32"):
        return model.checkpoint_bytes_per_param
    return bytes_per_param(args.quantization, args.dtype)


def bytes_per_param(quantization: str | None, dtype: str) -> float:
    if quantization in _ONE_BYTE:
        return 1.0
    if quantization in _FOUR_BIT:
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


def compute_tflops(gpu: GpuShape, quantization: str | None) -> float:
    """Peak dense TFLOP/s of the GEMMs: FP8/FP4 only where the GPU has a native path."""
    if quantization in _FP8_COMPUTE and gpu.sm >= 89 and gpu.fp8_tflops:
        return gpu.fp8_tflops
    if quantization in _FP4_COMPUTE and gpu.sm >= 100 and gpu.fp4_tflops:
        return gpu.fp4_tflops
    return gpu.bf16_tflops


def output_noise(quantization: str | None, kv_cache_dtype: str) -> float:
    """How far a configuration's logprobs drift from the unquantized model (a scale, in nats)."""
    weights = {1.0: 0.03, 0.5625: 0.1, 0.75: 0.06}.get(bytes_per_param(quantization, "auto"), 0.0)
    kv = 0.01 if kv_dtype_bytes(kv_cache_dtype, "auto") < 2 else 0.0
    return weights + kv


def default_chunked_prefill_size(memory_gib: float) -> int:
    if memory_gib < 20:
        return 2048
    if memory_gib < 60:
        return 4096
    if memory_gib < 160:
        return 8192
    return 16384


def default_mem_fraction(memory_gib: float, tp_pp: int, chunked: int) -> float:
    reserved = 0.5 + 1.5 * max(chunked, 2048) / 1024 + tp_pp / 8 + 2.0
    if memory_gib > 60:
        reserved = max(reserved, 10.0)
    return round((memory_gib - reserved) / memory_gib, 3)


@dataclass(frozen=True)
class MemoryPlan:
    mem_fraction_static: float
    chunked_prefill_size: int  # <= 0: chunking off
    max_total_num_tokens: int
    max_running_requests: int
    page_size: int
    context_length: int
    weight_gb: float  # per GPU
    kv_cache_gb: float  # per GPU


def plan_memory(args: EngineArgs, gpu: GpuShape, model: ModelShape) -> MemoryPlan:
    chunked = args.chunked_prefill_size
    if chunked is None:
        chunked = default_chunked_prefill_size(gpu.memory_gib)
    if args.attn_dp_size > 1 and chunked > 0:
        chunked //= args.attn_dp_size
    shards = args.tp_size * args.pp_size
    fraction = args.mem_fraction_static or default_mem_fraction(gpu.memory_gib, shards, chunked)
    weight_bytes = model.weight_bytes(weight_bytes_per_param(args, model)) / shards
    kv_bytes = _kv_bytes_per_token_per_gpu(args, model)
    free = gpu.memory_gib * GIB * fraction - weight_bytes
    tokens = int(free // kv_bytes) if free > 0 else 0
    if args.max_total_tokens is not None:
        tokens = min(tokens, args.max_total_tokens)
    if tokens <= 0:
        raise StartupError("Not enough memory. Please try to increase --mem-fraction-static.")
    return MemoryPlan(
        mem_fraction_static=fraction,
        chunked_prefill_size=chunked,
        max_total_num_tokens=tokens,
        max_running_requests=_max_running(args, tokens),
        page_size=args.page_size or 1,
        context_length=args.context_length or model.max_context,
        weight_gb=weight_bytes / GIB,
        kv_cache_gb=tokens * kv_bytes / GIB,
    )


def _kv_bytes_per_token_per_gpu(args: EngineArgs, model: ModelShape) -> float:
    total = model.kv_bytes_per_token(kv_dtype_bytes(args.kv_cache_dtype, args.dtype))
    per_stage = total / args.pp_size
    if model.kv_lora_rank:
        return per_stage  # MLA's latent cache is replicated on every TP rank
    # KV heads split over TP ranks, replicated once there are more ranks than heads.
    return per_stage / min(args.tp_size, model.num_kv_heads)


def _max_running(args: EngineArgs, tokens: int) -> int:
    if args.max_running_requests is not None:
        return args.max_running_requests
    if args.speculative_algorithm is not None:
        return 48
    return max(1, min(4096, tokens // 2))
