"""Memory fit: weights, reserve and one full-context request per GPU (DESIGN.md section 4), and
the headroom: how many full-context requests the KV pool holds beside the max running requests."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from runtime.catalog import ModelArch, list_gpus, native_on
from runtime.issues import Issue, error, warning
from runtime.memory import MemoryFit, gib, memory_fit
from runtime.rules.context import RuleContext
from runtime.rules.parallel import tp_works
from runtime.topology import EngineGroup


def _smallest_fitting_tp(ctx: RuleContext, arch: ModelArch, group: EngineGroup) -> int | None:
    for tp in (2, 4, 8, 16, 32):
        if tp <= group.tp or not tp_works(arch, tp):
            continue
        wider = replace(group, tp=tp, gpus=tp * group.pp)
        if memory_fit(ctx.spec, ctx.gpu, arch, wider).fits:
            return tp
    return None


def _cheaper_options(ctx: RuleContext, arch: ModelArch, group: EngineGroup) -> str:
    options = []
    tp = _smallest_fitting_tp(ctx, arch, group)
    if tp is not None:
        options.append(f"{group.tp_field} {tp}".replace("parallelism.tp", "TP"))
    if ctx.spec.quantization.method is None and arch.checkpoint_quantization is None:
        # FP8 on load where the GPU computes FP8 natively; elsewhere a pre-quantized checkpoint.
        fp8 = native_on(ctx.gpu, "fp8")
        options.append("FP8 weight quantization" if fp8 else "an FP8/INT4 model")
    if ctx.spec.quantization.kv_cache_dtype == "auto":
        options.append("an FP8 KV cache (fp8_e4m3)")
    larger = [g.id for g in list_gpus() if g.memory_gib > ctx.gpu.memory_gib][:3]
    if larger:
        options.append(f"a larger GPU ({', '.join(larger)})")
    return "; ".join(options)


def _where(group: EngineGroup) -> str:
    """ "" for a plain engine; "prefill pool: " / "decode pool: " when the pools are split."""
    return "" if group.role == "engine" else f"{group.role} pool: "


def _weights_issue(ctx: RuleContext, arch: ModelArch, group: EngineGroup, fit: MemoryFit) -> Issue:
    return error(
        group.tp_field,
        "memory_weights_exceed",
        f"{_where(group)}weights need {gib(fit.weights)} GiB per GPU{_adapters(fit)} plus "
        f"{gib(fit.reserve)} GiB "
        f"reserved for activations and CUDA graphs, but a {ctx.gpu.id} has "
        f"{gib(fit.capacity)} GiB (static memory fraction {fit.mem_fraction_static:.3f})",
        "use " + _cheaper_options(ctx, arch, group),
    )


def _adapters(fit: MemoryFit) -> str:
    return f" (and the LoRA adapter pool {gib(fit.adapters)} GiB)" if fit.adapters else ""


def _context_issue(ctx: RuleContext, arch: ModelArch, group: EngineGroup, fit: MemoryFit) -> Issue:
    field = "model.context_length"
    return error(
        field,
        "memory_context_exceeds_kv",
        f"{_where(group)}the KV cache holds {fit.max_kv_tokens} tokens per GPU after "
        f"{gib(fit.weights)} GiB of weights, less than one {fit.context_length}-token request",
        f"set model.context_length to at most {fit.max_kv_tokens}, or use "
        + _cheaper_options(ctx, arch, group),
    )


def _group_fit(ctx: RuleContext, arch: ModelArch, group: EngineGroup) -> Iterator[Issue]:
    fit = memory_fit(ctx.spec, ctx.gpu, arch, group)
    if not fit.weights_fit:
        yield _weights_issue(ctx, arch, group, fit)
    elif fit.max_kv_tokens < fit.context_length:
        yield _context_issue(ctx, arch, group, fit)
    elif fit.max_kv_tokens < 2 * fit.context_length:
        yield warning(
            "model.context_length",
            "memory_low_concurrency",
            f"{_where(group)}the KV cache holds {fit.max_kv_tokens} tokens, fewer than two "
            f"full {fit.context_length}-token requests; long requests will queue",
            "lower model.context_length or use an FP8 KV cache / more GPUs",
        )
    else:
        yield from _headroom(ctx, group, fit)


def _headroom(ctx: RuleContext, group: EngineGroup, fit: MemoryFit) -> Iterator[Issue]:
    """A max running requests setting the KV cache cannot hold at the full context length.

    Only a value the person set: the 48 SGLang forces under speculation is shown by the fit
    panel, not raised on every speculative spec whose model has a long context.
    """
    running = ctx.spec.batching.max_running_requests
    fitting = fit.concurrent_requests
    if running is None or fitting >= running:
        return
    yield warning(
        "batching.max_running_requests",
        "memory_below_max_running",
        f"{_where(group)}the KV cache holds {fitting} requests of the full "
        f"{fit.context_length}-token context at once, fewer than the {running} max running "
        "requests; at full length the rest wait for memory",
        f"set batching.max_running_requests to {fitting}, or lower model.context_length, or "
        "use an FP8 KV cache / more GPUs",
    )


def memory(ctx: RuleContext) -> Iterator[Issue]:
    if ctx.arch is None:
        return
    for group in ctx.groups:
        yield from _group_fit(ctx, ctx.arch, group)


RULES = (memory,)
