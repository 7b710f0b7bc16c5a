"""What serving LoRA adapters adds to a step: the simulator's and the optimizer's one figure.

SGLang runs a batch's adapters beside the base GEMMs as segmented GEMMs (its csgmv/triton
backends, after Punica's SGMV: Chen et al., "Punica: Multi-Tenant LoRA Serving", MLSys 2024): for
each adapted projection of each layer a shrink kernel (x @ A, to the rank) and an expand kernel
(@ B, back to the width), over segments of the batch, one per adapter. So a step costs
- the weights of every distinct adapter in it, read once (decode is bound by these reads: k
  distinct adapters read k adapters' weights, one adapter read once however many requests use
  it), or their FLOPs (2 x adapter weights per token) when the step is large;
- a fixed time per kernel, whatever the adapters (a step with any adapter pays it).

ASSUMED, not measured (no LoRA kernel timing exists in this project; re-fit both with a real
engine): the segmented kernels reach LORA_KERNEL_SHARE of HBM bandwidth and of BF16 peak (skinny
GEMMs of rank 8-64 fill few tiles), and each kernel takes LORA_KERNEL_FIXED_US at least.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runtime.lora import LORA_BYTES_PER_PARAM, ArchDims, adapter_kernels, adapter_params
from runtime.perf.hardware import GpuShape

# ASSUMED (see the module docstring): share of HBM bandwidth and of BF16 peak the segmented
# shrink/expand kernels reach, and the least one kernel takes.
LORA_KERNEL_SHARE = 0.3
LORA_KERNEL_FIXED_US = 2.5


@dataclass(frozen=True)
class LoraCost:
    """One engine's adapter figures per GPU: one adapter's bytes (at the pool's rank), the
    adapter weights one token goes through, and the LoRA kernels of a forward pass."""

    adapter_bytes: float
    params_per_token: float
    kernels: int


def lora_cost(arch: ArchDims, modules: Sequence[str], rank: int, shards: int) -> LoraCost:
    """The cost figures of adapters of `rank` over `modules`, split over `shards` GPUs (TP)."""
    params = adapter_params(arch, modules, rank) / max(1, shards)
    return LoraCost(
        adapter_bytes=params * LORA_BYTES_PER_PARAM,
        params_per_token=params,
        kernels=adapter_kernels(arch, modules),
    )


def lora_seconds(cost: LoraCost, gpu: GpuShape, adapters: float, tokens: int) -> float:
    """Seconds the adapters add to a step of `tokens` tokens holding `adapters` distinct ones
    (the base model's requests run no adapter: 0 adds nothing)."""
    if adapters <= 0 or tokens <= 0:
        return 0.0
    bandwidth = gpu.hbm_bandwidth_gbs * 1e9 * LORA_KERNEL_SHARE
    flops = gpu.bf16_tflops * 1e12 * LORA_KERNEL_SHARE
    read = adapters * cost.adapter_bytes / bandwidth
    compute = 2 * cost.params_per_token * tokens / flops
    return max(read, compute) + cost.kernels * LORA_KERNEL_FIXED_US * 1e-6


def expected_distinct(adapters: int, batch: float, cap: int) -> float:
    """Distinct adapters expected in a batch of `batch` requests spread evenly over `adapters`
    (A x (1 - (1 - 1/A)^n)), at most `cap` (SGLang's max_loras_per_batch: a request whose
    adapter would exceed it waits, so no batch holds more)."""
    if adapters <= 0 or batch <= 0:
        return 0.0
    expected = adapters * (1.0 - float((1.0 - 1.0 / adapters) ** batch))
    return min(float(cap), expected)
