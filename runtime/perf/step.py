"""Step time of one forward pass of one engine: the physics the simulator and optimizer share.

A step is a sum of separate kernels, each bounded by the slower of its bytes and its FLOPs:
- the GEMMs stream the weights (quantized body at the kernel's share of HBM bandwidth for the
  GEMM data type; under FP8/FP4 the BF16 LM head at the BF16 kernel's; the input embedding is a
  gather, not a stream), or compute at the data type's share of peak, a share that rises with
  the tokens in the step and falls as TP narrows each GEMM (fewer tiles to fill the SMs);
- attention reads the KV cache of every decoding sequence (decode) or computes query-key pairs
  (prefill) at the attention kernels' shares for the GPU generation and KV format;
- a fixed cost per layer (norms, rotary, launches; each GEMM's fixed part, larger for FP8's
  activation quantization; an FP8 KV cache's quantize-on-write) and per step (scheduler,
  sampling); a prefill attention kernel's floor per layer;
- the per-token elementwise kernels' bytes (residual add + RMSNorm twice a layer over the whole
  hidden state, which every TP rank holds; the gated activation over its FFN slice);
- tensor-parallel all-reduces, two per layer, over the GPU's interconnect;
- a mixture-of-experts model's routed experts apart from the rest: their weights spread over
  the whole TP group (EP or TP sharding hold the same bytes per GPU), streamed only for the
  experts a step's tokens touch, through the fused-MoE kernels' own (much lower) shares;
- attention data parallelism (SGLang ``--enable-dp-attention --dp-size N``): the TP group's
  attention runs as N replicas of TP/N GPUs, each with its own sequences and KV cache, while
  the experts see every rank's tokens (gathered before and scattered after each MoE layer, or
  with DeepEP, ``--moe-a2a-backend deepep``, each token sent only to the GPUs holding its
  experts and its result sent back, the experts run by DeepGEMM's grouped kernels);
- under speculation, the draft passes and the tree-verification bookkeeping;
- with LoRA adapters, their segmented GEMMs (``runtime.perf.lora``).
Every efficiency and overhead comes from ``runtime/catalog/perf.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.catalog.perf import PerfCatalog, perf_catalog
from runtime.perf.hardware import GpuShape, ModelShape
from runtime.perf.lora import LoraCost, lora_seconds
from runtime.perf.quant import compute_tflops, gemm_dtype
from runtime.perf.spec import SpecConfig

BF16 = 2.0
# A decoder layer's GEMMs: QKV projection, attention output, gate-up and down projections.
GEMMS_PER_LAYER = 4
# The per-GPU GEMM width (hidden size / TP) at which a kernel row's compute_half_tokens holds.
REFERENCE_WIDTH = 4096


@dataclass
class StepWork:
    """What one forward pass computes."""

    prefill_tokens: int = 0  # new prompt tokens computed (extend)
    prefill_pairs: float = 0.0  # attention query-key pairs of those tokens
    decode_seqs: int = 0  # sequences that advance in this step
    decode_tokens: int = 0  # tokens verified for them (1 each, or the draft tokens)
    decode_context: int = 0  # KV tokens read by the decode sequences
    draft_passes: int = 0  # speculative draft forward passes before the verify pass
    lora_adapters: float = 0.0  # distinct LoRA adapters the step's requests use (base: none)

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
    attn_dp: int = 1  # attention data-parallel ranks inside the TP group
    ep: int = 1  # expert parallelism: >1 whole experts per GPU; 1 every expert sliced (MoE TP)
    moe_a2a: str = "none"  # SGLang's --moe-a2a-backend: "none" (gather/scatter) or "deepep"
    lora: LoraCost | None = None  # LoRA adapters served (runtime.perf.lora); None: LoRA off


def ffn_width(model: ModelShape) -> float:
    """A dense layer's FFN width: its parameters less attention's, over the three FFN matrices."""
    hidden, heads = model.hidden_size, model.num_attention_heads * model.head_dim
    body = model.active_params_b * 1e9 - 2 * model.vocab_size * hidden
    attention = hidden * (heads + 2 * model.num_kv_heads * model.head_dim) + heads * hidden
    return max(0.0, (body / model.num_layers - attention) / (3 * hidden))


def elementwise_bytes_per_token(model: ModelShape, tp: int, moe: bool = False) -> float:
    """HBM bytes per token of one step's elementwise kernels over all layers.

    Each layer runs two fused residual-add + RMSNorms over the whole hidden state (read the
    input and the residual, write both back: 4 vectors), which tensor parallelism does not
    split: every rank holds the full hidden state after the all-reduce. The gated activation
    reads the gate and up halves and writes one (3 vectors of the FFN's per-GPU slice); a MoE
    model's runs inside the fused-MoE kernels (``moe``: norms only). AIC 0.12's per-op SGLang
    tables (add_norm, act_gate) show both growing with tokens at ~0.8 of HBM bandwidth: at
    8,192 tokens they are 5% of a Llama-3.1-8B TP1 prefill and 11% at TP8.
    """
    norms = 2 * 4 * model.hidden_size
    act = 0.0 if moe else 3 * ffn_width(model) / max(1, tp)
    return model.num_layers * (norms + act) * BF16


def gemm_depth_share(model: ModelShape, tp: int) -> float:
    """A layer's GEMM depth (K) per GPU at `tp` over its depth at TP1.

    A GEMM's fixed part (``gemm_fixed_us``, FP8's above all) grows with its K: a block-scaled
    FP8 GEMM promotes one scale per 128-deep block, so at a few rows its time is set by the K
    loop, not the bytes (AIC's h200_sxm fp8_block table at M=1, Llama-3.1-8B TP 1-8: about
    3 us plus 1 us per 1024 of K). QKV and gate-up are column-parallel (K = hidden size at any
    TP); the output and down projections are row-parallel, their K split over TP. The FFN
    width is ``ffn_width``.
    """
    hidden, heads = model.hidden_size, model.num_attention_heads * model.head_dim
    ffn = ffn_width(model)
    return (2 * hidden + (heads + ffn) / max(1, tp)) / (2 * hidden + heads + ffn)


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
        mla = bool(model.kv_lora_rank)
        attention = cat.attention_row(engine.kv_bytes_per_value, gpu.sm, mla=mla)
        self.attn_bandwidth = gpu.hbm_bandwidth_gbs * 1e9 * attention.bandwidth
        # MLA's absorbed decode attention is bound by its FLOPs where many heads share a GPU.
        share = attention.compute if mla and attention.compute else 0.0
        self.mla_flops = gpu.bf16_tflops * 1e12 * share
        prefill_attention = cat.attention_compute_row(gpu.sm)
        self.attn_flops = gpu.bf16_tflops * 1e12 * prefill_attention.compute
        self.prefill_attn_fixed = model.num_layers * prefill_attention.fixed_us * 1e-6
        self.elementwise_bandwidth = gpu.hbm_bandwidth_gbs * 1e9 * cat.elementwise_bandwidth
        moe_model = model.expert_params_b > 0
        self.elementwise_bytes = elementwise_bytes_per_token(model, tp, moe=moe_model)
        # Per layer: the fixed kernels (norms, rotary, launches), the fixed part of each of its
        # GEMMs, which an FP8/FP4 path pays more of (activation quantization, scale handling), and
        # the KV format's (an FP8 cache quantizes K and V on write).
        gemm_fixed_us = GEMMS_PER_LAYER * kernel.gemm_fixed_us * gemm_depth_share(model, tp)
        fixed_us = kernel.layer_overhead_us + gemm_fixed_us
        self.layer_overhead = (fixed_us + attention.fixed_us) * 1e-6
        # A GEMM needs enough M x N tiles to fill the GPU: narrower GEMMs per GPU (a smaller
        # model, or more TP) need more tokens to reach the same efficiency, less than
        # proportionally (``compute_width_exponent``: a one-token step's compute floor shrinks
        # with TP as its GEMMs do, if more slowly than their weights).
        width = model.hidden_size / tp
        self.width_exponent = cat.compute_width_exponent
        scale = float((REFERENCE_WIDTH / width) ** self.width_exponent)
        self.half_tokens = kernel.compute_half_tokens * scale
        self.step_overhead = cat.step_overhead_us * 1e-6
        link = cat.link(gpu.id)
        self.link_bandwidth = link.bus_gbs * 1e9
        self.link_latency = link.latency_us * 1e-6
        # A TP group wider than a node spans nodes; their GPUs meet over the scale-out NIC.
        self.nodes = -(-tp // max(1, gpu.gpus_per_node))
        self.nic_bandwidth = cat.kv_transfer.nic_gbs(gpu.sm) * 1e9

        total = engine.weight_bytes if engine.weight_bytes is not None else model.weight_bytes(BF16)
        embedding = model.vocab_size * model.hidden_size * BF16  # gathered, never streamed
        # FP8/FP4 checkpoints keep the LM head in BF16: it streams through a BF16 GEMM.
        self.head_bytes, self.head_bandwidth = 0.0, self.gemm_bandwidth
        if dtype != "bf16":
            self.head_bytes = model.vocab_size * model.hidden_size * BF16 / tp
            bf16 = cat.kernel(gpu.sm, "bf16", gpu.id)
            self.head_bandwidth = gpu.hbm_bandwidth_gbs * 1e9 * bf16.bandwidth
        streamed = max(0.0, max(0.0, total - embedding) / tp - self.head_bytes)
        active_share = model.active_params_b / model.params_b
        self.active_weight_bytes = streamed * active_share
        self.inactive_weight_bytes = streamed - self.active_weight_bytes
        # GEMM FLOPs per token: the decoder body (the embedding is a gather); the LM head runs
        # only for tokens that are sampled (decode), not for every prompt token.
        self.head_flops = 2 * model.vocab_size * model.hidden_size / tp
        body = model.active_params_b * 1e9 - 2 * model.vocab_size * model.hidden_size
        self.flops_per_token = 2 * max(body, 0.5 * model.active_params_b * 1e9) / tp
        heads = model.num_attention_heads * model.head_dim
        self.attn_flops_per_pair = 4 * model.num_layers * heads / tp
        kv = model.kv_bytes_per_token(engine.kv_bytes_per_value)
        self.kv_bytes_per_token = kv / (1 if model.kv_lora_rank else min(tp, model.num_kv_heads))
        self.attn_dp = engine.attn_dp if engine.attn_dp > 1 and tp % engine.attn_dp == 0 else 1
        self.attn_tp = tp // self.attn_dp
        self.query_heads = model.num_attention_heads / self.attn_tp  # on one GPU
        self.mla_flops_per_kv_token = self._mla_flops_per_kv_token()
        sharding = "ep" if engine.ep > 1 else "tp"
        self.deepep = engine.moe_a2a == "deepep" and engine.ep > 1
        if self.deepep:
            sharding = "deepep"  # DeepEP's dispatch and DeepGEMM's grouped GEMMs, not fused MoE
        moe = cat.moe_row(gpu.sm, sharding, dtype) if model.expert_params_b > 0 else None
        self.moe = moe
        if self.moe is not None:
            self._init_moe(model, total, embedding, compute_tflops(gpu, engine.quantization))

    def _init_moe(self, model: ModelShape, total: float, embedding: float, tflops: float) -> None:
        """Split a MoE model's weights into the routed experts (over all TP GPUs) and the rest
        (attention, router, shared parts: over an attention rank's TP/attn_dp GPUs)."""
        assert self.moe is not None
        attn_tp = self.attn_tp
        experts = model.expert_params_b / model.params_b * max(0.0, total - embedding)
        self.expert_bytes = experts / self.tp
        self.expert_bandwidth = self.gpu.hbm_bandwidth_gbs * 1e9 * self.moe.bandwidth
        self.expert_flops = tflops * 1e12 * self.moe.compute
        self.route_share = (model.experts_per_token or 1) / (model.num_experts or 1)
        self.expert_flops_per_token = 2 * model.expert_params_b * 1e9 * self.route_share / self.tp
        self.head_bytes = self.head_bytes * self.tp / attn_tp
        self.head_flops = self.head_flops * self.tp / attn_tp
        dense = max(0.0, total - embedding - experts) / attn_tp - self.head_bytes
        self.active_weight_bytes, self.inactive_weight_bytes = dense, 0.0
        dense_params = model.active_params_b - model.expert_params_b * self.route_share
        body = dense_params * 1e9 - 2 * model.vocab_size * model.hidden_size
        self.flops_per_token = 2 * max(body, 0.1 * dense_params * 1e9) / attn_tp
        heads = model.num_attention_heads * model.head_dim
        self.attn_flops_per_pair = 4 * model.num_layers * heads / attn_tp
        kv = model.kv_bytes_per_token(self.engine.kv_bytes_per_value)
        split = 1 if model.kv_lora_rank else min(attn_tp, model.num_kv_heads)
        self.kv_bytes_per_token = kv / split
        # Wider per-GPU GEMMs (an attention rank's TP, not the whole group's).
        self.half_tokens *= float((attn_tp / self.tp) ** self.width_exponent)

    # ---- one step ----------------------------------------------------------------------------
    def step_seconds(self, work: StepWork) -> float:
        if work.empty:
            return 0.0
        adapters = self._lora_seconds(work)
        if self.moe is not None:
            return self._moe_step_seconds(work) + adapters
        return self._dense_step_seconds(work) + adapters

    def _lora_seconds(self, work: StepWork) -> float:
        lora = self.engine.lora
        if lora is None:
            return 0.0
        tokens = work.prefill_tokens + work.decode_tokens
        return lora_seconds(lora, self.gpu, work.lora_adapters, tokens)

    def _dense_step_seconds(self, work: StepWork) -> float:
        tokens = work.prefill_tokens + work.decode_tokens
        gemm = max(
            self._weights_read(tokens) / self.gemm_bandwidth
            + self.head_bytes / self.head_bandwidth,
            self.gemm_compute_seconds(
                self.flops_per_token * tokens + self.head_flops * work.decode_tokens, tokens
            ),
        )
        attention = self.kv_read_seconds(work.decode_context) + self.prefill_attention_seconds(
            work.prefill_tokens, work.prefill_pairs
        )
        fixed = self.model.num_layers * self.layer_overhead + self.step_overhead
        fixed += self.elementwise_seconds(tokens)
        seconds = gemm + attention + fixed + self.allreduce_seconds(tokens)
        spec = self.engine.spec
        if spec is not None and work.decode_seqs:
            seconds += self.draft_seconds(work.decode_seqs, work.decode_context)
            seconds += spec.verify_overhead_s * work.decode_tokens + spec.step_overhead_s
            seconds += spec.tree_verify_seconds(self.model.num_layers, self.query_heads)
        return seconds

    def _moe_step_seconds(self, work: StepWork) -> float:
        """A MoE step: each attention rank runs its share of the sequences through the dense
        part; the experts run every rank's tokens; gather/scatter around each MoE layer."""
        assert self.moe is not None
        dp = self.attn_dp
        tokens = work.prefill_tokens + work.decode_tokens
        rank = tokens / dp  # the ranks split the batch evenly
        dense = max(
            self._weights_read(tokens) / self.gemm_bandwidth
            + self.head_bytes / self.head_bandwidth,
            self.gemm_compute_seconds(
                self.flops_per_token * rank + self.head_flops * work.decode_tokens / dp, rank
            ),
        )
        # A local expert is streamed when any token is routed to it.
        touched = 1 - (1 - self.route_share) ** tokens
        per_expert = max(tokens * self.route_share, 1e-9)
        ramp = (per_expert + self.moe.compute_half_tokens) / per_expert
        experts = max(
            self.expert_bytes * touched / self.expert_bandwidth,
            self.expert_flops_per_token * tokens * ramp / self.expert_flops,
        )
        attention = self.kv_read_seconds(work.decode_context / dp) + self.prefill_attention_seconds(
            work.prefill_tokens, work.prefill_pairs / dp
        )
        layers = self.model.num_layers
        fixed = layers * (self.layer_overhead + self.moe.fixed_us * 1e-6) + self.step_overhead
        if work.prefill_tokens:
            fixed += layers * self.moe.prefill_fixed_us * 1e-6
        fixed += self.elementwise_seconds(rank)
        comm = self._moe_comm_seconds(tokens, decode_only=not work.prefill_tokens)
        seconds = dense + experts + attention + fixed + comm
        spec = self.engine.spec
        if spec is not None and work.decode_seqs:
            seconds += self.draft_seconds(work.decode_seqs, work.decode_context // dp)
            seconds += spec.verify_overhead_s * work.decode_tokens / dp + spec.step_overhead_s
            seconds += spec.tree_verify_seconds(self.model.num_layers, self.query_heads)
        return seconds

    def _moe_comm_seconds(self, tokens: float, decode_only: bool = False) -> float:
        """Without attention DP: the TP all-reduces. With it: per layer, the gather of every
        rank's tokens before the experts and the scatter after (a ring all-reduce's bytes over
        the whole group), or DeepEP's dispatch and combine (``_deepep_seconds``), plus the
        attention rank's own all-reduce when it spans GPUs."""
        if self.attn_dp == 1 and not self.deepep:
            return self.allreduce_seconds(int(tokens))
        layers = self.model.num_layers
        size = tokens * self.model.hidden_size * BF16
        if self.deepep:
            group = self._deepep_seconds(tokens, decode_only)
        else:
            group = 2 * (self.tp - 1) / self.tp * size / self.link_bandwidth
            group += 2 * self.link_latency
        inner = 0.0
        if self.attn_tp > 1:
            share = 2 * (self.attn_tp - 1) / self.attn_tp * size / self.attn_dp
            inner = share / self.link_bandwidth + self.link_latency
        return layers * (group + inner)

    def _deepep_seconds(self, tokens: float, low_latency: bool = False) -> float:
        """One MoE layer's DeepEP dispatch and combine: each GPU sends its share of the tokens
        once to every other GPU holding one of their top-k experts (FP8 out, one byte a value)
        and takes their outputs back (BF16), instead of gathering every token everywhere.

        Across nodes the NIC and NVLink carry their parts at once, so the slower of the two
        bounds the layer (at the ``deepep`` row's ``nic_share`` of the NIC's line rate). A step
        with prompt tokens runs DeepEP's normal mode, which sends a token once over RDMA to each
        other node holding one of its experts and forwards it there over NVLink; a decode step
        its low-latency mode, which sends one copy per expert straight to the expert's GPU."""
        topk = self.model.experts_per_token or 1
        remote = (self.tp - 1) * (1 - (1 - 1 / self.tp) ** topk)  # other GPUs a token visits
        per_visit = tokens / self.tp * self.model.hidden_size * (1 + BF16)
        seconds = per_visit * remote / self.link_bandwidth
        if self.nodes > 1:
            node_share = 1 / self.nodes  # of the experts, on any one node
            copies = (self.nodes - 1) * (1 - (1 - node_share) ** topk)  # other nodes visited
            if low_latency:
                copies = topk * (1 - node_share)  # experts on other nodes, one copy each
            nic = self.nic_bandwidth * (self.moe.nic_share if self.moe is not None else 1.0)
            seconds = max(seconds, per_visit * copies / nic)
        return seconds + 2 * self.link_latency

    def decode_step_seconds(self, batch: int, context: int) -> float:
        """One plain decode step of `batch` sequences holding `context` tokens each."""
        work = StepWork(decode_seqs=batch, decode_tokens=batch, decode_context=batch * context)
        return self.step_seconds(work)

    def prefill_seconds(self, tokens: int, batch: int = 1) -> float:
        """Prefill of `batch` prompts of `tokens` each in one step (no cached prefix)."""
        work = StepWork(prefill_tokens=tokens * batch, prefill_pairs=batch * tokens * tokens / 2)
        return self.step_seconds(work)

    # ---- parts -------------------------------------------------------------------------------
    def _mla_flops_per_kv_token(self) -> float:
        """FLOPs per cached token of one rank's absorbed MLA decode, over all layers: each of the
        rank's heads scores the token's latent-plus-rope vector and sums its latent (0: GQA)."""
        latent = self.model.kv_lora_rank
        if not latent:
            return 0.0
        heads = self.model.num_attention_heads / self.attn_tp
        per_head = 2 * (latent + (self.model.qk_rope_head_dim or 0)) + 2 * latent
        return self.model.num_layers * heads * per_head

    def kv_read_seconds(self, context: float) -> float:
        """Decode attention over `context` cached tokens of one attention rank: the KV read at
        the kernel's bandwidth share, or for MLA the absorbed kernel's FLOPs where slower."""
        read = self.kv_bytes_per_token * context / self.attn_bandwidth
        if self.mla_flops:
            return max(read, self.mla_flops_per_kv_token * context / self.mla_flops)
        return read

    def prefill_attention_seconds(self, tokens: int, pairs: float) -> float:
        """Prefill attention over `pairs` query-key pairs: their FLOPs at the kernel's share of
        peak, and its floor per layer once a step prefills at all (AIC 0.12's per-op SGLang
        context attention takes ~30 us a layer on Hopper at 512 tokens whatever the heads)."""
        if tokens <= 0:
            return 0.0
        return self.prefill_attn_fixed + self.attn_flops_per_pair * pairs / self.attn_flops

    def elementwise_seconds(self, tokens: float) -> float:
        """The elementwise kernels' bytes for `tokens` (``elementwise_bytes_per_token``)."""
        return self.elementwise_bytes * tokens / self.elementwise_bandwidth

    def _weights_read(self, tokens: float) -> float:
        # MoE: a small batch touches only a few experts; a large one touches all of them.
        touched = min(1.0, tokens / 256)
        return self.active_weight_bytes + self.inactive_weight_bytes * touched

    def gemm_compute_seconds(self, flops: float, tokens: float) -> float:
        """`flops` of GEMMs over M = `tokens` rows, which reach M / (M + half) of the kernel's
        share of peak (small M leaves tiles and SMs idle)."""
        if tokens <= 0:
            return 0.0
        return flops * (tokens + self.half_tokens) / (tokens * self.gemm_flops)

    def allreduce_seconds(self, tokens: int) -> float:
        """Two ring all-reduces of the hidden states per layer across the TP group."""
        if self.tp == 1:
            return 0.0
        size = tokens * self.model.hidden_size * BF16
        ring = 2 * (self.tp - 1) / self.tp * size / self.link_bandwidth
        return 2 * self.model.num_layers * (ring + self.link_latency)

    def draft_seconds(self, seqs: int, context: int) -> float:
        """The draft passes of one speculative step for `seqs` sequences (`context` KV tokens).

        SGLang runs ``num_steps`` draft forwards per step (the draft-extend pass over the
        accepted tokens and ``num_steps - 1`` more), each over ``topk`` tokens per sequence: the
        draft's weights (a 1-layer EAGLE head plus its LM head, which for a 128k vocabulary is
        most of it), its KV reads, and a fixed cost per pass.
        """
        spec = self.engine.spec
        if spec is None:
            return 0.0
        if spec.algorithm == "NGRAM":
            return spec.draft_overhead_s  # a CPU trie lookup, no GPU pass
        lm_head = self.model.vocab_size * self.model.hidden_size * BF16 / self.tp
        draft = spec.draft
        if spec.algorithm == "NEXTN" or draft is None:
            # One extra decoder layer of the target plus the target's LM head.
            body = self.active_weight_bytes + self.head_bytes - lm_head
            body = max(0.0, body) / self.model.num_layers
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
                self.gemm_compute_seconds(2 * weights / BF16 * tokens, tokens),
            )
            + per_layer_kv * kv_layers * context / self.attn_bandwidth
            + layers * self.layer_overhead
            + spec.draft_overhead_s
        )
        return spec.shape.num_steps * one_pass
