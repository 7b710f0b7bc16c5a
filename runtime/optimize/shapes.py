"""Engine shapes: the formats and parallelism one engine of a candidate can take, built and pruned.

A shape is a GPU x TP x weight quantization x KV-cache dtype x speculator (x attention DP, expert
layout and, where priced, DeepEP for MoE models), and, where the traffic's prefix working set (or
its multi-turn histories) can outgrow the GPU's KV pool, the same with a HiCache host tier.
``engine_shapes`` enumerates them for a request; ``build_shape`` turns one set of knobs into a shape
with its step-time model, or None when it does not fit in GPU memory or its spec fails validation.
A TP that breaks SGLang's head rule is never built.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from runtime.catalog import GpuType, ModelArch, kv_native_on, list_models, native_on
from runtime.catalog.perf import perf_catalog
from runtime.lora import resolved_target_modules
from runtime.memory import kv_bytes_per_value, memory_fit, model_weight_bytes
from runtime.optimize.types import Feature, OptimizeRequest
from runtime.perf.hardware import GpuShape, ModelShape, gpu_shape, lookup_model, model_shape
from runtime.perf.kv_tiers import tier_links
from runtime.perf.lora import LoraCost, lora_cost
from runtime.perf.quant import gemm_dtype
from runtime.perf.spec import SpecConfig, resolve_spec
from runtime.perf.step import EngineShape, StepModel
from runtime.rules.parallel import working_tps
from runtime.spec import RuntimeSpec
from runtime.topology import engine_groups
from runtime.validate import has_errors, validate


@dataclass(frozen=True, kw_only=True)
class ShapeKnobs:
    """One engine's formats and parallelism: what its spec says."""

    gpu: GpuType
    tp: int
    quantization: str | None
    kv_dtype: str
    ep: int  # expert parallelism (MoE: TP, or 1 for experts sliced over the TP GPUs; dense: 1)
    speculator: str = "none"  # "none", "NGRAM", "EAGLE", "EAGLE3", "MTP"
    draft: str | None = None
    attn_dp: int = 1  # attention data-parallel ranks in the TP group (MoE models only; else 1)
    moe_a2a: str = "none"  # how tokens reach whole experts: "none" or "deepep" (DeepEP)
    hicache_ratio: float | None = None  # HiCache's host tier, a multiple of the GPU KV pool
    # A mixed-precision checkpoint's bytes per body weight (what ``runtime.quantize`` prices a
    # recipe at: ``runtime.memory.mixed_bytes_per_param``); None: the quantization method's own.
    body_bytes: float | None = None


@dataclass(frozen=True)
class ShapeContext:
    """What every shape of one model on one GPU type shares: the spec's base and both shapes."""

    base: dict[str, Any]  # ``base_spec``'s model and hardware sections
    arch: ModelArch
    model: ModelShape
    gpu: GpuShape


@dataclass(frozen=True, kw_only=True)
class Shape(ShapeKnobs):
    """Knobs that fit and validate, with everything the rate search needs."""

    step: StepModel
    spec: SpecConfig | None
    kv_tokens: int  # tokens one replica's KV pool holds
    kv_bytes_per_token: float  # whole model, for the P/D transfer
    host_tokens: int = 0  # HiCache's host tier, tokens (0 without it)
    host_gbs: float = 0.0  # the host link each GPU loads back over, effective GB/s
    adapters: int = 0  # LoRA: distinct adapters the traffic spreads over (0: none)
    lora_cap: int = 0  # LoRA: max_loras_per_batch, the most distinct adapters one batch holds

    @property
    def features(self) -> frozenset[Feature]:
        used: set[Feature] = set()
        if self.hicache_ratio is not None:
            used.add("hicache")
        if self.quantization or self.kv_dtype != "auto":
            used.add("quantization")
        if self.speculator != "none":
            used.add("speculator")
        return frozenset(used)


def tp_choices(gpu: GpuType, arch: ModelArch) -> list[int]:
    """Powers of two up to one node that SGLang's TP rule allows for the model's attention and KV
    heads (``runtime.rules.parallel.working_tps``): no other width is ever built."""
    widths = [1 << k for k in range(gpu.gpus_per_node.bit_length()) if 1 << k <= gpu.gpus_per_node]
    return working_tps(arch.num_attention_heads, arch.num_kv_heads, widths)


def gpu_budget(request: OptimizeRequest, gpu: GpuType) -> int | None:
    """The most GPUs of `gpu` the request may use: its limit or the free count, else None."""
    counts = [request.limits.max_gpus, request.gpu_counts.get(gpu.id)]
    known = [c for c in counts if c is not None]
    return min(known) if known else None


def node_tps(gpu: GpuType, arch: ModelArch, budget: int | None) -> list[int]:
    """Engines over 2, 4, ... whole nodes within a GPU budget, for an MLA MoE model only: the
    shape SGLang runs DeepSeek-class models across nodes with (every GPU its own attention rank,
    whole experts reached through DeepEP: ``spans_nodes``), where only the tokens bound for
    another node's experts cross the NIC. Without a budget the search stays within a node."""
    if budget is None or not (arch.is_moe and arch.is_mla):
        return []
    per_node, nodes, widths = gpu.gpus_per_node, 2, []
    while per_node * nodes <= budget:
        widths.append(per_node * nodes)
        nodes *= 2
    return working_tps(arch.num_attention_heads, arch.num_kv_heads, widths)


def spans_nodes(gpu: GpuType, tp: int, dp: int, a2a: str) -> bool:
    """Whether knobs at `tp` may span nodes: within a node anything goes; across nodes only
    attention DP over every GPU with DeepEP (the all-gathers and all-reduces of the other
    layouts would run over the NIC at a fraction of NVLink's bandwidth)."""
    return tp <= gpu.gpus_per_node or (dp == tp and a2a == "deepep")


def attn_dp_choices(arch: ModelArch, tp: int) -> list[int]:
    """Attention DP sizes for a MoE model at `tp`: the powers of two dividing TP (attention runs
    as that many ranks of TP/DP GPUs; the experts stay spread over all TP GPUs). Dense: 1."""
    if not arch.is_moe:
        return [1]
    out, dp = [1], 2
    while dp <= tp:
        if tp % dp == 0:
            out.append(dp)
        dp *= 2
    return out


def ep_choices(arch: ModelArch, tp: int) -> list[int]:
    """A MoE model's experts over TP GPUs: whole experts per GPU (EP = TP) or each expert
    sliced over them (SGLang's MoE TP, no --ep-size). Dense, or one GPU: 1."""
    return [tp, 1] if arch.is_moe and tp > 1 else [1]


def a2a_choices(
    gpu: GpuType, arch: ModelArch, tp: int, dp: int, ep: int, quant: str | None
) -> list[str]:
    """DeepEP beside the default gather/scatter where it is priced: an MLA MoE model (DeepSeek
    class) with whole experts over the TP group (EP = TP) and every GPU its own attention rank,
    for an expert format with a DeepEP row. That is what ``perf.yaml``'s ``deepep`` rows are
    fitted on (AIConfigurator's DeepEP data); it has none for a GQA MoE such as Qwen3-235B, so
    the search does not offer DeepEP there (a spec may still set it, priced with the same row)."""
    if not (arch.is_moe and arch.is_mla) or tp < 2 or ep != tp or dp != tp:
        return ["none"]
    shape = gpu_shape(gpu)
    dtype = gemm_dtype(shape, quant or arch.checkpoint_quantization)
    row = perf_catalog().moe_row(shape.sm, "deepep", dtype)
    return ["none", "deepep"] if row is not None and row.sharding == "deepep" else ["none"]


def quant_choices(gpu: GpuType, arch: ModelArch, allowed: bool) -> list[str | None]:
    """As shipped, plus online FP8 where the GPU computes FP8 natively and the weights are BF16."""
    choices: list[str | None] = [None]
    if allowed and arch.checkpoint_quantization is None and native_on(gpu, "fp8"):
        choices.append("fp8")
    return choices


def kv_choices(gpu: GpuType, allowed: bool) -> list[str]:
    """The model's own KV dtype, plus FP8 and NVFP4 where the GPU runs them natively."""
    if not allowed:
        return ["auto"]
    return ["auto", *(dtype for dtype in ("fp8_e4m3", "nvfp4") if kv_native_on(gpu, dtype))]


def spec_choices(arch: ModelArch, allowed: bool) -> list[tuple[str, str | None]]:
    """(algorithm, draft repo): NGRAM, EAGLE/EAGLE3 with a catalogued head, MTP if shipped."""
    choices: list[tuple[str, str | None]] = [("none", None)]
    if not allowed:
        return choices
    choices.append(("NGRAM", None))
    for draft in list_models():
        if arch.id in draft.draft_for and draft.draft_algorithm in ("EAGLE", "EAGLE3"):
            choices.append((draft.draft_algorithm, draft.hf_repo))
    if arch.has_mtp:
        choices.append(("MTP", None))
    return choices


def base_spec(request: OptimizeRequest, arch: ModelArch, gpu: GpuType) -> dict[str, Any]:
    model: dict[str, Any] = {"source": request.model}
    if request.architecture is not None:
        model["architecture"] = request.architecture.model_dump(exclude_defaults=True)
    # The longest request the traffic sends, with headroom: a smaller context leaves KV for
    # concurrency instead of for one unlikely 128k prompt.
    longest = 2 * (request.traffic.input_tokens + request.traffic.output_tokens)
    model["context_length"] = min(arch.max_context, max(4096, 1 << (longest - 1).bit_length()))
    base: dict[str, Any] = {"model": model, "hardware": {"gpu": gpu.id}}
    if request.served_lora is not None:
        base["lora"] = request.served_lora.model_dump()
    return base


def spec_data(
    base: dict[str, Any], shape: ShapeKnobs, arch: ModelArch, *, max_running: int | None = None
) -> dict[str, Any]:
    data: dict[str, Any] = {**base, "parallelism": {"tp": shape.tp}}
    if shape.ep > 1:
        data["parallelism"]["ep"] = shape.ep  # whole experts spread over the TP group
    if shape.attn_dp > 1:
        data["parallelism"]["attn_dp"] = shape.attn_dp
    if shape.moe_a2a != "none":
        data["parallelism"]["moe_a2a"] = shape.moe_a2a
    data["quantization"] = {"method": shape.quantization, "kv_cache_dtype": shape.kv_dtype}
    if shape.speculator != "none":
        data["speculator"] = {"algorithm": shape.speculator, "draft_model": shape.draft}
    if max_running is not None:
        data["batching"] = {"max_running_requests": max_running}
    if shape.hicache_ratio is not None:
        data["kv_cache"] = {"tiers": {"host": {"ratio": shape.hicache_ratio}}}
    return data


def shape_context(request: OptimizeRequest, arch: ModelArch, gpu: GpuType) -> ShapeContext:
    """What every shape of `arch` on `gpu` shares, for ``build_shape``."""
    return ShapeContext(
        base_spec(request, arch, gpu), arch, model_shape(arch, request.model), gpu_shape(gpu)
    )


def default_ep(arch: ModelArch, tp: int) -> int:
    """A MoE model's experts spread whole over the TP group (EP = TP); a dense model's 1."""
    return tp if arch.is_moe and tp > 1 else 1


def engine_shapes(
    request: OptimizeRequest, arch: ModelArch, gpus: Sequence[GpuType]
) -> Iterator[Shape]:
    """Every shape of `arch` on `gpus` that fits and validates, within the request's features
    and GPU limit."""
    allow = request.features
    for gpu in gpus:
        context = shape_context(request, arch, gpu)
        for tp in tp_choices(gpu, arch) + node_tps(gpu, arch, gpu_budget(request, gpu)):
            if request.limits.max_gpus is not None and tp > request.limits.max_gpus:
                continue
            knobs = (
                ShapeKnobs(
                    gpu=gpu,
                    tp=tp,
                    quantization=quant,
                    kv_dtype=kv,
                    ep=ep,
                    speculator=algorithm,
                    draft=draft,
                    attn_dp=dp,
                    moe_a2a=a2a,
                )
                for quant in quant_choices(gpu, arch, "quantization" in allow)
                for kv in kv_choices(gpu, "quantization" in allow)
                for algorithm, draft in spec_choices(arch, "speculator" in allow)
                for dp in attn_dp_choices(arch, tp)
                for ep in ep_choices(arch, tp)
                for a2a in a2a_choices(gpu, arch, tp, dp, ep, quant)
                if spans_nodes(gpu, tp, dp, a2a)
            )
            for each in knobs:
                shape = build_shape(request, context, each)
                if shape is None:
                    continue
                yield shape
                ratio = hicache_ratio(request, shape)
                if ratio is not None:
                    tiered = build_shape(request, context, replace(each, hicache_ratio=ratio))
                    if tiered is not None:
                        yield tiered


def hicache_ratio(request: OptimizeRequest, shape: Shape) -> float | None:
    """The host tier a shape gets as a HiCache candidate: enough host memory for the prefix
    working set (at least SGLang's usual 2x); None when the working set fits the GPU's pool
    (and no multi-turn history could outgrow it) or HiCache is not allowed."""
    traffic = request.traffic
    if "hicache" not in request.features or shape.kv_tokens <= 0:
        return None
    if traffic.working_set_tokens <= shape.kv_tokens and traffic.turns <= 1:
        return None
    need = max(traffic.working_set_tokens, 2 * shape.kv_tokens) / shape.kv_tokens
    return float(min(16, math.ceil(need) + 1))


def build_shape(request: OptimizeRequest, context: ShapeContext, knobs: ShapeKnobs) -> Shape | None:
    """The shape, or None when it does not fit or its spec does not validate."""
    arch, gpu = context.arch, knobs.gpu
    spec = RuntimeSpec.model_validate(spec_data(context.base, knobs, arch))
    fit = memory_fit(spec, gpu, arch, engine_groups(spec)[0], knobs.body_bytes)
    if not fit.fits or has_errors(validate(spec)):
        return None
    spec_config = None
    if knobs.speculator != "none":
        draft_shape = lookup_model(knobs.draft) if knobs.draft else None
        name = "NEXTN" if knobs.speculator == "MTP" else knobs.speculator
        spec_config = resolve_spec(name, context.model, draft_shape)
    engine = EngineShape(
        tp=knobs.tp,
        quantization=knobs.quantization or arch.checkpoint_quantization,
        weight_bytes=model_weight_bytes(spec, arch, knobs.body_bytes),
        kv_bytes_per_value=kv_bytes_per_value(knobs.kv_dtype),
        spec=spec_config,
        attn_dp=knobs.attn_dp,
        ep=knobs.ep,
        moe_a2a=knobs.moe_a2a,
        lora=shape_lora(spec, context, knobs.tp),
    )
    return Shape(
        **{f.name: getattr(knobs, f.name) for f in fields(ShapeKnobs)},
        step=StepModel(context.gpu, context.model, engine),
        spec=spec_config,
        kv_tokens=fit.max_concurrent_tokens,
        kv_bytes_per_token=arch.kv_bytes_per_token(kv_bytes_per_value(knobs.kv_dtype)),
        host_tokens=fit.host_tier_tokens * knobs.attn_dp,
        host_gbs=tier_links(gpu).host_gbs if knobs.hicache_ratio is not None else 0.0,
        adapters=request.adapters_in_use(),
        lora_cap=spec.lora.resolved_max_loras_per_batch if spec.lora.active else 0,
    )


def shape_lora(spec: RuntimeSpec, context: ShapeContext, tp: int) -> LoraCost | None:
    """The adapters' step figures of a candidate serving LoRA (None without)."""
    lora = spec.lora
    if not lora.active:
        return None
    modules = resolved_target_modules(lora, context.arch)
    return lora_cost(context.model, modules, lora.resolved_max_lora_rank, tp)
