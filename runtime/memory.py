"""Per-GPU memory arithmetic for one engine group, mirroring how SGLang 0.5.23 sizes its pools.

SGLang reserves memory for activations and CUDA graphs, gives `mem_fraction_static` of the GPU to
weights plus the KV pool, and fills the KV pool with as many tokens as fit (SGLANG.md section 1.3).
The figures here are estimates made before any GPU is touched: good enough to refuse a spec that
cannot start and to show a person the trade-offs, not a promise of the exact token count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.catalog import GpuType, ModelArch, get_model, kv_format, weight_format
from runtime.lora import adapter_pool_bytes
from runtime.spec import RuntimeSpec
from runtime.topology import EngineGroup

GIB = 1024**3
MIB = 1024**2

EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "MTP"})


def mixed_bytes_per_param(shares: Mapping[str, float]) -> float:
    """Average bytes per body weight of a mixed-precision checkpoint: `shares` of the body's
    weights by weight method (the catalogue's bytes for each), the rest in BF16."""
    quantized = sum(shares.values())
    if not 0.0 <= quantized <= 1.0 + 1e-9:
        raise ValueError(f"quantized shares sum to {quantized}, not within [0, 1]")
    total = max(0.0, 1.0 - quantized) * 2.0
    for method, share in shares.items():
        form = weight_format(method)
        if form is None:
            raise KeyError(method)
        total += share * form.bytes
    return total


def weight_bytes_per_param(
    spec: RuntimeSpec, arch: ModelArch, body_bytes: float | None = None
) -> float:
    """Average bytes per parameter of the quantized body once loaded (the quantization
    catalogue's, which leans a little high so the memory check errs towards refusing), or the
    checkpoint's own when no method is named. `body_bytes`: a mixed-precision checkpoint's
    figure (``mixed_bytes_per_param``) instead of the method's."""
    if body_bytes is not None:
        return body_bytes
    method = spec.quantization.method
    if method is None:
        return arch.checkpoint_bytes_per_param
    form = weight_format(method)
    return 2.0 if form is None else form.bytes


def kv_bytes_per_value(dtype: str) -> float:
    """Bytes per KV value of a cache in `dtype` (``auto``: the model dtype, BF16, as SGLang keeps
    KV in BF16 unless asked, even for FP8 weights)."""
    form = kv_format(dtype)
    if form is None:
        raise KeyError(dtype)
    return form.bytes


def embedding_params(arch: ModelArch) -> float:
    """Parameters of the input embedding plus the LM head (untied: the catalogue does not say)."""
    return min(arch.params_b * 1e9 / 2, 2.0 * arch.vocab_size * arch.hidden_size)


def model_weight_bytes(
    spec: RuntimeSpec, arch: ModelArch, body_bytes: float | None = None
) -> float:
    """All weight bytes before any parallel split.

    A checkpoint as shipped is its on-disk size. Quantized on load (or a quantized method named),
    the body takes the method's bytes while the embedding and LM head stay BF16 (~2.1 GB for a
    Llama-3 70B), as FP8 and NVFP4 checkpoints keep them.
    """
    per_param = weight_bytes_per_param(spec, arch, body_bytes)
    if (spec.quantization.method is None and body_bytes is None) or per_param >= 2.0:
        return arch.weight_bytes(per_param)
    embedding = embedding_params(arch)
    return (arch.params_b * 1e9 - embedding) * per_param + embedding * 2.0


def default_chunked_prefill(memory_gib: float) -> int:
    """SGLang's choice of `--chunked-prefill-size` by GPU memory (memory_hook.py): the validator,
    the optimizer and the simulator all size chunks by it."""
    for limit, size in ((20, 2048), (35, 4096), (60, 4096), (90, 8192), (160, 8192)):
        if memory_gib < limit:
            return size
    return 16384


def rank_chunk(chunk: int, attn_dp: int) -> int:
    """One attention-DP rank's prefill chunk: SGLang divides ``--chunked-prefill-size`` by
    ``attn_dp_size`` (server_args), so each rank prefills at most this many tokens a step."""
    return chunk // attn_dp if attn_dp > 1 and chunk > 0 else chunk


def default_cuda_graph_bs(memory_gib: float, tp: int) -> int:
    """SGLang's choice of `--cuda-graph-max-bs-decode` by GPU memory and TP width."""
    table = ((20, 8, 8), (35, 48, 160), (60, 32, 160), (90, 256, 512), (160, 256, 512))
    for limit, narrow, wide in table:
        if memory_gib < limit:
            return narrow if tp < 4 else wide
    return 512


def cuda_graph_max_bs(spec: RuntimeSpec) -> int | None:
    """The ``--cuda-graph-max-bs-decode`` the spec asks for: its own figure, else with
    ``cuda_graph_trim`` the endpoint's concurrency (twice the autoscaler's per-replica target,
    for bursts above it; at most the running-request cap), else None (SGLang's default)."""
    batch = spec.batching
    if batch.cuda_graph_max_bs_decode is not None or not batch.cuda_graph_trim:
        return batch.cuda_graph_max_bs_decode
    concurrency = 2 * spec.autoscaling.concurrency_target
    running = default_max_running(spec)
    return min(concurrency, running) if running is not None else concurrency


def default_max_running(spec: RuntimeSpec) -> int | None:
    """SGLang forces 48 running requests with EAGLE-family or NGRAM speculation when unset."""
    if spec.batching.max_running_requests is not None:
        return spec.batching.max_running_requests
    return 48 if spec.speculator.enabled and spec.speculator.algorithm != "STANDALONE" else None


def reserved_bytes(spec: RuntimeSpec, gpu: GpuType, group: EngineGroup) -> float:
    """What SGLang keeps out of the static pool: activations, CUDA graphs, communication buffers."""
    chunk = spec.batching.chunked_prefill_size or default_chunked_prefill(gpu.memory_gib)
    asked = cuda_graph_max_bs(spec)
    graph_bs = asked or default_cuda_graph_bs(gpu.memory_gib, group.tp)
    running = default_max_running(spec)
    if running is not None and asked is None:
        graph_bs = min(graph_bs, running)
    reserved_mib = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + group.tp * group.pp / 8 * 1024
    if gpu.memory_gib > 60:
        reserved_mib = max(reserved_mib, 10 * 1024)
    if spec.speculator.algorithm in EAGLE_FAMILY | {"STANDALONE"}:
        # Draft CUDA graphs and draft activations; an approximation (SGLang sizes them at start-up).
        reserved_mib += 1024
    return reserved_mib * MIB


def draft_arch(spec: RuntimeSpec) -> ModelArch | None:
    if spec.speculator.draft_model is None:
        return None
    return get_model(spec.speculator.draft_model)


def _draft_costs(
    spec: RuntimeSpec, arch: ModelArch, kv_bytes: float, tp: int
) -> tuple[float, float]:
    """(draft weight bytes per GPU, draft KV bytes per token per GPU)."""
    algorithm = spec.speculator.algorithm
    if algorithm in {"none", "NGRAM"}:
        return 0.0, 0.0
    one_layer_kv = arch.kv_bytes_per_token(kv_bytes, tp) / arch.num_layers
    draft = draft_arch(spec)
    if algorithm == "MTP" or (draft is None and spec.speculator.draft_model is None):
        # NextN: one extra decoder layer of the target, same dtype.
        layer_weights = arch.weight_bytes(weight_bytes_per_param(spec, arch)) / arch.num_layers
        return layer_weights / tp, one_layer_kv
    if draft is None:
        # An uncatalogued draft: assume an EAGLE-sized head (about 2% of the target).
        return arch.weight_bytes(2.0) * 0.02 / tp, one_layer_kv
    return draft.weight_bytes(2.0) / tp, draft.kv_bytes_per_token(kv_bytes, tp)


@dataclass(frozen=True)
class MemoryFit:
    """Per-GPU memory of one engine replica; byte figures, see `gib` for display."""

    capacity: float  # device memory
    mem_fraction_static: float
    weights: float  # target + draft
    reserve: float  # activations, CUDA graphs, buffers (outside the static pool)
    kv_cache: float  # the KV pool SGLang would allocate
    kv_bytes_per_token: float
    max_kv_tokens: int  # tokens one DP rank's pool holds
    max_concurrent_tokens: int  # tokens the whole replica holds (all attention-DP ranks)
    context_length: int
    host_tier: float = 0.0  # HiCache's host pool per GPU (pinned host memory), 0 without it
    # LoRA's GPU pool (max_loras_per_batch slots of max_lora_rank), inside the static fraction:
    # SGLang allocates it before the KV pool, which gets what is left.
    adapters: float = 0.0

    @property
    def host_tier_tokens(self) -> int:
        """Tokens the host tier holds per GPU (its pool mirrors the GPU pool's layout)."""
        if not self.host_tier or self.kv_bytes_per_token <= 0:
            return 0
        return int(self.host_tier // self.kv_bytes_per_token)

    @property
    def total(self) -> float:
        return self.weights + self.adapters + self.kv_cache + self.reserve

    @property
    def concurrent_requests(self) -> int:
        """Requests of the full context length the replica's KV cache holds at once."""
        return self.max_concurrent_tokens // self.context_length if self.context_length else 0

    @property
    def weights_fit(self) -> bool:
        return self.weights + self.adapters + self.reserve < self.capacity and self.kv_cache > 0

    @property
    def fits(self) -> bool:
        return self.weights_fit and self.max_kv_tokens >= self.context_length


def context_length(spec: RuntimeSpec, arch: ModelArch) -> int:
    return spec.model.context_length or arch.max_context


def memory_fit(
    spec: RuntimeSpec,
    gpu: GpuType,
    arch: ModelArch,
    group: EngineGroup,
    body_bytes: float | None = None,
) -> MemoryFit:
    """How one GPU of `group` would be filled (`body_bytes`: see ``weight_bytes_per_param``)."""
    capacity = gpu.memory_bytes
    fraction = spec.batching.mem_fraction_static
    if fraction is None:
        fraction = max(0.0, (capacity - reserved_bytes(spec, gpu, group)) / capacity)
    kv_bytes = kv_bytes_per_value(spec.quantization.kv_cache_dtype)
    attn_tp = max(1, group.tp // group.attn_dp)
    weights = model_weight_bytes(spec, arch, body_bytes) / (group.tp * group.pp)
    draft_weights, draft_kv = _draft_costs(spec, arch, kv_bytes, group.tp)
    per_token = (arch.kv_bytes_per_token(kv_bytes, attn_tp) + draft_kv) / group.pp
    adapters = adapter_pool_bytes(spec.lora, arch, group.tp * group.pp)
    pool = max(0.0, fraction * capacity - weights - draft_weights - adapters)
    tokens = int(pool // per_token) if per_token > 0 else 0
    return MemoryFit(
        capacity=capacity,
        mem_fraction_static=fraction,
        weights=weights + draft_weights,
        reserve=capacity * (1 - fraction),
        kv_cache=pool,
        kv_bytes_per_token=per_token,
        max_kv_tokens=tokens,
        max_concurrent_tokens=tokens * group.attn_dp,
        context_length=context_length(spec, arch),
        host_tier=host_tier_bytes(spec, pool),
        adapters=adapters,
    )


def host_tier_bytes(spec: RuntimeSpec, kv_pool_bytes: float) -> float:
    """HiCache's host pool per GPU: `size_gb` when set, else `ratio` x the GPU's KV pool (as
    SGLang sizes it from --hicache-size / --hicache-ratio); 0 without a host tier."""
    host = spec.kv_cache.tiers.host
    if host is None:
        return 0.0
    if host.size_gb is not None:
        return host.size_gb * 1e9  # SGLang's --hicache-size is in GB
    return host.resolved_ratio * kv_pool_bytes


def host_memory_per_node(fit: MemoryFit, group: EngineGroup) -> float:
    """Host memory one node of `group` pins for HiCache: one host pool per GPU (TP rank)."""
    return fit.host_tier * group.gpus_per_node


def gib(value: float) -> float:
    """Bytes to GiB, rounded for display."""
    return round(value / GIB, 2)
