"""Speculative decoding rules (SGLANG.md section 1.6; PP limits from section 1.4)."""

from __future__ import annotations

from collections.abc import Iterator

from runtime.issues import Issue, error, warning
from runtime.rules.context import RuleContext

NEEDS_DRAFT = frozenset({"EAGLE", "EAGLE3", "STANDALONE"})


def draft_model(ctx: RuleContext) -> Iterator[Issue]:
    spec = ctx.spec.speculator
    has_mtp = ctx.arch is not None and ctx.arch.has_mtp
    if spec.algorithm in NEEDS_DRAFT and spec.draft_model is None and not has_mtp:
        yield error(
            "speculator.draft_model",
            "speculator_draft_required",
            f"{spec.algorithm} needs a draft model; only architectures that ship MTP layers "
            "(DeepSeek-V3, GLM-4.5) can speculate without one",
            "set speculator.draft_model (e.g. an EAGLE3 head trained for this model), or use NGRAM",
        )
    if spec.algorithm == "MTP" and ctx.arch is not None and not ctx.arch.has_mtp:
        yield error(
            "speculator.algorithm",
            "speculator_mtp_unsupported",
            f"{ctx.arch.id} ships no MTP (NextN) layers",
            "use EAGLE3 with a draft model, or NGRAM",
        )
    if spec.algorithm in {"MTP", "NGRAM"} and spec.draft_model is not None:
        yield warning(
            "speculator.draft_model",
            "speculator_draft_unused",
            f"{spec.algorithm} does not use a separate draft model; it is ignored",
            "remove speculator.draft_model",
        )


def draft_match(ctx: RuleContext) -> Iterator[Issue]:
    spec, draft, arch = ctx.spec.speculator, ctx.draft, ctx.arch
    if draft is None or spec.algorithm not in NEEDS_DRAFT:
        return
    if arch is not None and draft.vocab_size != arch.vocab_size:
        yield error(
            "speculator.draft_model",
            "speculator_vocab_mismatch",
            f"draft {draft.id} has a {draft.vocab_size}-token vocabulary, target {arch.id} has "
            f"{arch.vocab_size}; drafts must share the target's tokenizer",
            "pick a draft trained for this model family",
        )
    kind = draft.draft_algorithm
    if kind is not None and spec.algorithm != kind:
        yield error(
            "speculator.algorithm",
            "speculator_draft_kind_mismatch",
            f"{draft.id} is an {kind} head; it cannot run as {spec.algorithm}",
            f"set speculator.algorithm to {kind}",
        )
    elif kind is None and spec.algorithm in {"EAGLE", "EAGLE3"}:
        yield error(
            "speculator.algorithm",
            "speculator_draft_kind_mismatch",
            f"{draft.id} is a full model, not an EAGLE head",
            "use STANDALONE for a small full model as draft",
        )
    if arch is not None and draft.draft_for and arch.id not in draft.draft_for:
        yield warning(
            "speculator.draft_model",
            "speculator_draft_other_target",
            f"{draft.id} was trained for {', '.join(draft.draft_for)}, not {arch.id}; "
            "acceptance will be low",
            "use a draft trained for this model",
        )


def tree_size(steps: int, topk: int) -> int:
    """Tokens an EAGLE tree can verify: the root, topk at step 1, then topk x topk per step."""
    return 1 + topk + (steps - 1) * topk * topk


def tree_shape(ctx: RuleContext) -> Iterator[Issue]:
    spec = ctx.spec.speculator
    if spec.algorithm in {"none", "NGRAM"}:
        return
    if spec.num_steps is None and (spec.eagle_topk or spec.num_draft_tokens):
        yield error(
            "speculator.num_steps",
            "speculator_steps_required",
            "EAGLE top-k and draft tokens can only be set together with speculative steps "
            "(SGLang asserts this)",
            "set speculator.num_steps too, or leave all three unset for SGLang's defaults",
        )
        return
    steps, topk, drafts = spec.num_steps, spec.eagle_topk, spec.num_draft_tokens
    if steps is None:
        return
    if (topk or 1) == 1 and drafts is not None and drafts != steps + 1:
        yield warning(
            "speculator.num_draft_tokens",
            "speculator_draft_tokens_forced",
            f"with EAGLE top-k 1 SGLang forces the draft tokens to steps + 1 = {steps + 1}",
            f"set speculator.num_draft_tokens to {steps + 1}",
        )
    elif topk is not None and drafts is not None and drafts > tree_size(steps, topk):
        yield error(
            "speculator.num_draft_tokens",
            "speculator_draft_tokens_exceed_tree",
            f"{drafts} draft tokens exceed the {tree_size(steps, topk)} tokens a draft "
            f"tree of {steps} steps and EAGLE top-k {topk} can propose",
            f"use at most {tree_size(steps, topk)}",
        )


def ngram(ctx: RuleContext) -> Iterator[Issue]:
    spec = ctx.spec.speculator
    options = spec.ngram
    if spec.algorithm != "NGRAM":
        if options.model_dump(exclude_none=True):
            yield warning(
                "speculator.ngram",
                "speculator_options_unused",
                f"n-gram settings have no effect with {spec.algorithm}",
                "remove them, or set speculator.algorithm to NGRAM",
            )
        return
    low, high = options.min_bfs_breadth, options.max_bfs_breadth
    if low is not None and high is not None and low > high:
        yield error(
            "speculator.ngram.min_bfs_breadth",
            "ngram_breadth_order",
            f"n-gram min breadth {low} is larger than the max breadth {high}",
            f"set speculator.ngram.min_bfs_breadth to at most {high}",
        )
    if spec.num_steps is not None or spec.eagle_topk is not None:
        yield warning(
            "speculator.num_steps",
            "speculator_options_unused",
            "NGRAM derives EAGLE top-k from the n-gram max breadth and the steps from the "
            "draft tokens; the values given are ignored",
            "clear speculative steps and EAGLE top-k; tune speculator.num_draft_tokens",
        )


def attention_dp(ctx: RuleContext) -> Iterator[Issue]:
    algorithm = ctx.spec.speculator.algorithm
    if algorithm in {"NGRAM", "STANDALONE"} and ctx.spec.parallelism.attn_dp > 1:
        yield error(
            "parallelism.attn_dp",
            "speculator_attn_dp",
            f"{algorithm} speculation does not work with attention-DP",
            "set parallelism.attn_dp to 1, or use EAGLE3/MTP",
        )


def pipeline(ctx: RuleContext) -> Iterator[Issue]:
    spec = ctx.spec.speculator
    if ctx.spec.parallelism.pp == 1 or not spec.enabled:
        return
    allowed_env = "SGLANG_ENABLE_PP_SPEC" in ctx.spec.runtime.env
    if spec.algorithm not in {"EAGLE", "EAGLE3", "MTP"} or not allowed_env:
        yield error(
            "speculator.algorithm",
            "speculator_pp",
            "with pp > 1 SGLang allows only EAGLE-family speculation, and only on a PD prefill "
            "server unless SGLANG_ENABLE_PP_SPEC is set",
            "set parallelism.pp to 1 (use tp), or turn the speculator off",
        )


def mixed_chunk(ctx: RuleContext) -> Iterator[Issue]:
    if ctx.spec.batching.mixed_chunk and ctx.spec.speculator.enabled:
        yield warning(
            "batching.mixed_chunk",
            "mixed_chunk_ignored",
            f"SGLang turns mixed chunking off with {ctx.spec.speculator.algorithm} speculation",
            "set batching.mixed_chunk to false",
        )


RULES = (draft_model, draft_match, tree_shape, ngram, attention_dp, pipeline, mixed_chunk)
