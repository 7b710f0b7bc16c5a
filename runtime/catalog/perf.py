"""The performance-model catalogue: `PerfCatalog` over `perf.yaml`, constants with sources."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

_DATA = Path(__file__).with_name("perf.yaml")


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KernelEfficiency(_Row):
    generation: int  # compute capability x10, major only (80, 89, 90, 100)
    dtype: str  # bf16, fp8, fp4
    gpu: str | None = None  # a row for one GPU id overrides its generation's row
    bandwidth: float = Field(gt=0, le=1)
    compute: float = Field(gt=0, le=1)
    layer_overhead_us: float = Field(ge=0)
    # A GEMM of M tokens reaches compute * M / (M + half) of peak: small M leaves tiles and SMs
    # idle (wave quantization), so short prefills and mid-size batches run below it. half is
    # compute_half_tokens at a per-GPU GEMM width (hidden size / TP) of 4096, and grows as the
    # GEMM narrows (fewer N tiles to spread over the SMs).
    compute_half_tokens: float = Field(default=0.0, ge=0)
    # Fixed cost of each GEMM launch whatever its size: the kernel's prologue and, for FP8/FP4,
    # the activation-quantization kernel that runs ahead of it.
    gemm_fixed_us: float = Field(default=0.0, ge=0)
    source: str


class AttentionEfficiency(_Row):
    kv_bytes: float = Field(gt=0)  # bytes per cached value: 2 (BF16), 1 (FP8), 0.5625 (FP4)
    bandwidth: float = Field(gt=0, le=1)
    # Fixed cost per layer and step of this KV format: an FP8/FP4 cache quantizes K and V as it
    # writes them and runs a dequantizing kernel, whatever the context.
    fixed_us: float = Field(default=0.0, ge=0)
    generation: int | None = None  # rows for a GPU generation override the generic ones
    source: str


class AttentionCompute(_Row):
    """Share of BF16 peak that prefill (flash) attention reaches on one GPU generation."""

    generation: int
    compute: float = Field(gt=0, le=1)
    source: str


class MoeEfficiency(_Row):
    """The routed experts' grouped GEMMs (fused MoE) on one GPU generation.

    They run far below a dense GEMM's shares: each expert sees only the tokens routed to it, so
    its M is a few tokens and its tiles mostly idle; `fixed_us` is the router, the top-k and the
    token sort/permute each MoE layer runs whatever the batch.
    """

    generation: int
    # ep: whole experts per GPU (--ep-size = TP); tp: every expert sliced over the TP GPUs.
    sharding: Literal["ep", "tp"] = "ep"
    bandwidth: float = Field(gt=0, le=1)  # share of HBM bandwidth streaming expert weights
    compute: float = Field(gt=0, le=1)  # share of the GEMM dtype's peak the expert GEMMs reach
    fixed_us: float = Field(ge=0)  # per MoE layer and step
    # The share rises with the tokens each expert gets: compute x M / (M + half), M per expert.
    compute_half_tokens: float = Field(default=0.0, ge=0)
    source: str


class Interconnect(_Row):
    gpu: str
    bus_gbs: float = Field(gt=0)
    latency_us: float = Field(ge=0)


class Nic(_Row):
    """The scale-out NIC line rate per GPU that a P/D pair's KV transfer crosses."""

    generation: int  # compute capability x10, major only; the newest at or below a GPU's applies
    gbs: float = Field(gt=0)  # GB/s (10^9 bytes/s), one direction
    source: str


class TransferBackend(_Row):
    """What one --disaggregation-transfer-backend reaches on that NIC."""

    name: str
    efficiency: float = Field(ge=0, le=1)  # share of line rate; 0 moves nothing (fake)
    latency_us: float = Field(ge=0)  # per transfer: handshake and completion notification
    source: str


class KvTransfer(_Row):
    nics: tuple[Nic, ...] = Field(min_length=1)
    backends: tuple[TransferBackend, ...] = Field(min_length=1)
    default_backend: str

    def nic_gbs(self, sm: int) -> float:
        """The newest generation's line rate at or below `sm` (an older GPU takes the oldest)."""
        rows = [n for n in self.nics if n.generation <= sm]
        if not rows:
            return min(self.nics, key=lambda n: n.generation).gbs
        return max(rows, key=lambda n: n.generation).gbs

    def backend(self, name: str | None) -> TransferBackend:
        """The named backend, else the default one (SGLang's default is mooncake)."""
        by_name = {row.name: row for row in self.backends}
        return by_name.get(name or self.default_backend) or by_name[self.default_backend]


class SpecAlgorithm(_Row):
    acceptance: float = Field(gt=0, lt=1)
    depth_decay: float = Field(gt=0, le=1)
    tree_gain: float = Field(ge=0, le=1)
    draft_overhead_us: float = Field(ge=0)
    verify_overhead_us: float = Field(ge=0)
    source: str


class SpecShape(_Row):
    num_steps: int = Field(ge=1)
    topk: int = Field(ge=1)
    draft_tokens: int = Field(ge=1)


class ArchShape(SpecShape):
    architectures: tuple[str, ...]


class SpecPair(_Row):
    target: str
    draft: str
    acceptance: float = Field(gt=0, lt=1)
    source: str


class Speculative(_Row):
    algorithms: dict[str, SpecAlgorithm]
    aliases: dict[str, str] = {}
    default_shape: SpecShape
    arch_shapes: tuple[ArchShape, ...] = ()
    ngram_shape: SpecShape
    pairs: tuple[SpecPair, ...] = ()


class PublishedFigure(_Row):
    """One end-to-end figure from a cited source that the model must reproduce."""

    id: str
    model: str
    gpu: str
    metric: str  # decode_tok_s | ratio
    value: float = Field(gt=0)
    source: str
    tp: int = 1
    batch: int = 1
    context: int = 1024
    quantization: str | None = None
    baseline_quantization: str | None = None
    speculative_algorithm: str | None = None
    draft: str | None = None


class PerfCatalog(_Row):
    kernels: tuple[KernelEfficiency, ...]
    step_overhead_us: float = Field(ge=0)
    attention: tuple[AttentionEfficiency, ...] = Field(min_length=1)
    attention_compute: tuple[AttentionCompute, ...] = Field(min_length=1)
    interconnect: tuple[Interconnect, ...]
    default_interconnect: Interconnect
    speculative: Speculative
    kv_transfer: KvTransfer
    published: tuple[PublishedFigure, ...] = ()
    moe: tuple[MoeEfficiency, ...] = ()

    def moe_row(self, sm: int, sharding: str = "ep") -> MoeEfficiency | None:
        """The newest generation's MoE row for `sharding` at or below `sm`, else the oldest;
        the EP rows stand in for a sharding without rows; None: no rows at all."""
        table = [r for r in self.moe if r.sharding == sharding] or list(self.moe)
        if not table:
            return None
        rows = [r for r in table if r.generation <= sm]
        if not rows:
            return min(table, key=lambda r: r.generation)
        return max(rows, key=lambda r: r.generation)

    def kernel(self, sm: int, dtype: str, gpu_id: str = "") -> KernelEfficiency:
        """The GPU's own row for `dtype`, else the newest generation's at or below `sm`."""
        rows = [k for k in self.kernels if k.dtype == dtype and k.generation <= sm]
        own = [k for k in rows if k.gpu is not None and k.gpu.lower() == gpu_id.lower()]
        if own:
            return own[0]
        rows = [k for k in rows if k.gpu is None]
        if not rows:  # no such path at this generation: the GEMMs run in BF16
            bf16 = [k for k in self.kernels if k.dtype == "bf16" and k.gpu is None]
            rows = [k for k in bf16 if k.generation <= sm] or [
                min(bf16, key=lambda k: k.generation)
            ]
        return max(rows, key=lambda k: k.generation)

    def attention_row(self, kv_bytes: float, sm: int = 90) -> AttentionEfficiency:
        """Decode attention over a KV cache of this width: the newest generation's rows at or
        below `sm`, else the generic rows; the nearest width among them."""
        generations = [r.generation for r in self.attention if r.generation is not None]
        newest = max((g for g in generations if g <= sm), default=None)
        rows = [r for r in self.attention if r.generation == newest] or list(self.attention)
        return min(rows, key=lambda row: abs(row.kv_bytes - kv_bytes))

    def attention_bandwidth(self, kv_bytes: float, sm: int = 90) -> float:
        """Share of HBM bandwidth decode attention reaches reading a KV cache of this width."""
        return self.attention_row(kv_bytes, sm).bandwidth

    def attention_compute_share(self, sm: int) -> float:
        """The newest generation's prefill-attention share at or below `sm` (else the oldest)."""
        rows = [r for r in self.attention_compute if r.generation <= sm]
        if not rows:
            return min(self.attention_compute, key=lambda r: r.generation).compute
        return max(rows, key=lambda r: r.generation).compute

    def link(self, gpu_id: str) -> Interconnect:
        for row in self.interconnect:
            if row.gpu.lower() == gpu_id.lower():
                return row
        return self.default_interconnect

    def algorithm(self, name: str) -> SpecAlgorithm | None:
        key = name.upper()
        key = self.speculative.aliases.get(key, key)
        return self.speculative.algorithms.get(key)

    def pair_acceptance(self, target: str, draft: str | None) -> float | None:
        for pair in self.speculative.pairs:
            if pair.target == target and pair.draft == draft:
                return pair.acceptance
        return None


@cache
def perf_catalog() -> PerfCatalog:
    """The calibrated constants, loaded once."""
    return PerfCatalog.model_validate(yaml.safe_load(_DATA.read_text()))
