"""GPU count, node shape and head divisibility (SGLANG.md section 1.4)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from runtime.catalog import ModelArch
from runtime.issues import Issue, choices_text, error, warning
from runtime.rules.context import RuleContext
from runtime.topology import EngineGroup


def kv_heads_divide(kv_heads: int, tp: int) -> bool:
    """SGLang's Llama/Qwen rule: KV heads split evenly, or are replicated evenly."""
    return kv_heads % tp == 0 if kv_heads >= tp else tp % kv_heads == 0


def heads_allow_tp(attention: int, kv: int, tp: int) -> bool:
    """SGLang's TP rule: TP divides the attention heads, and the KV heads divide evenly over it.

    The one home of the rule: validation, the optimizer's TP choices and the deployment form's
    TP select all ask it (through ``tp_works`` or ``working_tps``)."""
    return attention % tp == 0 and kv_heads_divide(kv, tp)


def working_tps(attention: int, kv: int, widths: Iterable[int]) -> list[int]:
    """The widths among `widths` that a model of these head counts can run at (in order)."""
    return [tp for tp in widths if heads_allow_tp(attention, kv, tp)]


def tp_works(arch: ModelArch, tp: int) -> bool:
    return heads_allow_tp(arch.num_attention_heads, arch.num_kv_heads, tp)


def suggest_tp(arch: ModelArch, tp: int, max_gpus: int) -> list[int]:
    """Up to three working TP widths nearest the requested one (excluding 1 unless nothing else)."""
    # A width above the head count never divides it: stop there (a huge tp must not hang).
    limit = min(max(max_gpus, 8), arch.num_attention_heads)
    heads = (arch.num_attention_heads, arch.num_kv_heads)
    candidates = working_tps(*heads, range(2, limit + 1)) or [1]
    return sorted(sorted(candidates, key=lambda t: (abs(t - tp), t))[:3])


def gpu_count(ctx: RuleContext) -> Iterator[Issue]:
    requested = ctx.spec.hardware.gpus_per_replica
    par = ctx.spec.parallelism
    if ctx.spec.disaggregation.enabled:
        hardware = ctx.spec.hardware
        for name, value in (
            ("gpus_per_replica", requested),
            ("nodes_per_replica", hardware.nodes_per_replica),
        ):
            if value is not None:
                yield warning(
                    f"hardware.{name}",
                    "hardware_ignored_with_disaggregation",
                    "with prefill/decode disaggregation each pool's shape comes from its tp x pp; "
                    f"hardware.{name} is ignored",
                    f"remove hardware.{name} and set disaggregation.prefill.tp / decode.tp",
                )
        return
    if requested is not None and requested != par.tp * par.pp:
        yield error(
            "hardware.gpus_per_replica",
            "gpu_count_mismatch",
            f"{requested} GPUs per replica but TP x PP = {par.tp} x {par.pp} = {par.tp * par.pp}; "
            "SGLang uses exactly TP x PP GPUs (attention-DP and EP reuse the TP group)",
            f"set parallelism.tp to {max(1, requested // par.pp)} or hardware.gpus_per_replica "
            f"to {par.tp * par.pp}",
        )


def node_shape(ctx: RuleContext) -> Iterator[Issue]:
    per_node = ctx.gpu.gpus_per_node
    for group in ctx.groups:
        field = "hardware.nodes_per_replica" if group.role == "engine" else group.tp_field
        if group.gpus % group.nodes != 0:
            yield error(
                field,
                "nodes_gpus_indivisible",
                f"{group.gpus} GPUs cannot be split evenly over {group.nodes} nodes; SGLang needs "
                "TP x PP to be a multiple of the node count",
                f"use a node count that divides {group.gpus}",
            )
        elif group.gpus // group.nodes > per_node:
            fewest = -(-group.gpus // per_node)
            yield error(
                field,
                "node_too_small",
                f"{group.gpus // group.nodes} GPUs per node, but a {ctx.gpu.id} node has "
                f"{per_node}",
                f"set hardware.nodes_per_replica to {fewest} (or leave it unset)",
            )
        if group.nodes > 1 and group.gpus % per_node != 0:
            yield warning(
                field,
                "partial_nodes",
                f"a {group.nodes}-node replica that does not fill its nodes ({group.gpus} GPUs, "
                f"{per_node} per node) leaves GPUs idle and slows cross-node traffic",
                f"use a multiple of {per_node} GPUs",
            )


def _group_heads(arch: ModelArch, group: EngineGroup) -> Iterator[Issue]:
    tp = group.tp
    max_gpus = 8 * group.nodes
    if arch.num_attention_heads % tp != 0:
        options = choices_text(suggest_tp(arch, tp, max_gpus))
        yield error(
            group.tp_field,
            "tp_heads_indivisible",
            f"TP {tp} does not divide the {arch.num_attention_heads} attention heads of {arch.id}",
            f"use TP {options}",
        )
    elif not kv_heads_divide(arch.num_kv_heads, tp):
        options = choices_text(suggest_tp(arch, tp, max_gpus))
        yield error(
            group.tp_field,
            "tp_kv_heads_indivisible",
            f"TP {tp} and the {arch.num_kv_heads} KV heads of {arch.id}: the KV heads must divide "
            "TP or be divisible by it",
            f"use TP {options}",
        )


def heads(ctx: RuleContext) -> Iterator[Issue]:
    if ctx.arch is None:
        return
    for group in ctx.groups:
        yield from _group_heads(ctx.arch, group)


def attention_dp(ctx: RuleContext) -> Iterator[Issue]:
    par = ctx.spec.parallelism
    if par.attn_dp == 1:
        return
    if par.tp % par.attn_dp != 0:
        divisors = [d for d in range(2, par.tp + 1) if par.tp % d == 0]
        yield error(
            "parallelism.attn_dp",
            "attn_dp_indivisible",
            f"attention DP {par.attn_dp} must divide TP {par.tp} (attention-DP groups live "
            "inside the TP group)",
            f"use attention DP {choices_text(divisors) or 1}",
        )
    if ctx.arch is not None and not ctx.arch.is_mla and not ctx.arch.is_moe:
        yield warning(
            "parallelism.attn_dp",
            "attn_dp_dense_model",
            f"attention-DP is meant for MLA/MoE models; on {ctx.arch.id} it only replicates "
            "weights and shrinks the KV pool",
            "set parallelism.attn_dp to 1 and scale with replicas instead",
        )


def expert_parallel(ctx: RuleContext) -> Iterator[Issue]:
    par = ctx.spec.parallelism
    if par.moe_a2a == "deepep" and (par.ep == 1 or par.ep != par.tp):
        # SGLang's DeepEP holds whole experts on every GPU of the TP group (it resets EP to TP).
        yield error(
            "parallelism.moe_a2a",
            "deepep_needs_ep_equal_tp",
            f"DeepEP sends each token to the GPUs that hold its experts whole: it needs EP = TP "
            f"({par.tp}), not EP {par.ep}",
            f"set parallelism.ep to {par.tp}, or parallelism.moe_a2a to 'none'",
        )
    if par.ep == 1:
        return
    if par.tp % par.ep != 0:
        yield error(
            "parallelism.ep",
            "ep_indivisible",
            f"EP {par.ep} must divide TP {par.tp}: expert parallelism splits the TP group",
            f"use EP {choices_text([d for d in range(2, par.tp + 1) if par.tp % d == 0]) or 1}",
        )
    arch = ctx.arch
    if arch is not None and arch.num_experts is None:
        yield error(
            "parallelism.ep",
            "ep_dense_model",
            f"{arch.id} is a dense model; expert parallelism needs a mixture-of-experts model",
            "set parallelism.ep to 1",
        )
    elif arch is not None and arch.num_experts is not None and arch.num_experts % par.ep != 0:
        yield error(
            "parallelism.ep",
            "ep_experts_indivisible",
            f"EP {par.ep} does not divide the {arch.num_experts} experts of {arch.id}",
            "use an EP size that divides the expert count",
        )


def pipeline(ctx: RuleContext) -> Iterator[Issue]:
    pp = ctx.spec.parallelism.pp
    if ctx.arch is not None and pp > ctx.arch.num_layers:
        yield error(
            "parallelism.pp",
            "pp_exceeds_layers",
            f"PP {pp} is more pipeline stages than {ctx.arch.id} has layers "
            f"({ctx.arch.num_layers})",
            "use a smaller PP",
        )


RULES = (gpu_count, node_shape, heads, attention_dp, expert_parallel, pipeline)
