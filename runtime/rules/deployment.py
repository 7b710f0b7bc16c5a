"""Rules about the model, disaggregation, routing, autoscaling and the runtime image/env."""

from __future__ import annotations

from collections.abc import Iterator

from runtime.issues import Issue, error, warning
from runtime.launch import DIST_INIT_PORT, ENGINE_PORT
from runtime.rules.context import RuleContext
from runtime.rules.parallel import kv_heads_divide


def model_known(ctx: RuleContext) -> Iterator[Issue]:
    if ctx.arch is None:
        yield warning(
            "model.source",
            "model_not_in_catalog",
            f"{ctx.spec.model.source} is not in Plinth's model catalogue, so head divisibility "
            "and memory fit cannot be checked before deploy",
            "describe it in model.architecture (numbers from its config.json)",
        )


def context_length(ctx: RuleContext) -> Iterator[Issue]:
    requested = ctx.spec.model.context_length
    if ctx.arch is None or requested is None or requested <= ctx.arch.max_context:
        return
    yield error(
        "model.context_length",
        "context_length_exceeds_model",
        f"context_length {requested} is longer than {ctx.arch.id}'s {ctx.arch.max_context} "
        "positions; SGLang refuses it unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set",
        f"use at most {ctx.arch.max_context}",
    )


def _kv_heads_clash(ctx: RuleContext, tp: int) -> bool:
    arch = ctx.arch
    return arch is not None and not arch.is_mla and not kv_heads_divide(arch.num_kv_heads, tp)


def disaggregation(ctx: RuleContext) -> Iterator[Issue]:
    pd = ctx.spec.disaggregation
    if not pd.enabled:
        return
    prefill, decode = ctx.groups
    if prefill.tp % decode.tp != 0 and decode.tp % prefill.tp != 0:
        yield error(
            "disaggregation.decode.tp",
            "disagg_tp_incompatible",
            f"prefill tp {prefill.tp} and decode tp {decode.tp}: KV transfer between pools "
            "needs one TP width to divide the other",
            f"use decode tp {prefill.tp}",
        )
    elif _kv_heads_clash(ctx, max(prefill.tp, decode.tp)) and prefill.tp != decode.tp:
        yield error(
            "disaggregation.decode.tp",
            "disagg_tp_incompatible",
            f"the model's KV heads cannot be re-sliced between prefill tp {prefill.tp} and "
            f"decode tp {decode.tp}",
            f"use the same tp ({prefill.tp}) for both pools",
        )
    if pd.transfer_backend == "fake":
        yield error(
            "disaggregation.transfer_backend",
            "disagg_fake_backend",
            "the 'fake' transfer backend is for decode-only benchmarks; SGLang refuses it on "
            "a prefill server",
            "use mooncake (RDMA), mooncake_tcp or nixl",
        )
    if pd.bootstrap_port in {ENGINE_PORT, DIST_INIT_PORT}:
        yield error(
            "disaggregation.bootstrap_port",
            "disagg_bootstrap_port_conflict",
            f"bootstrap port {pd.bootstrap_port} collides with the engine's HTTP or dist-init port",
            "use 8998",
        )
    yield from _decode_radix(ctx)
    scale = ctx.spec.autoscaling
    pools_scaled = scale.prefill is not None or scale.decode is not None
    # min_replicas 0 (scale to zero) is honoured: both pools go to zero when idle.
    if max(1, scale.min_replicas) != scale.max_replicas and not pools_scaled:
        yield warning(
            "autoscaling.max_replicas",
            "autoscaling_ignored_with_disaggregation",
            "prefill and decode pools keep their sizes (disaggregation.*.replicas) unless "
            "autoscaling.prefill / autoscaling.decode bound them; these bounds are not applied",
            "size the pools with disaggregation.*.replicas, or give autoscaling.prefill and "
            "autoscaling.decode bounds with an autoscaling.slo",
        )


def _decode_radix(ctx: RuleContext) -> Iterator[Issue]:
    pd, algorithm = ctx.spec.disaggregation, ctx.spec.speculator.algorithm
    if not pd.decode_radix_cache:
        return
    if algorithm not in {"none", "EAGLE", "EAGLE3"}:
        yield error(
            "disaggregation.decode_radix_cache",
            "disagg_decode_radix_speculator",
            f"a radix cache on decode servers is incompatible with {algorithm} speculation",
            "turn decode_radix_cache off, or use EAGLE/EAGLE3",
        )
    if pd.transfer_backend == "fake":
        yield error(
            "disaggregation.decode_radix_cache",
            "disagg_decode_radix_fake_backend",
            "a radix cache on decode servers is incompatible with the fake transfer backend",
            "turn decode_radix_cache off",
        )


def autoscaling(ctx: RuleContext) -> Iterator[Issue]:
    scale = ctx.spec.autoscaling
    if scale.min_replicas > scale.max_replicas:
        yield error(
            "autoscaling.min_replicas",
            "autoscaling_min_above_max",
            f"min_replicas {scale.min_replicas} is above max_replicas {scale.max_replicas}",
            f"set max_replicas to at least {scale.min_replicas}",
        )
    if scale.min_replicas == 0 and not scale.scale_to_zero:
        yield error(
            "autoscaling.min_replicas",
            "autoscaling_zero_without_scale_to_zero",
            "min_replicas 0 means the endpoint may have no replica; that is scale-to-zero",
            "set autoscaling.scale_to_zero to true, or min_replicas to 1",
        )
    if scale.scale_to_zero and scale.min_replicas > 0:
        yield error(
            "autoscaling.scale_to_zero",
            "autoscaling_scale_to_zero_min",
            f"scale_to_zero needs min_replicas 0, got {scale.min_replicas}",
            "set autoscaling.min_replicas to 0",
        )
    yield from _pool_bounds(ctx)
    yield from _warm_pool(ctx)
    running = ctx.spec.batching.max_running_requests
    if running is not None and scale.slo is None and scale.concurrency_target > running:
        yield warning(
            "autoscaling.concurrency_target",
            "autoscaling_target_above_capacity",
            f"the concurrency target {scale.concurrency_target} is above max_running_requests "
            f"{running}; replicas would queue requests before the autoscaler reacts",
            f"use a concurrency_target of at most {running}",
        )


def _warm_pool(ctx: RuleContext) -> Iterator[Issue]:
    """autoscaling.warm_replicas: released replicas are the endpoint's own, kept for its next
    scale-up, so never more than it may ever run; a split endpoint's pools are not kept warm."""
    scale = ctx.spec.autoscaling
    if scale.warm_replicas > scale.max_replicas:
        yield error(
            "autoscaling.warm_replicas",
            "autoscaling_warm_above_max",
            f"warm_replicas {scale.warm_replicas} is above max_replicas {scale.max_replicas}",
            f"set warm_replicas to at most {scale.max_replicas}",
        )
    if scale.warm_replicas and ctx.spec.disaggregation.enabled:
        yield error(
            "autoscaling.warm_replicas",
            "autoscaling_warm_disaggregated",
            "a warm pool keeps plain engine replicas; prefill and decode pools are not kept warm",
            "set autoscaling.warm_replicas to 0",
        )
    spanning = [g.nodes for g in ctx.groups if g.role == "engine" and g.nodes > 1]
    if scale.warm_replicas and spanning and not ctx.spec.disaggregation.enabled:
        # Each rank would have to release and resume with its leader, and a multi-node group
        # is one LeaderWorkerSet replica, which a pod's deletion cost does not pick.
        yield error(
            "autoscaling.warm_replicas",
            "autoscaling_warm_multi_node",
            f"a warm pool keeps single-node replicas; this replica spans {spanning[0]} nodes",
            "set autoscaling.warm_replicas to 0",
        )


def _pool_bounds(ctx: RuleContext) -> Iterator[Issue]:
    """autoscaling.prefill / .decode: bounds the SLO policy scales a split endpoint's pools in."""
    scale = ctx.spec.autoscaling
    for role in ("prefill", "decode"):
        bounds = scale.pool_bounds(role)
        if bounds is None:
            continue
        if bounds.min_replicas > bounds.max_replicas:
            yield error(
                f"autoscaling.{role}.min_replicas",
                "autoscaling_pool_min_above_max",
                f"the {role} pool's min_replicas {bounds.min_replicas} is above its "
                f"max_replicas {bounds.max_replicas}",
                f"set autoscaling.{role}.max_replicas to at least {bounds.min_replicas}",
            )
        if not ctx.spec.disaggregation.enabled:
            yield warning(
                f"autoscaling.{role}",
                "autoscaling_pools_without_disaggregation",
                f"autoscaling.{role} bounds a prefill/decode pool, but disaggregation is off",
                f"remove autoscaling.{role}, or enable disaggregation",
            )
        elif scale.slo is None:
            yield error(
                f"autoscaling.{role}",
                "autoscaling_pools_without_slo",
                "prefill and decode pools scale on TTFT and ITL, which need an autoscaling.slo",
                "set autoscaling.slo (ttft_p90_ms, itl_p90_ms), or remove the pool bounds",
            )


def routing(ctx: RuleContext) -> Iterator[Issue]:
    route = ctx.spec.routing
    tuned = route.tuned()
    if route.policy != "cache_aware" and tuned:
        yield warning(
            "routing.policy",
            "routing_thresholds_unused",
            f"{', '.join(tuned)} apply to cache_aware routing, not {route.policy}",
            "remove them or set routing.policy to cache_aware",
        )
    elif tuned and route.effective_placement == "by_count":
        yield warning(
            "routing.placement",
            "routing_thresholds_unused",
            f"{', '.join(tuned)} apply to smg's cache-aware tree, not by_count placement",
            "remove them or set routing.placement to first_fit",
        )
    if route.policy == "cache_aware" and not ctx.spec.batching.radix_cache:
        yield warning(
            "routing.policy",
            "routing_cache_aware_without_radix",
            "cache-aware routing sends requests to the replica holding their prefix, but the "
            "radix (prefix) cache is off",
            "turn batching.radix_cache on, or use round_robin",
        )


def runtime_env(ctx: RuleContext) -> Iterator[Issue]:
    # Environment names are case-sensitive, but a lower-case hf_token still holds a token.
    for name in ctx.spec.runtime.env:
        if name.upper() in {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"}:
            yield error(
                f"runtime.env.{name}",
                "env_secret_in_plain_text",
                f"{name} would be stored in plain text in every revision",
                "put the token in a Secret and name it in model.hf_token_secret",
            )
    image = ctx.spec.runtime.image
    version = ctx.spec.runtime.sglang_version
    if image is not None and version not in image and "@sha256:" not in image:
        yield warning(
            "runtime.image",
            "image_version_mismatch",
            f"image {image} does not look like SGLang {version}; launch flags are checked "
            f"against {version}",
            f"use lmsysorg/sglang:v{version} or pin a digest of it",
        )


MODEL_RULES = (model_known, context_length)
RULES = (disaggregation, autoscaling, routing, runtime_env)
