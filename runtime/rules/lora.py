"""LoRA adapters (`lora`): the checks SGLang 0.5.23 makes at start-up (`arg_groups/lora_hook.py`)
and at load time, made before anything runs, plus what the base model must have.

The adapter pool's GPU memory is the memory fit's (`runtime.memory`), so an endpoint whose pool
leaves no room for the KV cache is refused there, by the rule that sizes everything else.
"""

from __future__ import annotations

from collections.abc import Iterator

from runtime.issues import Issue, error
from runtime.lora import LoraSettings, base_modules
from runtime.memory import gib, memory_fit
from runtime.rules.context import RuleContext

_FIELD = "lora"
# Speculative algorithms SGLang 0.5.23 runs with LoRA (`check_lora_speculative_compatibility`;
# Plinth's MTP is SGLang's NEXTN, which resolves to EAGLE).
_SPECULATORS_WITH_LORA = frozenset({"none", "NGRAM", "EAGLE", "EAGLE3", "MTP"})


def _needs_sizes(lora: LoraSettings) -> Iterator[Issue]:
    if lora.adapters:
        return
    for name in ("max_lora_rank", "target_modules"):
        if getattr(lora, name) is None:
            yield error(
                f"{_FIELD}.{name}",
                "lora_needs_pool_size",
                "with no adapters at start-up SGLang sizes the adapter pool from max_lora_rank "
                "and target_modules, which it cannot learn from adapters loaded later",
                f"set lora.{name}, or list an adapter in lora.adapters",
            )


def _names(ctx: RuleContext, lora: LoraSettings) -> Iterator[Issue]:
    seen: set[str] = set()
    served = ctx.spec.served_model_name
    for index, adapter in enumerate(lora.adapters):
        field = f"{_FIELD}.adapters.{index}.name"
        if adapter.name in seen:
            yield error(field, "lora_duplicate_name", f"adapter '{adapter.name}' is listed twice",
                        "give each adapter its own name")  # fmt: skip
        seen.add(adapter.name)
        if adapter.name == served:
            yield error(
                field,
                "lora_name_is_base",
                f"'{adapter.name}' is the base model's served name; requests naming it would "
                "not reach the adapter",
                "give the adapter another name",
            )


def _ranks(lora: LoraSettings) -> Iterator[Issue]:
    if lora.max_lora_rank is None:
        return
    for index, adapter in enumerate(lora.adapters):
        if adapter.rank > lora.max_lora_rank:
            yield error(
                f"{_FIELD}.adapters.{index}.rank",
                "lora_rank_too_large",
                f"adapter '{adapter.name}' has rank {adapter.rank}, above max_lora_rank "
                f"{lora.max_lora_rank}: SGLang sizes the pool for the largest rank and refuses it",
                f"raise lora.max_lora_rank to at least {adapter.rank}, or leave it unset",
            )


def _counts(lora: LoraSettings) -> Iterator[Issue]:
    per_batch = lora.resolved_max_loras_per_batch
    loaded = lora.max_loaded_loras
    if loaded is not None and loaded < per_batch:
        yield error(
            f"{_FIELD}.max_loaded_loras",
            "lora_loaded_below_batch",
            f"max_loaded_loras {loaded} is below max_loras_per_batch {per_batch}: SGLang "
            "refuses to start (a batch could not hold adapters that are not loaded)",
            f"set max_loaded_loras to at least {per_batch}, or lower max_loras_per_batch",
        )
    if loaded is not None and len(lora.adapters) > loaded:
        yield error(
            f"{_FIELD}.adapters",
            "lora_too_many_adapters",
            f"{len(lora.adapters)} adapters are listed but max_loaded_loras is {loaded}",
            f"raise lora.max_loaded_loras to {len(lora.adapters)}, or list fewer adapters",
        )
    pinned = sum(1 for adapter in lora.adapters if adapter.pinned)
    if pinned >= per_batch:
        yield error(
            f"{_FIELD}.adapters",
            "lora_too_many_pinned",
            f"{pinned} pinned adapters fill every one of the {per_batch} batch slots: no "
            "request for another adapter, or for the base model, could be scheduled",
            f"pin at most {per_batch - 1}, or raise lora.max_loras_per_batch",
        )


def _target_modules(ctx: RuleContext, lora: LoraSettings) -> Iterator[Issue]:
    modules = lora.target_modules or []
    if "all" in modules and len(modules) > 1:
        yield error(
            f"{_FIELD}.target_modules",
            "lora_all_with_others",
            "'all' already names every module; SGLang refuses it beside others",
            "use ['all'] alone, or list the modules",
        )
    if ctx.arch is None:
        return
    known = base_modules(ctx.arch)
    for module in modules:
        if module != "all" and module not in known:
            yield error(
                f"{_FIELD}.target_modules",
                "lora_unknown_module",
                f"{ctx.arch.id} ({ctx.arch.architecture}) has no '{module}' module to adapt",
                "use modules of this model: " + ", ".join(known),
            )


def _sources(lora: LoraSettings) -> Iterator[Issue]:
    for index, adapter in enumerate(lora.adapters):
        if adapter.revision not in (None, "main"):
            yield error(
                f"{_FIELD}.adapters.{index}.revision",
                "lora_revision_unsupported",
                "SGLang 0.5.23 loads an adapter from its repository's default branch; it takes "
                "no revision, so this one would not be what runs",
                "remove the revision (or use main), or publish the revision as its own repository",
            )


def _compatibility(ctx: RuleContext) -> Iterator[Issue]:
    algorithm = ctx.spec.speculator.algorithm
    if algorithm not in _SPECULATORS_WITH_LORA:
        yield error(
            "speculator.algorithm",
            "lora_speculator",
            f"SGLang 0.5.23 runs LoRA adapters with NGRAM, EAGLE, EAGLE3 or MTP speculation "
            f"only, not {algorithm}",
            "use EAGLE3 or NGRAM, or turn speculation off",
        )


def _pool_fit(ctx: RuleContext, lora: LoraSettings) -> Iterator[Issue]:
    """The adapter pool leaves no room for one full-context request in the KV cache: said of
    the pool's own settings (the memory fit's rule says what else would make room)."""
    if ctx.arch is None:
        return
    for group in ctx.groups:
        fit = memory_fit(ctx.spec, ctx.gpu, ctx.arch, group)
        if fit.adapters and fit.max_kv_tokens < fit.context_length:
            yield error(
                f"{_FIELD}.max_loras_per_batch",
                "lora_pool_too_large",
                f"the adapter pool ({lora.resolved_max_loras_per_batch} slots of rank "
                f"{lora.resolved_max_lora_rank}) takes {gib(fit.adapters)} GiB per GPU, leaving "
                f"the KV cache {fit.max_kv_tokens} tokens, less than one "
                f"{fit.context_length}-token request",
                "lower lora.max_loras_per_batch or lora.max_lora_rank, or name fewer "
                "lora.target_modules",
            )
            return


def lora(ctx: RuleContext) -> Iterator[Issue]:
    settings = ctx.spec.lora
    if not settings.active:
        return
    yield from _needs_sizes(settings)
    yield from _names(ctx, settings)
    yield from _ranks(settings)
    yield from _counts(settings)
    yield from _target_modules(ctx, settings)
    yield from _sources(settings)
    yield from _compatibility(ctx)
    yield from _pool_fit(ctx, settings)


RULES = (lora,)
