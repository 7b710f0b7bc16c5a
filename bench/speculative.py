"""Speculative decoding against published points: fit on the `fit` rows, report the held-out rest.

Reads ``runtime/catalog/speculative/published_points.tsv`` (281 published points with a pointer
each; ``SOURCES.md`` beside it) and prices every `fit` and `holdout` row with runtime/perf's
model: the accept length of the row's (steps, topk, draft tokens) from its (target, draft,
workload) acceptance curve, and the speedup

    AL x decode_step(batch) / (draft passes + verify_step(batch x draft tokens) + fixed costs)

with the target's forward passes from ``runtime/perf/step.py`` (the row's GPU and TP).

Free constants, fitted on the `fit` rows only (deterministic coordinate descent on a log-error
least squares, no randomness):
- per (target, draft, workload) block: its curve's level (EAGLE-3/STANDALONE: a flat rate;
  EAGLE/NEXTN: the first position, the family's decay after it; NGRAM: first and rest);
- per family: EAGLE's and NEXTN's decay with depth;
- the tree: sibling_catch (how often the target's token is a runner-up) and sibling_score (how
  highly the draft scores runner-ups);
- per engine (SGLang, vLLM): a fixed cost per draft pass, per speculative step, and per
  verified token.

With ``--write`` the fitted constants go to ``runtime/catalog/speculative/fitted.yaml`` with the
date and the fit's row ids. Then it prints every held-out row, published vs model, the median and
max absolute relative error per source and overall, and the model's best draft shape per batch
over SGLang's usual grid (steps 1-7, topk 1/2/4/8, draft tokens up to 16).

    .venv/bin/python bench/speculative.py            # report with the catalogue's constants
    .venv/bin/python bench/speculative.py --write    # refit, write the catalogue, report
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import re
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from runtime.catalog.perf import perf_catalog  # noqa: E402
from runtime.perf.hardware import ModelShape, lookup_model, resolve_gpu  # noqa: E402
from runtime.perf.quant import bytes_per_param  # noqa: E402
from runtime.perf.spec import Curve, SpecConfig, SpecShape, expected_accept_length  # noqa: E402
from runtime.perf.step import EngineShape, StepModel, StepWork  # noqa: E402

DATA = REPO / "runtime" / "catalog" / "speculative" / "published_points.tsv"
FITTED = REPO / "runtime" / "catalog" / "speculative" / "fitted.yaml"
MEDIAN_TARGET, MAX_TARGET = 0.10, 0.25
FAMILIES = ("EAGLE", "EAGLE3", "NEXTN", "NGRAM")


# ---- the published targets: catalogue models, or shapes from their public config.json -----------
def _moe(id_: str, numbers: tuple[float, ...], **extra: object) -> ModelShape:
    """A MoE target from (layers, hidden, heads, KV heads, head dim, vocabulary, params B,
    active B, experts, experts per token)."""
    layers, hidden, heads, kv, hd, vocab, params, active, experts, topk = numbers
    return ModelShape(
        id=id_, hf_repo=id_, architecture="Qwen3MoeForCausalLM", num_layers=int(layers),
        hidden_size=int(hidden), num_attention_heads=int(heads), num_kv_heads=int(kv),
        head_dim=int(hd), vocab_size=int(vocab), params_b=params, active_params_b=active,
        max_context=131072, num_experts=int(experts), experts_per_token=int(topk),
        **extra,  # type: ignore[arg-type]
    )  # fmt: skip


FP8 = {"checkpoint_quantization": "fp8", "checkpoint_bytes_per_param": 1.0}
QWEN3_30B = (48, 2048, 32, 4, 128, 151936, 30.5, 3.3, 128, 8)
# Targets not in runtime/catalog/models.yaml, from their Hugging Face config.json (layers,
# hidden, heads, KV heads, head dim, vocabulary, experts) and model cards (parameters).
EXTRA_TARGETS = {
    "Qwen3-30B-A3B-Instruct-2507": _moe("qwen3-30b-a3b", QWEN3_30B),
    "Qwen3-Coder-30B-A3B-Instruct": _moe("qwen3-coder-30b-a3b", QWEN3_30B),
    "Qwen3-Coder-480B-A35B-Instruct": _moe(
        "qwen3-coder-480b", (62, 6144, 96, 8, 128, 151936, 480.0, 35.0, 160, 8)
    ),
    "Qwen3-Next-80B-A3B-Instruct-FP8": _moe(
        "qwen3-next-80b", (48, 2048, 16, 2, 256, 151936, 80.0, 3.0, 512, 10), **FP8
    ),
    "Ling-flash-2.0": _moe("ling-flash-2.0", (32, 4096, 32, 4, 128, 157184, 103.0, 6.1, 256, 8)),
    "Llama-4-Scout-17B-16E-Instruct": _moe(
        "llama-4-scout", (48, 5120, 40, 8, 128, 202048, 109.0, 17.0, 16, 1)
    ),
    "Kimi-K2-Instruct": _moe(
        "kimi-k2", (61, 7168, 64, 64, 192, 163840, 1026.0, 32.0, 384, 8),
        kv_lora_rank=512, qk_rope_head_dim=64, **FP8,
    ),
    "MiniCPM3-4B": ModelShape(
        id="minicpm3-4b", hf_repo="openbmb/MiniCPM3-4B", architecture="MiniCPM3ForCausalLM",
        num_layers=62, hidden_size=2560, num_attention_heads=40, num_kv_heads=40, head_dim=96,
        vocab_size=73448, params_b=4.0, active_params_b=4.0, max_context=32768,
        kv_lora_rank=256, qk_rope_head_dim=32,
    ),
}  # fmt: skip
CATALOGUED = {
    "Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "Meta-Llama-3-8B-Instruct": "llama-3.1-8b",  # same architecture and size as Llama-3.1-8B
    "Llama-3.3-70B-Instruct": "llama-3.3-70b",
    "Llama-3-70B-Instruct": "llama-3.1-70b",
    "Qwen3-8B": "qwen3-8b",
    "Qwen3-235B-A22B-Instruct-2507": "qwen3-235b-a22b",
    "DeepSeek-V3": "deepseek-v3",
    "DeepSeek-V3-0324": "deepseek-v3",
}
# TP where a source does not state it: the model cards' launch commands (SpecBundle's H200 runs),
# else the fewest GPUs that hold the weights with room for the KV cache.
DEFAULT_TP = {
    "llama-3.3-70b": 4, "llama-3.1-70b": 4, "qwen3-235b-a22b": 8, "deepseek-v3": 8,
    "qwen3-coder-480b": 8, "kimi-k2": 8, "ling-flash-2.0": 4, "llama-4-scout": 4,
}  # fmt: skip
# GPUs outside the catalogue: the nearest catalogued one (bandwidth and compute within ~15%).
GPU_PROXY = {"MI300X": "H200", "RTX 4090": "L40S"}
# Drafts the sources name differently but that are the same weights (lmsys re-hosts the EAGLE-3
# authors' heads for SGLang); keyed to the catalogue's repository so runtime lookups find them.
SAME_DRAFT = {
    "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    "lmsys/sglang-EAGLE3-LLaMA3.3-Instruct-70B": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
}
SAME_TARGET = {"DeepSeek-V3-0324": "DeepSeek-V3"}  # a checkpoint refresh, same MTP module
# SGLang caps running requests at 48 under speculation unless --max-running-requests is set
# (server_args). The AMD blog's launch does not set it; SpecBundle and the MTP blog do, and SDB
# Figure 2's chain keeps scaling from 64 to 128 requests, so its runs were not capped either.
SGLANG_SPEC_RUNNING = 48
CAPPED_SOURCES = ("AMD",)
DRAFT_VOCAB = 32000  # SpecForge / EAGLE-3 heads predict a reduced draft vocabulary


@cache
def target_shape(name: str) -> ModelShape:
    if name in EXTRA_TARGETS:
        return EXTRA_TARGETS[name]
    found = lookup_model(CATALOGUED[name])
    assert found is not None, name
    return found


@cache
def eagle3_head(target: ModelShape) -> ModelShape:
    """A 1-layer EAGLE-3 head for `target`: the 3-layer feature fusion, one decoder layer over
    twice the hidden size, and a 32k-token draft LM head (0.42B for Llama-3.1-8B, as shipped)."""
    h, kv = target.hidden_size, target.num_kv_heads * target.head_dim
    attention = 2 * h * (h + 2 * kv) + h * h
    params = 3 * h * h + attention + 3 * h * int(3.5 * h) + DRAFT_VOCAB * h
    return ModelShape(
        id=f"eagle3-{target.id}", hf_repo="", architecture="LlamaForCausalLMEagle3",
        num_layers=1, hidden_size=h, num_attention_heads=target.num_attention_heads,
        num_kv_heads=target.num_kv_heads, head_dim=target.head_dim,
        vocab_size=target.vocab_size, params_b=params / 1e9, active_params_b=params / 1e9,
        max_context=2048,
    )  # fmt: skip


Key = tuple[str, str, str]  # (target, draft, workload): one acceptance curve


# ---- rows ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    id: str
    source: str
    split: str
    engine: str  # sglang | vllm
    algorithm: str
    target: str  # published name (EXTRA_TARGETS / CATALOGUED key)
    block: tuple[str, str, str]  # (target, draft, workload): one acceptance curve
    shape: SpecShape
    batch: int
    context: int
    gpu: str
    tp: int
    attn_dp: int = 1
    running_cap: int = 0  # the engine's cap on running requests under speculation (0: none)
    accept_length: float | None = None
    speedup: float | None = None
    conditional: tuple[float, ...] = ()  # per-position conditional acceptance, where published


def _first_int(text: str, default: int = 1) -> int:
    found = re.search(r"\d+", text)
    return int(found.group()) if found else default


def _float(text: str) -> float | None:
    found = re.match(r"\s*([0-9.]+)", text)
    return float(found.group(1)) if found else None


def _algorithm(text: str) -> str:
    upper = text.upper()
    return "NEXTN" if upper.startswith(("NEXTN", "MTP")) else upper.split()[0]


def _shape(row: dict[str, str]) -> SpecShape:
    """SGLang's (steps, topk, draft tokens incl. the root) from the row's cells."""
    tokens, steps = row["num_draft_tokens"], row["num_steps"]
    if "proposed" in tokens or tokens.startswith("K="):  # vLLM: k proposed, bonus excluded
        k = _first_int(tokens.replace("K=", ""))
        return SpecShape(k, 1, k + 1)
    if "chain k=3" in tokens:
        return SpecShape(3, 1, 4)
    tree = re.search(r"k=(\d+)", tokens)
    if tree and _first_int(row["topk"]) == 1:  # a chain of k proposed tokens
        k = int(tree.group(1))
        return SpecShape(k, 1, k + 1)
    if tree:  # SDB trees: k verified tokens with the root (accepted / proposed = k - 1)
        return SpecShape(_first_int(steps), _first_int(row["topk"]), int(tree.group(1)))
    if "window" in steps:  # MTPB: an N-token window read as num_draft_tokens = N
        n = _first_int(tokens)
        return SpecShape(n - 1, 1, n)
    if not steps[:1].isdigit():  # DSDOC: the page's example launch (1, 1, 2)
        return SpecShape(1, 1, 2)
    return SpecShape(_first_int(steps), _first_int(row["topk"]), _first_int(tokens))


def _workload(row: dict[str, str]) -> str:
    source, dataset = row["source_id"], row["dataset"].lower()
    if source in ("NEB", "DSV3", "DSDOC") or (source == "MTPB" and "65536" not in dataset):
        return "chat"  # DeepSeek-V3's MTP on general prompts
    if source == "AMD":
        return "amd-relaxed-" + ("sharegpt" if "sharegpt" in dataset else "random")
    if source == "MTPB" and "65536" in dataset:
        return "long-64k"
    for name in ("mtbench", "mt-bench", "gsm8k", "humaneval", "sharegpt", "cnn", "instructcoder"):
        if name in dataset.replace(" ", ""):
            return name.replace("mt-bench", "mtbench")
    return "chat"


def _draft(row: dict[str, str], algorithm: str) -> str:
    draft = row["draft_model"].split(" ")[0]
    if row["source_id"].startswith("SDB"):  # the study names heads by algorithm only
        return {"EAGLE3": "sdb-eagle3", "EAGLE": "sdb-eagle", "NGRAM": "ngram"}[algorithm]
    if algorithm == "NEXTN":
        return "mtp"
    return SAME_DRAFT.get(draft, draft)


def _batch_and_dp(row: dict[str, str]) -> tuple[int, int]:
    """(engine batch, attention-DP ranks). MTPB's counts are per rank of an 8-GPU DP-attention
    engine; a batch the source does not state is taken as 1."""
    cell = row["batch_size"]
    n = _first_int(cell) if re.search(r"\d", cell) and "n/a" not in cell else 1
    if row["source_id"] == "MTPB":
        return n * 8, 8
    return n, 1


def _speedup(row: dict[str, str]) -> float | None:
    cell = row["speedup_vs_nospec"]
    if row["source_id"] == "MTPB" and ";" in cell:
        # Against the baseline with overlap scheduling on (the one a user runs); spec mode ran
        # without it.
        return _float(cell.split(";")[1])
    return _float(cell)


def _conditional(row: dict[str, str]) -> tuple[float, ...]:
    cell = row["per_position_acceptance"]
    if cell.startswith("conditional"):
        chunk = cell.split("k=3:")[1].split(";")[0]
        return tuple(float(v) for v in chunk.split(","))
    if cell.startswith("cumulative"):
        values = [float(v) for v in re.findall(r"0\.\d+", cell)]
        return tuple(
            b / a if i else b
            for i, (a, b) in enumerate(zip([1.0, *values[:-1]], values, strict=True))
        )
    if cell.startswith("second-token acceptance"):
        low, high = (float(v) for v in re.findall(r"0\.\d+", cell))
        return ((low + high) / 2,)
    return ()


def _context(row: dict[str, str]) -> int:
    dataset = row["dataset"]
    if "65536" in dataset:
        return 65536 + 2048
    if "2000" in dataset:
        return 2000 + 50
    if row["source_id"] == "AMD" and "random" in dataset.lower():
        return 1024 + 512
    return 1024  # chat and benchmark prompts with their answers, on average


def load_points(path: Path = DATA) -> list[Point]:
    points = []
    with path.open() as handle:
        for row in csv.DictReader(handle, delimiter="\t"):
            if row["split"] not in ("fit", "holdout"):
                continue
            points.append(_point(row))
    return points


def _point(row: dict[str, str]) -> Point:
    algorithm = _algorithm(row["algorithm"])
    target = SAME_TARGET.get(row["target_model"], row["target_model"])
    shape = target_shape(target)
    gpu_cell = row["gpu"]
    gpu = next((p for name, p in GPU_PROXY.items() if name in gpu_cell), None)
    gpu = gpu or ("H200" if "H200" in gpu_cell else "H100-SXM")
    if "not stated" in gpu_cell and shape.id == "deepseek-v3":
        gpu = "H200"
    tp = _first_int(row["tp"], 0) if row["tp"][:1].isdigit() else 0
    if row["source_id"] == "MTPB":
        tp = 8
    batch, dp = _batch_and_dp(row)
    return Point(
        id=row["point_id"],
        source=row["source_id"].split("-")[0],
        split=row["split"],
        engine="vllm" if "vllm" in row["engine"].lower() else "sglang",
        algorithm=algorithm,
        target=target,
        block=(target, _draft(row, algorithm), _workload(row)),
        shape=_shape(row),
        batch=batch,
        context=_context(row),
        gpu=gpu,
        tp=tp or DEFAULT_TP.get(shape.id, 1),
        attn_dp=dp,
        running_cap=SGLANG_SPEC_RUNNING if row["source_id"] in CAPPED_SOURCES else 0,
        accept_length=_float(row["accept_length"]),
        speedup=_speedup(row),
        conditional=_conditional(row),
    )


# ---- the model -----------------------------------------------------------------------------------
@dataclass
class Params:
    """Everything the fit chooses."""

    sibling_catch: float = 0.10
    sibling_score: float = 0.40
    decay: dict[str, float] = field(default_factory=lambda: {"EAGLE": 0.9, "NEXTN": 0.85})
    # sglang's ngram_us is not fitted (no SGLang NGRAM row in the table): 100 us assumed for
    # its CPU trie lookup per step; every other cost is fitted.
    engines: dict[str, dict[str, float]] = field(
        default_factory=lambda: {
            "sglang": {"draft_pass_us": 150.0, "step_us": 400.0, "verify_token_us": 10.0,
                       "ngram_us": 100.0},
            "vllm": {"draft_pass_us": 150.0, "step_us": 400.0, "verify_token_us": 10.0,
                     "ngram_us": 100.0},
        }
    )  # fmt: skip
    levels: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)
    # SpecBundle's deployments (TP, attention backend) are not published: per target, a fixed
    # cost per speculative step as a share of its decode step, fitted on its own fit rows.
    target_share: dict[str, float] = field(default_factory=dict)
    families: dict[str, Curve] = field(default_factory=dict)


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
        params.sibling_score,
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
    al = expected_accept_length(shape, curve, params.sibling_catch, params.sibling_score)
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
    extra += params.target_share.get(point.target, 0.0) * _step(point, running, 1)
    spec_rate = al * running / (draft + verify + extra)
    return spec_rate / (b / _step(point, b, 1))


# ---- the fit -------------------------------------------------------------------------------------
def _residuals(points: Iterable[Point], params: Params) -> list[float]:
    out = []
    for p in points:
        if p.accept_length is not None:
            out.append(math.log(accept_length(p, params) / p.accept_length))
        if p.speedup is not None:
            out.append(math.log(speedup(p, params) / p.speedup))
        curve = block_curve(p, params)
        for depth, value in enumerate(p.conditional, start=1):
            out.append(math.log(curve.at(depth) / value))
    return out


def _loss(points: Iterable[Point], params: Params) -> float:
    return sum(r * r for r in _residuals(points, params))


def _golden(f: Callable[[float], float], low: float, high: float, iters: int = 28) -> float:
    """The minimum of a unimodal `f` on [low, high] (golden-section search, deterministic)."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    return (a + b) / 2


def _fit_levels(fit: list[Point], params: Params) -> None:
    """Each block's level from its own fit rows, the globals held."""
    blocks: dict[Key, list[Point]] = {}
    for p in fit:
        blocks.setdefault(p.block, []).append(p)
    for block, rows in sorted(blocks.items()):
        algorithm = rows[0].algorithm
        first, rest = params.levels.get(block, (0.7, 0.8))

        def with_first(
            x: float, rest: float = rest, block: Key = block, rows: list[Point] = rows
        ) -> float:
            params.levels[block] = (x, rest)
            return _loss(rows, params)

        first = _golden(with_first, 0.05, 0.97, iters=20)
        params.levels[block] = (first, rest)
        if algorithm not in ("EAGLE", "NEXTN"):

            def with_rest(
                x: float, first: float = first, block: Key = block, rows: list[Point] = rows
            ) -> float:
                params.levels[block] = (first, x)
                return _loss(rows, params)

            rest = _golden(with_rest, 0.05, 0.97, iters=20)
            params.levels[block] = (first, rest)
            first = _golden(with_first, 0.05, 0.97, iters=20)
            params.levels[block] = (first, rest)
    _family_defaults(params)


def _family_defaults(params: Params) -> None:
    """Each family's curve for pairs without one: the median block level."""
    for family in FAMILIES:
        levels = [lv for (t, d, w), lv in params.levels.items() if _family_of(d) == family]
        if not levels:
            continue
        first = statistics.median(lv[0] for lv in levels)
        rest = statistics.median(lv[1] for lv in levels)
        params.families[family] = curve_of(family, (first, rest), params)


FAMILY_OF_DRAFT: dict[str, str] = {}


def _family_of(draft: str) -> str:
    return FAMILY_OF_DRAFT.get(draft, "EAGLE3")


GLOBALS: list[tuple[str, float, float]] = [
    ("sibling_catch", 0.0, 0.6),
    ("sibling_score", 0.0, 0.95),
    ("decay:EAGLE", 0.5, 1.0),
    ("decay:NEXTN", 0.4, 1.0),
    ("sglang:draft_pass_us", 0.0, 3000.0),
    ("sglang:step_us", 0.0, 8000.0),
    ("sglang:verify_token_us", 0.0, 60.0),
    ("vllm:draft_pass_us", 0.0, 3000.0),
    ("vllm:step_us", 0.0, 8000.0),
    ("vllm:verify_token_us", 0.0, 60.0),
    ("vllm:ngram_us", 0.0, 8000.0),
]


def _set(params: Params, name: str, value: float) -> None:
    if name.startswith("share:"):
        params.target_share[name.split(":", 1)[1]] = value
    elif name.startswith("decay:"):
        params.decay[name.split(":")[1]] = value
    elif ":" in name:
        engine, key = name.split(":")
        params.engines[engine][key] = value
    else:
        setattr(params, name, value)


def _affected(name: str, rows: list[Point]) -> list[Point]:
    """The fit rows a global moves (whole blocks, so their levels can be refitted)."""
    if name.startswith("share:"):
        chosen = [p for p in rows if p.target == name.split(":", 1)[1]]
    elif name.startswith("decay:"):
        chosen = [p for p in rows if p.algorithm == name.split(":")[1]]
    elif ":" in name:
        chosen = [p for p in rows if p.engine == name.split(":")[0]]
    else:  # the tree: blocks with a tree row
        chosen = [p for p in rows if p.shape.topk > 1]
    blocks = {p.block for p in chosen}
    return [p for p in rows if p.block in blocks]


def fit(points: list[Point], rounds: int = 3) -> Params:
    """Coordinate descent on the globals (golden section each), deterministic. The tree and
    decay constants trade off against the curves' levels, so the levels of the blocks they touch
    are refitted inside their search; the cost constants alternate with a levels refit."""
    rows = [p for p in points if p.split == "fit"]
    for p in rows:
        FAMILY_OF_DRAFT[p.block[1]] = p.algorithm
    params = Params()
    _fit_levels(rows, params)
    shares = sorted({p.target for p in rows if p.source == "SB"})
    for round_ in range(rounds):
        for name, low, high in [*GLOBALS, *((f"share:{t}", 0.0, 2.0) for t in shares)]:
            subset = _affected(name, rows)
            inner = name.startswith(("decay:", "sibling"))

            def loss(
                x: float, name: str = name, subset: list[Point] = subset, inner: bool = inner
            ) -> float:
                _set(params, name, x)
                if inner:
                    _fit_levels(subset, params)
                return _loss(subset, params)

            _set(params, name, _golden(loss, low, high, iters=14 if inner else 18))
            _fit_levels(rows, params)
        print(f"round {round_ + 1}: loss {_loss(rows, params):.3f}", file=sys.stderr)
    return params


# ---- catalogue in and out ------------------------------------------------------------------------
def params_from_catalogue(points: list[Point]) -> Params:
    fitted = perf_catalog().speculative.fit
    params = Params(
        sibling_catch=fitted.tree.sibling_catch,
        sibling_score=fitted.tree.sibling_score,
        engines={k: v.model_dump() for k, v in fitted.engines.items()},
    )
    for name, row in fitted.families.items():
        params.families[name] = Curve.of(row)
        if row.decay < 1:
            params.decay[name] = row.decay
    params.target_share = dict(fitted.deployment_share)
    for row in fitted.curves:
        level = (row.first, row.rest)
        params.levels[(row.target, row.draft or "", row.workload)] = level
    return params


def write_catalogue(points: list[Point], params: Params) -> None:
    fit_ids = [p.id for p in points if p.split == "fit"]
    blocks: dict[tuple[str, str, str], list[str]] = {}
    for p in points:
        if p.split == "fit":
            blocks.setdefault(p.block, []).append(p.id)
    curves = []
    for block, ids in sorted(blocks.items()):
        target, draft, workload = block
        algorithm = FAMILY_OF_DRAFT[draft]
        c = curve_of(algorithm, params.levels[block], params)
        curves.append({
            "target": target, "draft": draft, "workload": workload, "algorithm": algorithm,
            "first": round(c.first, 4), "rest": round(c.rest, 4), "decay": round(c.decay, 4),
            "source": "fitted to " + ", ".join(ids),
        })  # fmt: skip
    data = {
        "date": datetime.date.today().isoformat(),
        "command": ".venv/bin/python bench/speculative.py --write",
        "fit_rows": fit_ids,
        "tree": {"sibling_catch": round(params.sibling_catch, 4),
                 "sibling_score": round(params.sibling_score, 4)},
        "engines": {e: {k: round(v, 2) for k, v in c.items()} for e, c in params.engines.items()},
        "families": {
            f: {"first": round(c.first, 4), "rest": round(c.rest, 4), "decay": round(c.decay, 4)}
            for f, c in sorted(params.families.items())
        },
        "curves": curves,
        "deployment_share": {t: round(v, 4) for t, v in sorted(params.target_share.items())},
    }  # fmt: skip
    header = (
        "# Written by bench/speculative.py --write: the speculative model's constants fitted\n"
        "# on the `fit` rows of published_points.tsv (ids in fit_rows; sources in SOURCES.md).\n"
        "# Do not edit by hand; rerun the bench. Curves: conditional acceptance per draft\n"
        "# depth, depth 1 = first, depth i >= 2 = rest x decay^(i-2). Names as published.\n"
    )
    FITTED.write_text(header + yaml.safe_dump(data, sort_keys=False, width=100))


# ---- report --------------------------------------------------------------------------------------
def errors(points: list[Point], params: Params) -> list[tuple[Point, str, float, float]]:
    out = []
    for p in points:
        if p.speedup is not None:
            out.append((p, "speedup", p.speedup, speedup(p, params)))
        if p.accept_length is not None:
            out.append((p, "accept", p.accept_length, accept_length(p, params)))
    return out


def summary(rows: list[tuple[Point, str, float, float]]) -> tuple[float, float]:
    errs = [abs(model / pub - 1) for _, _, pub, model in rows]
    return (statistics.median(errs), max(errs)) if errs else (0.0, 0.0)


def held_out_summary(params: Params | None = None) -> dict[str, tuple[float, float, int]]:
    """{source or 'overall' (+ ':accept' for accept lengths): (median, max, n)} on `holdout`."""
    points = load_points()
    params = params or params_from_catalogue(points)
    rows = errors([p for p in points if p.split == "holdout"], params)
    out = {}
    for metric in ("speedup", "accept"):
        chosen = [r for r in rows if r[1] == metric]
        suffix = "" if metric == "speedup" else ":accept"
        for source in [*sorted({r[0].source for r in chosen}), "overall"]:
            part = [r for r in chosen if source in ("overall", r[0].source)]
            med, worst = summary(part)
            out[source + suffix] = (med, worst, len(part))
    return out


def print_rows(points: list[Point], params: Params, split: str) -> None:
    print(f"\n== {split} rows: published vs model ==")
    head = f"{'point':<26}{'alg':<7}{'shape':<9}{'bs':>5}  {'metric':<8}"
    print(head + f"{'pub':>7}{'model':>7}{'err':>8}")
    for p, metric, pub, model in errors([q for q in points if q.split == split], params):
        s = p.shape
        flag = "  <-- over 25%" if abs(model / pub - 1) > MAX_TARGET else ""
        print(f"{p.id:<26}{p.algorithm:<7}{s.num_steps},{s.topk},{s.draft_tokens:<5}{p.batch:>5}  "
              f"{metric:<8}{pub:>7.2f}{model:>7.2f}{model / pub - 1:>+8.1%}{flag}")  # fmt: skip


def print_summary(params: Params) -> bool:
    print("\n== held-out error (|model / published - 1|) ==")
    print(f"{'source':<16}{'n':>4}{'median':>9}{'max':>9}")
    table = held_out_summary(params)
    for key, (med, worst, n) in table.items():
        print(f"{key:<16}{n:>4}{med:>9.1%}{worst:>9.1%}")
    med, worst, _ = table["overall"]
    ok = med <= MEDIAN_TARGET and worst <= MAX_TARGET
    print(f"speedup: median {med:.1%} (target {MEDIAN_TARGET:.0%}), max {worst:.1%} "
          f"(target {MAX_TARGET:.0%}): {'met' if ok else 'NOT met'}")  # fmt: skip
    return ok


GRID = [
    SpecShape(steps, topk, tokens)
    for steps in range(1, 8)
    for topk in (1, 2, 4, 8)
    for tokens in ([steps + 1] if topk == 1 else range(steps + 2, 17))
]


def best_shape(point: Point, params: Params, batch: int) -> tuple[SpecShape, float]:
    """The fastest shape at `batch`; among shapes within 1% of it, the fewest draft tokens (a
    tree whose extra nodes gain nothing is not worth its verification)."""
    at = replace(point, batch=batch)
    scored = [(s, speedup(at, params, s)) for s in GRID]
    top = max(value for _, value in scored)
    near = [(s, v) for s, v in scored if v >= 0.99 * top]
    return min(near, key=lambda x: (x[0].draft_tokens, -x[1]))


def print_best_shapes(points: list[Point], params: Params) -> None:
    print("\n== the model's best draft shape per batch (steps 1-7, topk 1/2/4/8, tokens <= 16) ==")
    cases = {
        "Llama-3.1-8B EAGLE3 H100": next(p for p in points if p.id == "SDB-F1-01"),
        "Qwen3-8B EAGLE3 H100": next(p for p in points if p.id == "SDB-F2-01"),
        "Llama-3-70B EAGLE TP4 H100": next(p for p in points if p.id == "SDB-F2-13"),
    }
    for label, point in cases.items():
        point = replace(point, engine="sglang")
        cells = []
        for batch in (1, 2, 4, 8, 16, 32, 64, 128):
            shape, value = best_shape(point, params, batch)
            cells.append(
                f"bs{batch}: ({shape.num_steps},{shape.topk},{shape.draft_tokens}) {value:.2f}x"
            )
        print(f"{label}\n    " + "\n    ".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="refit and write fitted.yaml")
    parser.add_argument("--fit-rows", action="store_true", help="also print the fit rows")
    args = parser.parse_args()
    points = load_points()
    if args.write:
        params = fit(points)
        write_catalogue(points, params)
        perf_catalog.cache_clear()
        print(f"wrote {FITTED.relative_to(REPO)}")
    params = params_from_catalogue(points)
    for p in points:
        FAMILY_OF_DRAFT.setdefault(p.block[1], p.algorithm)
    print(
        f"tree: sibling_catch {params.sibling_catch:.3f}, sibling_score {params.sibling_score:.3f}"
    )
    for engine, cost in params.engines.items():
        print(f"{engine}: " + ", ".join(f"{k} {v:.1f}" for k, v in cost.items()))
    for name, curve in sorted(params.families.items()):
        print(
            f"family {name}: first {curve.first:.3f} rest {curve.rest:.3f} decay {curve.decay:.3f}"
        )
    if args.fit_rows:
        print_rows(points, params, "fit")
        print(
            "fit (median, max):", summary(errors([p for p in points if p.split == "fit"], params))
        )
    print_rows(points, params, "holdout")
    print_summary(params)
    print_best_shapes(points, params)


if __name__ == "__main__":
    main()
