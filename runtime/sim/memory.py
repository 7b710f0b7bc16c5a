"""How the simulated engine sizes itself: bytes per weight and KV token, memory fraction, KV pool.

Follows SGLang 0.5.23's resolution rules where ``reference/SGLANG.md`` states them (default
``--mem-fraction-static``, ``--chunked-prefill-size`` by GPU memory, ``--max-running-requests``
forced to 48 with speculation) so ``/server_info`` reports numbers of the right size.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.catalog.quantization import kv_format, weight_format
from runtime.memory import default_chunked_prefill, rank_chunk
from runtime.perf.hardware import GpuShape, ModelShape
from runtime.perf.quant import bytes_per_param, kv_dtype_bytes
from runtime.sim.args import EngineArgs, StartupError
from runtime.sim.drift import checkpoint_drift
from runtime.sim.lora import pool_bytes_per_gpu
from runtime.sim.sampling import Noise

GIB = 1024**3


def effective_quantization(args: EngineArgs, model: ModelShape) -> str | None:
    """The method in force: the flag, else what SGLang detects from a pre-quantized checkpoint."""
    return args.quantization or model.checkpoint_quantization


def weight_bytes_per_param(args: EngineArgs, model: ModelShape) -> float:
    if args.quantization is None and args.dtype not in ("float", "float32"):
        return model.checkpoint_bytes_per_param
    return bytes_per_param(args.quantization, args.dtype)


def model_weight_bytes(args: EngineArgs, model: ModelShape) -> float:
    """All weight bytes: the checkpoint as shipped, or quantized on load with BF16 embeddings."""
    if args.quantization is None and args.dtype not in ("float", "float32"):
        return model.weight_bytes(model.checkpoint_bytes_per_param)
    return model.quantized_weight_bytes(bytes_per_param(args.quantization, args.dtype))


# How far each configuration's next-token logits drift from the unquantized model: the standard
# deviation, in nats, of the shift ``runtime.sim.sampling`` applies to every logit, by the
# quantization catalogue's noise class of the format. Chosen so the KL quality gate
# (``runtime.quality``, defaults 0.05 nats / 0.95 top-1) sees what it sees on GPUs: 8-bit weights
# or KV cache far inside it (mean KL ~0.001), calibrated 4-bit (NVFP4 with FP8 block scales,
# AWQ/GPTQ) inside it (~0.01, top-1 ~0.98), and 4-bit formats with coarse power-of-two scales or
# no calibration (MXFP4, bitsandbytes, GGUF, MLX) outside it (~0.09, ~0.87).
NOISE_NATS: dict[str, float] = {
    "weights:eight_bit": 0.06,
    "weights:mixed_eight_four_bit": 0.12,
    "weights:calibrated_four_bit": 0.2,
    "weights:coarse_four_bit": 0.6,
    "kv:eight_bit": 0.03,
    "kv:four_bit": 0.15,
}


def output_noise(quantization: str | None, kv_cache_dtype: str) -> float:
    """How far a configuration's logprobs drift from the unquantized model (a scale, in nats).

    Weight and KV errors add, so stacking quantizations only ever moves further away.
    """
    weights, kv = weight_format(quantization), kv_format(kv_cache_dtype)
    weight_noise = NOISE_NATS.get(f"weights:{weights.noise}", 0.0) if weights else 0.0
    kv_noise = NOISE_NATS.get(f"kv:{kv.noise}", 0.0) if kv else 0.0
    return weight_noise + kv_noise


CHECKPOINT_METHOD = "compressed-tensors"  # what SGLang detects the tool's checkpoints as


def output_drift(args: EngineArgs) -> Noise:
    """How far this engine's logprobs drift: per layer when the checkpoint at ``--model-path``
    says which modules it quantized (``runtime.sim.drift``; a KV cache's noise added), else the
    scalar of ``output_noise`` for the method in force, as before."""
    noise_of = {
        key.split(":", 1)[1]: value
        for key, value in NOISE_NATS.items()
        if key.startswith("weights:")
    }
    drift = None
    if args.quantization in (None, CHECKPOINT_METHOD):  # the checkpoint decides, not a flag
        drift = checkpoint_drift(args.model_path, noise_of)
    if drift is None:
        return output_noise(args.quantization, args.kv_cache_dtype)
    return drift.plus(output_noise(None, args.kv_cache_dtype))


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
    host_tokens: int = 0  # HiCache's host tier (--enable-hierarchical-cache), 0 without it
    lora_gb: float = 0.0  # the LoRA adapter pool per GPU, allocated before the KV pool

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes of one token on one GPU (what each GPU's host link moves)."""
        return self.kv_cache_gb * GIB / self.max_total_num_tokens


def plan_memory(args: EngineArgs, gpu: GpuShape, model: ModelShape) -> MemoryPlan:
    chunked = args.chunked_prefill_size
    if chunked is None:
        chunked = default_chunked_prefill(gpu.memory_gib)
    chunked = rank_chunk(chunked, args.attn_dp_size)
    shards = args.tp_size * args.pp_size
    fraction = args.mem_fraction_static or default_mem_fraction(gpu.memory_gib, shards, chunked)
    weight_bytes = model_weight_bytes(args, model) / shards
    kv_bytes = _kv_bytes_per_token_per_gpu(args, model)
    adapters = pool_bytes_per_gpu(args, model)
    free = gpu.memory_gib * GIB * fraction - weight_bytes - adapters
    tokens = int(free // kv_bytes) if free > 0 else 0
    if args.max_total_tokens is not None:
        tokens = min(tokens, args.max_total_tokens)
    if tokens <= 0:
        raise StartupError("Not enough memory. Please try to increase --mem-fraction-static.")
    return MemoryPlan(
        host_tokens=host_tier_tokens(args, tokens, kv_bytes),
        mem_fraction_static=fraction,
        chunked_prefill_size=chunked,
        max_total_num_tokens=tokens,
        max_running_requests=_max_running(args, tokens),
        page_size=args.page_size or 1,
        context_length=args.context_length or model.max_context,
        weight_gb=weight_bytes / GIB,
        kv_cache_gb=tokens * kv_bytes / GIB,
        lora_gb=adapters / GIB,
    )


def host_tier_tokens(args: EngineArgs, device_tokens: int, kv_bytes: float) -> int:
    """Tokens of HiCache's host pool: ``--hicache-size`` GB (10^9 bytes) when above 0, else
    ``--hicache-ratio`` (2 when unset) times the device pool, as SGLang sizes it; SGLang refuses
    to start when the host pool is not larger than the device pool."""
    if not args.enable_hierarchical_cache:
        return 0
    if args.hicache_size > 0:
        tokens = int(args.hicache_size * 1e9 // kv_bytes)
    else:
        tokens = int(device_tokens * (args.hicache_ratio or 2.0))
    if tokens <= device_tokens:
        raise StartupError(
            "The host memory should be larger than the device memory with the current protocol."
        )
    return tokens


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
