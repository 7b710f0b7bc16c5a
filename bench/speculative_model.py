"""The model bench/speculative.py prices a published point with: a block's acceptance curve
from the fitted Params, the accept length of a draft shape, and the speedup over no speculation
from runtime/perf's forward passes of the target and its draft.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from bench.speculative_points import Point, eagle3_head, target_shape
from runtime.perf.hardware import ModelShape, lookup_model, resolve_gpu
from runtime.perf.quant import bytes_per_param
from runtime.perf.spec import (
    Curve,
    SpecConfig,
    SpecShape,
    expected_accept_length,
    tree_verify_seconds,
)
from runtime.perf.step import EngineShape, StepModel, StepWork


@dataclass
class Params:
    """Everything the fit chooses."""

    sibling_catch: float = 0.10
    sibling_score: float = 0.40
    draft_confidence: float = 0.70
    decay: dict[str, float] = field(default_factory=lambda: {"EAGLE": 0.9, "NEXTN": 0.85})
    # sglang's ngram_us is not fitted (no SGLang NGRAM row in the table): 100 us assumed for
    # its CPU trie lookup per step; every other cost is fitted.
    engines: dict[str, dict[str, float]] = field(
        default_factory=lambda: {
            "sglang": {"draft_pass_us": 150.0, "step_us": 400.0, "verify_token_us": 10.0,
                       "ngram_us": 100.0, "tree_verify_ns": 0.0},
            "vllm": {"draft_pass_us": 150.0, "step_us": 400.0, "verify_token_us": 10.0,
                     "ngram_us": 100.0, "tree_verify_ns": 0.0},
        }
    )  # fmt: skip
    levels: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)
    # SpecBundle divides every shape of a (target, workload) by ONE baseline run, timed over the
    # whole run (prefill included) on an unpublished deployment: per run, its measured rate over
    # the physics' plain decode rate, fitted on the run's own fit rows (1 for a run without).
    baseline_runs: dict[str, float] = field(default_factory=dict)
    families: dict[str, Curve] = field(default_factory=dict)


# Sources whose speedups share one measured baseline run per (target, workload) with a
# deployment and a timing window the source does not publish (SB: whole-run wall time).
RUN_SOURCES = ("SB",)


def baseline_run(point: Point) -> str | None:
    """The baseline run a point's speedup divides by, where its deployment is unpublished."""
    if point.source not in RUN_SOURCES:
        return None
    target, _draft, workload = point.block
    return f"{target} / {workload} / bs{point.batch}"


def curve_of(algorithm: str, level: tuple[float, float], params: Params) -> Curve:
    """A block's curve from its level (first, rest): decaying families take the family's decay
    after the first position; flat (EAGLE-3) and bursty (NGRAM) ones a constant rest."""
    if algorithm in ("EAGLE", "NEXTN"):
        d = params.decay[algorithm]
        return Curve(level[0], min(0.99, level[0] * d), d)
    return Curve(level[0], level[1])


def block_curve(point: Point, params: Params) -> Curve:
    level = params.levels.get(point.block)
    if level is None:
        return params.families[point.algorithm]
    return curve_of(point.algorithm, level, params)


def _draft_network(model: ModelShape, algorithm: str) -> ModelShape | None:
    """The draft the row's engine runs: the catalogue's head where it has one, else a built
    EAGLE-3 head (an EAGLE-2 head reuses the target's LM head, which step.py adds)."""
    if algorithm not in ("EAGLE3", "EAGLE"):
        return None
    if algorithm == "EAGLE" and model.id == "llama-3.1-8b":
        return lookup_model("eagle-llama-3-8b")
    if algorithm == "EAGLE3" and model.id == "llama-3.1-8b":
        return lookup_model("eagle3-llama-3.1-8b")
    if algorithm == "EAGLE3" and model.id in ("llama-3.3-70b", "llama-3.1-70b"):
        return lookup_model("eagle3-llama-3.3-70b")
    return eagle3_head(model)


@cache
def _step_model(target: str, gpu: str, tp: int, dp: int, spec: SpecConfig | None) -> StepModel:
    model = target_shape(target)
    quant = model.checkpoint_quantization
    weights = model.quantized_weight_bytes(bytes_per_param(quant, "auto"))
    ep = tp if model.num_experts and tp > 1 else 1
    engine = EngineShape(
        tp=tp, quantization=quant, weight_bytes=weights, spec=spec, attn_dp=dp, ep=ep
    )
    return StepModel(resolve_gpu(gpu), model, engine)


def _step(point: Point, batch: int, tokens_per_seq: float) -> float:
    """One target forward pass of `batch` sequences verifying `tokens_per_seq` tokens each."""
    plain = _step_model(point.target, point.gpu, point.tp, point.attn_dp, None)
    work = StepWork(
        decode_seqs=batch,
        decode_tokens=max(batch, round(batch * tokens_per_seq)),
        decode_context=batch * point.context,
    )
    return plain.step_seconds(work)


@cache
def _draft_pass(point: Point, batch: int, topk: int) -> float:
    """One draft forward pass of `batch` sequences at `topk` tokens each (weights, KV reads,
    the draft's per-layer costs), without the engine's fixed cost per pass."""
    if point.algorithm == "NGRAM":
        return 0.0
    draft = _draft_network(target_shape(point.target), point.algorithm)
    spec = SpecConfig(
        algorithm=point.algorithm, shape=SpecShape(1, topk, 2), curve=Curve(0.5, 0.5),
        sibling_catch=0.0, sibling_score=0.0, draft_overhead_s=0.0, verify_overhead_s=0.0,
        step_overhead_s=0.0, draft=draft,
    )  # fmt: skip
    drafting = _step_model(point.target, point.gpu, point.tp, point.attn_dp, spec)
    return drafting.draft_seconds(batch, batch * point.context // max(1, point.attn_dp))


def accept_length(point: Point, params: Params, shape: SpecShape | None = None) -> float:
    return expected_accept_length(
        shape or point.shape, block_curve(point, params), params.sibling_catch,
        params.sibling_score, params.draft_confidence,
    )  # fmt: skip


def verified_per_seq(point: Point, curve: Curve, shape: SpecShape) -> float:
    """Tokens verified per sequence: the whole tree, except vLLM's n-gram proposer, which
    proposes only when the context has a match (a match rate of first / rest: once matched,
    each position is accepted at `rest`)."""
    if point.algorithm == "NGRAM" and point.engine == "vllm":
        match = min(1.0, curve.first / curve.rest)
        return 1 + match * (shape.draft_tokens - 1)
    return float(shape.draft_tokens)


def speedup(point: Point, params: Params, shape: SpecShape | None = None) -> float:
    """Output tokens/s with speculation over without, at the row's batch:
    (AL x running / speculative step) / (batch / decode step), where a speculative step is the
    draft passes + the verify pass over running x verified tokens + the engine's fixed costs,
    and `running` is the batch under SGLang's cap on running requests with speculation."""
    shape = shape or point.shape
    curve = block_curve(point, params)
    al = expected_accept_length(
        shape, curve, params.sibling_catch, params.sibling_score, params.draft_confidence
    )
    b = point.batch
    running = min(b, point.running_cap) if point.running_cap else b
    cost = params.engines[point.engine]
    tokens = verified_per_seq(point, curve, shape)
    verify = _step(point, running, tokens)
    if point.algorithm == "NGRAM":
        draft = cost["ngram_us"] * 1e-6
    else:
        draft = shape.num_steps * (
            _draft_pass(point, running, shape.topk) + cost["draft_pass_us"] * 1e-6
        )
    per_rank = running / max(1, point.attn_dp)
    extra = cost["verify_token_us"] * 1e-6 * per_rank * tokens + cost["step_us"] * 1e-6
    if shape.topk > 1:  # a tree's custom-mask verify attention
        model = target_shape(point.target)
        heads = model.num_attention_heads / max(1, point.tp // max(1, point.attn_dp))
        extra += tree_verify_seconds(shape, cost["tree_verify_ns"] * 1e-9, model.num_layers, heads)
    spec_rate = al * running / (draft + verify + extra)
    run = baseline_run(point)
    measured = params.baseline_runs.get(run, 1.0) if run else 1.0
    return spec_rate / (measured * b / _step(point, b, 1))


def implied_accept_length(point: Point, params: Params) -> float:
    """The accept length at which the model's speedup equals the published one: the speedup is
    linear in it (the step costs do not depend on it), so it is the model's accept length scaled
    by published / model. At temperature 0 acceptance does not depend on the batch, so one
    block's shape should imply one accept length at every batch; what differs is the step
    physics (or the published run's unpublished setup) at that batch, not acceptance."""
    assert point.speedup is not None
    return accept_length(point, params) * point.speedup / speedup(point, params)
