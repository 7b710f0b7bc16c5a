"""Step time of one forward pass of one engine: the physics the simulator and optimizer share.

A step is a sum of separate kernels, each bounded by the slower of its bytes and its FLOPs:
- the GEMMs stream the weights (quantized body plus the BF16 LM head; the input embedding is a
  gather, not a stream) at the kernel's share of HBM bandwidth for the GEMM data type, or compute
  at its share of that data type's peak, whichever is longer;
- attention reads the KV cache of every decoding sequence (decode) or computes query-key pairs
  (prefill) at the attention kernels' shares;
- a fixed cost per layer (norms, rotary, launches) and per step (scheduler, sampling);
- tensor-parallel all-reduces, two per layer, over the GPU's interconnect;
- under speculation, the draft passes and the tree-verification bookkeeping.
Every efficiency and overhead comes from ``runtime/catalog/perf.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.catalog.perf import PerfCatalog, perf_catalog
from runtime.perf.hardware import GpuShape, ModelShape
from runtime.perf.quant import compute_tflops, gemm_dtype
from runtime.perf.spec import SpecConfig

BF16 = 2.0


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


@dataclass(frozen=True)
class EngineShape:
    """How the model is run: parallelism and number formats (not the workload)."""

    tp: int = 1
    quantization: str | None = None  # the method in force (flag or checkpoint's)
    weight_bytes: float | None = None  # all weights as loaded; None: BF16
    kv_bytes_per_value: float = BF16
    spec: SpecConfig | None = None


class StepModel:
    """Seconds per step for one engine of `model` on `gpu` run as `engine`."""

    def __init__(
        self,
        gpu: GpuShape,
        model: ModelShape,
        engine: EngineShape,
        catalog: PerfCatalog | None = None,
    ) -> None:
        self.gpu, self.model, self.engine = gpu, model, engine
        cat = catalog or perf_catalog()
        tp = max(1, engine.tp)
        self.tp = tp
        dtype = gemm_dtype(gpu, engine.quantization)
        kernel = cat.kernel(gpu.sm, dtype, gpu.id)
        self.gemm_bandwidth = gpu.hbm_bandwidth_gbs * 1e9 * kernel.bandwidth
        self.gemm_flops = compute_tflops(gpu, engine.quantization) * 1e12 * kernel.compute
        attention = cat.attention_bandwidth(engine.kv_bytes_per_value)
        self.attn_bandwidth = gpu.hbm_bandwidth_gbs * 1e9 * attention
        self.attn_flops = gpu.bf16_tflops * 1e12 * cat.attention_compute
        self.layer_overhead = kernel.layer_overhead_us * 1e-6
        self.half_tokens = kernel.compute_half_tokens
        self.step_overhead = cat.step_overhead_us * 1e-6
        link = cat.link(gpu.id)
        self.link_bandwidth = link.bus_gbs * 1e9
        self.link_latency = link.latency_us * 1e-6

        total = engine.weight_bytes if engine.weight_bytes is not None else model.weight_bytes(BF16)
        embedding = model.vocab_size * model.hidden_size * BF16  # gathered, never streamed
        streamed = max(0.0, total - embedding) / tp
        active_share = model.active_params_b / model.params_b
        self.active_weight_bytes = streamed * active_share
        self.inactive_weight_bytes = streamed - self.active_weight_bytes
        self.flops_per_token = 2 * model.active_params_b * 1e9 / tp
        heads = model.num_attention_heads * model.head_dim
        self.attn_flops_per_pair = 4 * model.num_layers * heads / tp
        kv = model.kv_bytes_per_token(engine.kv_bytes_per_value)
        self.kv_bytes_per_token = kv / (1 if model.kv_lora_rank else min(tp, model.num_kv_heads))

    # ---- one step ----------------------------------------------------------------------------
    def step_seconds(self, work: StepWork) -> float:
        if work.empty:
            return 0.0
        tokens = work.prefill_tokens + work.decode_tokens
        gemm = max(
            self._weights_read(tokens) / self.gemm_bandwidth,
            self.flops_per_token * (tokens + self.half_tokens) / self.gemm_flops,
        )
        attention = (
            self.kv_bytes_per_token * work.decode_context / self.attn_bandwidth
            + self.attn_flops_per_pair * work.prefill_pairs / self.attn_flops
        )
        fixed = self.model.num_layers * self.layer_overhead + self.step_overhead
        seconds = gemm + attention + fixed + self.allreduce_seconds(tokens)
        spec = self.engine.spec
        if spec is not None and work.decode_seqs:
            seconds += self.draft_seconds(work.decode_seqs, work.decode_context)
            seconds += spec.verify_overhead_s * work.decode_tokens
        return seconds

    def decode_step_seconds(self, batch: int, context: int) -> float:
        """One plain decode step of `batch` sequences holding `context` tokens each."""
        work = StepWork(decode_seqs=batch, decode_tokens=batch, decode_context=batch * context)
        return self.step_seconds(work)

    def prefill_seconds(self, tokens: int, batch: int = 1) -> float:
        """Prefill of `batch` prompts of `tokens` each in one step (no cached prefix)."""
        work = StepWork(prefill_tokens=tokens * batch, prefill_pairs=batch * tokens * tokens / 2)
        return self.step_seconds(work)

    # ---- parts -------------------------------------------------------------------------------
    def _weights_read(self, tokens: int) -> float:
        # MoE: a small batch touches only a few experts; a large one touches all of them.
        touched = min(1.0, tokens / 256)
        return self.active_weight_bytes + self.inactive_weight_bytes * touched

    def allreduce_seconds(self, tokens: int) -> float:
        """Two ring all-reduces of the hidden states per layer across the TP group."""
        if self.tp == 1:
            return 0.0
        size = tokens * self.model.hidden_size * BF16
        ring = 2 * (self.tp - 1) / self.tp * size / self.link_bandwidth
        return 2 * self.model.num_layers * (ring + self.link_latency)

    def draft_seconds(self, seqs: int, context: int) -> float:
        """The draft passes of one speculative step for `seqs` sequences (`context` KV tokens)."""
        spec = self.engine.spec
        if spec is None:
            return 0.0
        if spec.algorithm == "NGRAM":
            return spec.draft_overhead_s  # a CPU trie lookup, no GPU pass
        lm_head = self.model.vocab_size * self.model.hidden_size * BF16 / self.tp
        draft = spec.draft
        if spec.algorithm == "NEXTN" or draft is None:
            # One extra decoder layer of the target plus the target's LM head.
            body = max(0.0, self.active_weight_bytes - lm_head) / self.model.num_layers
            weights, layers, kv_layers = body + lm_head, 1, 1
        else:
            weights = draft.weight_bytes(BF16) / self.tp
            layers, kv_layers = draft.num_layers, draft.num_layers
            if spec.algorithm == "EAGLE":
                weights += lm_head  # EAGLE-2 heads reuse the target's full-vocabulary LM head
        tokens = seqs * spec.shape.topk
        per_layer_kv = self.kv_bytes_per_token / max(1, self.model.num_layers)
        one_pass = (
            max(
                weights / self.gemm_bandwidth,
                2 * weights / BF16 * (tokens + self.half_tokens) / self.gemm_flops,
            )
            + per_layer_kv * kv_layers * context / self.attn_bandwidth
            + layers * self.layer_overhead
            + spec.draft_overhead_s
        )
        return spec.shape.num_steps * one_pass
