"""Quantization and KV-cache dtype against the GPU's compute capability (SGLANG.md section 1.5).

The minimum and native SM of each format are the quantization catalogue's
(``runtime.catalog.quantization``); the rules here say what a person sees when a GPU falls short.
"""

from __future__ import annotations

from collections.abc import Iterator

from runtime.catalog import kv_format, list_gpus, native_sm, weight_format
from runtime.issues import Issue, error, warning
from runtime.rules.context import RuleContext


def _gpus_with(min_sm: int) -> str:
    return ", ".join(g.id for g in list_gpus() if g.sm >= min_sm)


def weight_method(ctx: RuleContext) -> Iterator[Issue]:
    method = ctx.spec.quantization.method
    if method is None:
        return
    field = "quantization.method"
    if method == "petit_nvfp4":
        yield error(
            field,
            "quantization_unsupported_gpu",
            "petit_nvfp4 is SGLang's NVFP4 path for AMD ROCm GPUs; it does not run on NVIDIA",
            "use modelopt_fp4 on NVIDIA GPUs",
        )
        return
    form = weight_format(method)
    if form is None:
        return
    min_sm = form.min_sm
    if ctx.gpu.sm < min_sm:
        yield error(
            field,
            "quantization_unsupported_gpu",
            f"{method} needs compute capability {min_sm / 10:.1f}+, {ctx.gpu.id} is "
            f"{ctx.gpu.compute_capability}; SGLang refuses to load the model",
            f"use a GPU from {_gpus_with(min_sm)}, or another method",
        )
        return
    native = native_sm(form)
    if form.emulated is not None and ctx.gpu.sm < native:
        yield warning(
            field,
            "quantization_emulated",
            f"{method} on {ctx.gpu.id} (SM{ctx.gpu.sm}) runs as {form.emulated}; it saves memory "
            "but not compute",
            f"for native speed use {_gpus_with(native)}",
        )


def online_nvfp4(ctx: RuleContext) -> Iterator[Issue]:
    if ctx.spec.quantization.method != "nvfp4_online" or ctx.arch is None:
        return
    if not ctx.arch.is_moe:
        yield error(
            "quantization.method",
            "quantization_requires_moe",
            f"nvfp4_online converts MoE expert weights; {ctx.arch.id} has no experts",
            "use modelopt_fp4 with an NVFP4 checkpoint, or fp8",
        )


def pre_quantized(ctx: RuleContext) -> Iterator[Issue]:
    method = ctx.spec.quantization.method
    shipped = ctx.arch.checkpoint_quantization if ctx.arch else None
    if method is None or shipped is None:
        return
    yield warning(
        "quantization.method",
        "quantization_overrides_checkpoint",
        f"{ctx.arch.id if ctx.arch else 'the model'} ships {shipped} weights, which SGLang "
        f"detects; passing --quantization {method} overrides the checkpoint's own config",
        "leave quantization.method unset for pre-quantized checkpoints",
    )


def kv_cache_dtype(ctx: RuleContext) -> Iterator[Issue]:
    dtype = ctx.spec.quantization.kv_cache_dtype
    field = "quantization.kv_cache_dtype"
    form = kv_format(dtype)
    if form is None:
        return
    min_sm = form.min_sm
    if ctx.gpu.sm < min_sm:
        yield error(
            field,
            "kv_cache_dtype_unsupported_gpu",
            f"KV cache {dtype} needs compute capability {min_sm / 10:.1f}+ (Blackwell), "
            f"{ctx.gpu.id} is {ctx.gpu.compute_capability}",
            "use fp8_e4m3",
        )
    elif form.emulated is not None and ctx.gpu.sm < native_sm(form):
        yield warning(
            field,
            "kv_cache_dtype_emulated",
            f"{ctx.gpu.id} has no FP8 tensor cores: an {dtype} KV cache halves its memory but "
            "attention upcasts it on every step",
            "keep it for capacity, or use auto for speed",
        )
    if dtype == "nvfp4":
        yield from _nvfp4_kv(ctx)


def _nvfp4_kv(ctx: RuleContext) -> Iterator[Issue]:
    field = "quantization.kv_cache_dtype"
    if ctx.arch is not None and ctx.arch.head_dim % 64 != 0:
        yield error(
            field,
            "kv_nvfp4_head_dim",
            f"an NVFP4 KV cache needs head_dim divisible by 64; {ctx.arch.id} has "
            f"{ctx.arch.head_dim}",
            "use fp8_e4m3",
        )
    page = ctx.spec.batching.page_size
    if page is not None and page % 4 != 0:
        yield error(
            "batching.page_size",
            "kv_nvfp4_page_size",
            f"an NVFP4 KV cache needs page_size divisible by 4, got {page}",
            f"use page_size {max(4, page // 4 * 4)}",
        )
    if ctx.spec.disaggregation.enabled:
        yield error(
            field,
            "kv_nvfp4_disaggregation",
            "SGLang 0.5.23 does not support an NVFP4 KV cache with prefill/decode disaggregation",
            "use fp8_e4m3",
        )
    spec = ctx.spec.speculator
    topk_one = (spec.eagle_topk or 1) == 1
    breadth_one = (spec.ngram.max_bfs_breadth or 10) == 1
    allowed = (
        not spec.enabled
        or (spec.algorithm in {"EAGLE", "EAGLE3", "MTP"} and topk_one)
        or (spec.algorithm == "NGRAM" and breadth_one)
    )
    if not allowed:
        yield error(
            "speculator.algorithm",
            "kv_nvfp4_speculator",
            "an NVFP4 KV cache works only with topk-1 EAGLE-family or breadth-1 NGRAM speculation",
            "set speculator.eagle_topk 1 (or ngram.max_bfs_breadth 1), or use fp8_e4m3",
        )


RULES = (weight_method, online_nvfp4, pre_quantized, kv_cache_dtype)
