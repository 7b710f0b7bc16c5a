"""The performance-model catalogue: `PerfCatalog` over `perf.yaml`, constants with sources."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from runtime.catalog.data import read_yaml

_DATA = Path(__file__).with_name("perf.yaml")
# Written by bench/speculative.py from the `fit` rows of speculative/published_points.tsv.
_SPEC_FIT = Path(__file__).parent / "speculative" / "fitted.yaml"


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
    # MLA's absorbed decode attention (DeepSeek-V2/V3 class): every head attends over one shared
    # latent vector per token, so the kernel does (2 x (latent + rope) + 2 x latent) FLOPs per
    # head and cached token; with many heads per GPU it is bound by compute, not by the KV read.
    mla: bool = False
    compute: float | None = Field(default=None, gt=0, le=1)  # MLA rows: share of BF16 peak
    source: str


class AttentionCompute(_Row):
    """Share of BF16 peak that prefill (flash) attention reaches on one GPU generation, and
    the kernel's floor per layer of a step that prefills (paid whatever the prompt's length)."""

    generation: int
    compute: float = Field(gt=0, le=1)
    fixed_us: float = Field(default=0.0, ge=0)
    source: str


class MoeEfficiency(_Row):
    """The routed experts' grouped GEMMs (fused MoE) on one GPU generation.

    They run far below a dense GEMM's shares: each expert sees only the tokens routed to it, so
    its M is a few tokens and its tiles mostly idle; `fixed_us` is the router, the top-k and the
    token sort/permute each MoE layer runs whatever the batch.
    """

    generation: int
    # ep: whole experts per GPU (--ep-size = TP); tp: every expert sliced over the TP GPUs;
    # deepep: whole experts per GPU reached through DeepEP (--moe-a2a-backend deepep), whose
    # experts run DeepGEMM's grouped GEMMs instead of the fused-MoE kernel.
    sharding: Literal["ep", "tp", "deepep"] = "ep"
    # The experts' GEMM data type: a block-scaled FP8 fused MoE (DeepSeek-V3's checkpoint) reaches
    # a different share of its peak than a BF16 one; a dtype without rows takes BF16's.
    dtype: str = "bf16"
    bandwidth: float = Field(gt=0, le=1)  # share of HBM bandwidth streaming expert weights
    compute: float = Field(gt=0, le=1)  # share of the GEMM dtype's peak the expert GEMMs reach
    fixed_us: float = Field(ge=0)  # per MoE layer and step
    # DeepEP runs a step with prompt tokens in its normal (high-throughput) mode, whose dispatch
    # first exchanges the per-GPU token counts through the host: a fixed cost per MoE layer
    # that decode steps (its low-latency mode) do not pay. 0 for the other backends.
    prefill_fixed_us: float = Field(default=0.0, ge=0)
    # DeepEP across nodes: the share of the GPU's NIC line rate (``kv_transfer.nics``) its RDMA
    # dispatch and combine reach. 1 for the backends that never leave a node.
    nic_share: float = Field(default=1.0, gt=0, le=1)
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


class AcceptanceCurve(_Row):
    """Conditional acceptance per draft depth: P(depth i accepted | depth i-1 accepted).

    Depth 1 is ``first``; depth ``i >= 2`` is ``rest * decay**(i - 2)``. One form covers the three
    families the published traces show: flat (EAGLE-3: first = rest, decay 1), decaying (a
    one-step MTP/NextN module or an EAGLE-2 head reused for longer drafts: decay < 1) and bursty
    (NGRAM: a low first position, high once a match is found).
    """

    first: float = Field(gt=0, lt=1)
    rest: float = Field(gt=0, lt=1)
    decay: float = Field(default=1.0, gt=0, le=1)


class SpecAlgorithm(_Row):
    form: Literal["flat", "decaying", "bursty"]
    # Only where no fit covers the family (fitted.yaml's `families` wins): an assumed curve.
    curve: AcceptanceCurve | None = None
    source: str


class SpecShape(_Row):
    num_steps: int = Field(ge=1)
    topk: int = Field(ge=1)
    draft_tokens: int = Field(ge=1)


class ArchShape(SpecShape):
    architectures: tuple[str, ...]


class SpecCurve(AcceptanceCurve):
    """One (target, draft, workload) curve; names as published (model ids or repo names)."""

    target: str
    draft: str | None = None
    workload: str = "chat"
    algorithm: str
    source: str


class SpecEngineCost(_Row):
    """What one engine spends around the target's forward passes under speculation."""

    draft_pass_us: float = Field(ge=0)  # fixed cost per draft forward pass (launch, sampling)
    step_us: float = Field(ge=0)  # fixed cost per speculative step (tree build, draft extend)
    verify_token_us: float = Field(ge=0)  # bookkeeping per verified draft token and sequence
    ngram_us: float = Field(default=0.0, ge=0)  # NGRAM's CPU trie lookup per step
    # A tree's verify (topk > 1), once a step, per tree draft token, target layer and query
    # head on a GPU: SGLang verifies a tree through a custom-mask attention, a chain as plain
    # decode tokens (runtime/perf/spec.py, SpecConfig.tree_verify_seconds).
    tree_verify_ns: float = Field(default=0.0, ge=0)


class SpecTree(_Row):
    """How a draft tree's siblings behave: the target's token is a runner-up candidate with
    chance ``(1 - p) * catch``, while the draft scores its top candidate at ``confidence * p``
    and runner-ups at ``(1 - confidence * p) * score`` when SGLang picks the tree's top nodes
    by score (runtime/perf/spec.py)."""

    sibling_catch: float = Field(ge=0, le=1)
    sibling_score: float = Field(ge=0, le=1)
    draft_confidence: float = Field(default=1.0, gt=0, le=1)


class SpecFit(_Row):
    """bench/speculative.py's fit over the `fit` rows of published_points.tsv."""

    date: str
    command: str
    fit_rows: tuple[str, ...]
    tree: SpecTree
    engines: dict[str, SpecEngineCost]
    families: dict[str, AcceptanceCurve]
    curves: tuple[SpecCurve, ...] = ()
    # SpecBundle divides every shape of a (target, workload) by one baseline run, timed over the
    # whole run (prefill included) on a deployment it does not publish (TP, backend): per run,
    # its measured rate over the physics' decode rate, fitted on the run's own fit rows. Only
    # the bench uses it (it describes those runs, not the target).
    baseline_runs: dict[str, float] = {}


class Speculative(_Row):
    algorithms: dict[str, SpecAlgorithm]
    aliases: dict[str, str] = {}
    default_shape: SpecShape
    arch_shapes: tuple[ArchShape, ...] = ()
    ngram_shape: SpecShape
    pairs: tuple[SpecCurve, ...] = ()  # assumed curves (no published point)
    fit: SpecFit


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
    # How a kernel row's compute_half_tokens grows as the per-GPU GEMM width narrows:
    # (4096 / width) ** this. 1 made a narrow GEMM's small-batch floor as slow as a wide one's.
    compute_width_exponent: float = Field(default=1.0, ge=0, le=1)
    step_overhead_us: float = Field(ge=0)
    # Share of HBM bandwidth the per-token elementwise kernels (residual add + RMSNorm, the
    # gated activation) reach; their bytes grow with the step's tokens.
    elementwise_bandwidth: float = Field(default=0.8, gt=0, le=1)
    attention: tuple[AttentionEfficiency, ...] = Field(min_length=1)
    attention_compute: tuple[AttentionCompute, ...] = Field(min_length=1)
    interconnect: tuple[Interconnect, ...]
    default_interconnect: Interconnect
    speculative: Speculative
    kv_transfer: KvTransfer
    published: tuple[PublishedFigure, ...] = ()
    moe: tuple[MoeEfficiency, ...] = ()

    def moe_row(self, sm: int, sharding: str = "ep", dtype: str = "bf16") -> MoeEfficiency | None:
        """The newest generation's MoE row for `sharding` and `dtype` at or below `sm`, else the
        oldest; BF16's rows stand in for a dtype without rows and the EP rows for a sharding
        without rows (DeepEP's included); None: no rows at all."""
        typed = [r for r in self.moe if r.dtype == dtype] or [
            r for r in self.moe if r.dtype == "bf16"
        ]
        table = (
            [r for r in typed if r.sharding == sharding]
            or [r for r in typed if r.sharding == "ep"]
            or typed
            or list(self.moe)
        )
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

    def attention_row(
        self, kv_bytes: float, sm: int = 90, mla: bool = False
    ) -> AttentionEfficiency:
        """Decode attention over a KV cache of this width: the newest generation's rows at or
        below `sm`, else the generic rows; the nearest width among them. An MLA model takes the
        MLA kernels' rows where the catalogue has them for its generation, else the GQA ones."""
        table = [r for r in self.attention if r.mla == mla] or [
            r for r in self.attention if not r.mla
        ]
        generations = [r.generation for r in table if r.generation is not None]
        newest = max((g for g in generations if g <= sm), default=None)
        rows = [r for r in table if r.generation == newest]
        if not rows:
            rows = [r for r in self.attention if not r.mla and r.generation is None]
        return min(rows, key=lambda row: abs(row.kv_bytes - kv_bytes))

    def attention_bandwidth(self, kv_bytes: float, sm: int = 90) -> float:
        """Share of HBM bandwidth decode attention reaches reading a KV cache of this width."""
        return self.attention_row(kv_bytes, sm).bandwidth

    def attention_compute_row(self, sm: int) -> AttentionCompute:
        """The newest generation's prefill-attention row at or below `sm` (else the oldest)."""
        rows = [r for r in self.attention_compute if r.generation <= sm]
        if not rows:
            return min(self.attention_compute, key=lambda r: r.generation)
        return max(rows, key=lambda r: r.generation)

    def attention_compute_share(self, sm: int) -> float:
        """The newest generation's prefill-attention share at or below `sm` (else the oldest)."""
        return self.attention_compute_row(sm).compute

    def link(self, gpu_id: str) -> Interconnect:
        for row in self.interconnect:
            if row.gpu.lower() == gpu_id.lower():
                return row
        return self.default_interconnect

    def algorithm(self, name: str) -> SpecAlgorithm | None:
        key = name.upper()
        key = self.speculative.aliases.get(key, key)
        return self.speculative.algorithms.get(key)

    def family_curve(self, name: str) -> AcceptanceCurve | None:
        """The algorithm family's curve: the fit's, else the catalogue's assumed one."""
        key = name.upper()
        key = self.speculative.aliases.get(key, key)
        fitted = self.speculative.fit.families.get(key)
        row = self.speculative.algorithms.get(key)
        return fitted or (row.curve if row is not None else None)

    def pair_curve(
        self, targets: set[str], drafts: set[str | None], workload: str | None = None
    ) -> SpecCurve | None:
        """The curve of a (target, draft) pair (names in any of their spellings), preferring
        `workload`, then chat; fitted curves before assumed ones."""
        found = [
            curve
            for curve in (*self.speculative.fit.curves, *self.speculative.pairs)
            if curve.target.lower() in targets and (curve.draft or "").lower() in drafts
        ]
        for wanted in (workload, "chat", "mtbench"):
            for curve in found:
                if curve.workload == wanted:
                    return curve
        return found[0] if found else None


@cache
def perf_catalog() -> PerfCatalog:
    """The calibrated constants, loaded once."""
    data = read_yaml(_DATA)
    data["speculative"]["fit"] = read_yaml(_SPEC_FIT)
    return PerfCatalog.model_validate(data)
