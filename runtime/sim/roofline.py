"""Step time of one forward pass, from a roofline of the GPU and the model.

A step takes the longer of its compute time (FLOPs over peak tensor throughput at a realistic
utilisation) and its memory time (weights plus the KV cache it reads, over HBM bandwidth), plus the
tensor-parallel all-reduces and a fixed launch overhead. Decode steps are therefore bandwidth-bound
and grow slowly with batch size; prefill steps are compute-bound and grow with prompt tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.sim.args import EngineArgs
from runtime.sim.hardware import GpuShape, ModelShape
from runtime.sim.memory import (
    compute_tflops,
    effective_quantization,
    kv_dtype_bytes,
    weight_bytes_per_param,
)

MFU = 0.55  # fraction of peak FLOP/s a good prefill kernel reaches
MBU = 0.75  # fraction of peak HBM bandwidth a decode step reaches
STEP_OVERHEAD_S = 0.0004  # scheduler + kernel launch (CUDA graphs keep decode small)
NVLINK_GBS = 300.0  # effective all-reduce bus bandwidth per GPU
ALLREDUCE_LATENCY_S = 8e-6
DRAFT_PASS_FRACTION = 0.06  # an EAGLE draft pass costs about this share of a target decode pass


@dataclass
class StepWork:
    """What one forward pass computes."""

    prefill_tokens: int = 0  # new prompt tokens computed (extend)
    prefill_pairs: float = 0.0  # attention query-key pairs of those tokens
    decode_seqs: int = 0  # sequences that advance in this step
    decode_tokens: int = 0  # tokens verified for them (1 each, or the draft tokens)
    decode_context: int = 0  # KV tokens read by the decode sequences
    draft_passes: int = 0  # speculative draft forward passes before the verify pass

    @property
    def empty(self) -> bool:
        return self.prefill_tokens == 0 and self.decode_seqs == 0


class Roofline:
    def __init__(self, args: EngineArgs, gpu: GpuShape, model: ModelShape) -> None:
        tp = max(1, args.tp_size)
        self.tp = tp
        self.model = model
        self.flops_per_token = 2 * model.active_params_b * 1e9 / tp
        heads = model.num_attention_heads * model.head_dim
        self.attn_flops_per_pair = 4 * model.num_layers * heads / tp
        weight_bytes = model.weight_bytes(weight_bytes_per_param(args, model)) / tp
        active_share = model.active_params_b / model.params_b
        self.active_weight_bytes = weight_bytes * active_share
        self.inactive_weight_bytes = weight_bytes - self.active_weight_bytes
        kv_bytes = model.kv_bytes_per_token(kv_dtype_bytes(args.kv_cache_dtype, args.dtype))
        self.kv_bytes_per_token = kv_bytes / (
            1 if model.kv_lora_rank else min(tp, model.num_kv_heads)
        )
        self.peak_flops = compute_tflops(gpu, effective_quantization(args, model)) * 1e12
        self.bandwidth = gpu.hbm_bandwidth_gbs * 1e9

    def step_seconds(self, work: StepWork) -> float:
        if work.empty:
            return 0.0
        tokens = work.prefill_tokens + work.decode_tokens
        flops = self.flops_per_token * tokens + self.attn_flops_per_pair * work.prefill_pairs
        compute = flops / (self.peak_flops * MFU)
        kv_read = self.kv_bytes_per_token * (work.decode_context + work.prefill_tokens)
        memory = (self._weights_read(tokens) + kv_read) / (self.bandwidth * MBU)
        main = max(compute, memory) + self._allreduce_seconds(tokens)
        draft = work.draft_passes * DRAFT_PASS_FRACTION * max(memory, compute)
        return main + draft + STEP_OVERHEAD_S

    def _weights_read(self, tokens: int) -> float:
        # MoE: a small batch touches only a few experts; a large one touches all of them.
        touched = min(1.0, tokens / 256)
        return self.active_weight_bytes + self.inactive_weight_bytes * touched

    def _allreduce_seconds(self, tokens: int) -> float:
        if self.tp == 1:
            return 0.0
        size = tokens * self.model.hidden_size * 2
        ring = 2 * (self.tp - 1) / self.tp * size / (NVLINK_GBS * 1e9)
        return 2 * self.model.num_layers * (ring + ALLREDUCE_LATENCY_S)
