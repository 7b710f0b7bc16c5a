"""Calibration side by side: runtime/perf step times next to two references, and published figures.

Part 1 compares the model's decode step and prefill times with NVIDIA AIConfigurator 0.12.0's
SGLang estimates and with its successor aisimulate 0.13's (both built from measured per-kernel
silicon data), side by side in one table, over a grid of model x GPU x TP x GEMM dtype x KV dtype
x batch (up to the KV limit) x context: dense GQA models at TP 1-8, and MoE models with attention
data parallelism and both expert layouts, MLA (DeepSeek-V3) included. Each configuration is
either a `fit` row (the catalogue's constants were chosen on these) or `held-out` (another
model or GPU, never looked at while fitting); the summary gives the error of each set apart.
Targets: every decode step within 10%, every prefill within 15%, of each reference. Points where
the two references disagree with each other by more than those margins are named in a list of
their own (no physics can sit within both).

Both tools are large (~850 MB each), never Plinth dependencies: the bench creates a venv per
reference (``bench/.venvs/aiconfigurator``, ``bench/.venvs/aisimulate``, git-ignored) on first
use and queries each in a subprocess. aisimulate 0.13.0 itself is a placeholder on PyPI that
fetches its wheel from pypi.nvidia.com; the bench pins the last 0.13.0 pre-release wheel
published on PyPI itself (``AIS_VERSION``, the day before 0.13.0's release).
Points where AIC's own measured GEMMs are not monotone in the rows (``AIC_ANOMALIES``) are marked,
and the bench prints those GEMMs from AIC's silicon table beside BF16's, in the same run.

Part 2 reproduces end-to-end figures from cited sources (``published`` in
``runtime/catalog/perf.yaml``): single-request decode speed with and without EAGLE-2/EAGLE-3 and
FP8 against FP16. Target: each within 20%. It also prints what NGRAM and NEXTN give on the same
model, so the algorithms can be seen to differ.

    .venv/bin/python bench/calibration.py            # full grid
    .venv/bin/python bench/calibration.py --quick    # a few points per model
    .venv/bin/python bench/calibration.py --only deepseek-v3   # configurations of one model

``bench/calibration_fit.py`` refits the catalogue's GEMM kernel rows on this grid.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.references import (  # noqa: E402
    AIC,
    REFERENCES,
    ensure,
    query_reference,
)
from runtime.catalog import get_gpu, get_model  # noqa: E402
from runtime.catalog.perf import PerfCatalog, PublishedFigure, perf_catalog  # noqa: E402
from runtime.perf.hardware import ModelShape, lookup_model, resolve_gpu  # noqa: E402
from runtime.perf.quant import bytes_per_param, kv_dtype_bytes  # noqa: E402
from runtime.perf.spec import SpecConfig, resolve_spec  # noqa: E402
from runtime.perf.step import EngineShape, StepModel, StepWork  # noqa: E402

DECODE_TARGET, PREFILL_TARGET, PUBLISHED_TARGET = 0.10, 0.15, 0.20

# Catalogue model -> the references' model path; GPU -> their system name.
AIC_MODELS = {
    "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B",
    "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
}
AIC_SYSTEMS = {"H100-SXM": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm"}
AIC_GEMM = {None: None, "fp8": "fp8_block"}  # SGLang's FP8 checkpoints are block-scaled


@dataclass(frozen=True)
class Config:
    """One (model, GPU, TP) of the grid; `fit`: the catalogue was fitted on it, else held out."""

    model: str
    gpu: str
    tp: int
    fit: bool = True
    batches: tuple[int, ...] = ()  # decode batches beyond BATCHES (up to the KV limit)


# Dense GQA configurations. Held out: models and GPUs the constants were never fitted on.
CONFIGS = [
    Config("llama-3.1-8b", "H100-SXM", 1, batches=(256, 512)),
    Config("llama-3.1-8b", "H100-SXM", 2),
    Config("llama-3.1-8b", "H200", 1, batches=(256, 512)),
    Config("llama-3.1-8b", "H200", 8, batches=(512,)),
    Config("qwen3-32b", "H200", 1, batches=(256,)),
    Config("qwen3-32b", "H200", 2),
    Config("llama-3.1-70b", "H100-SXM", 4, batches=(256,)),
    Config("llama-3.1-70b", "H200", 2),
    Config("llama-3.1-8b", "B200", 1, batches=(256, 512)),
    Config("qwen3-32b", "B200", 1),
    Config("qwen3-8b", "H100-SXM", 1, fit=False, batches=(256, 512)),
    Config("qwen3-8b", "H200", 4, fit=False, batches=(256,)),
    Config("qwen3-32b", "H100-SXM", 4, fit=False, batches=(256,)),
    Config("llama-3.1-70b", "B200", 2, fit=False, batches=(256,)),
    Config("llama-3.1-70b", "H200", 8, fit=False, batches=(256, 512)),
]
# MoE rows at 1024 tokens of context: (model, gpu, TP GPUs, attention DP, batches per attention
# rank, whole experts per GPU: EP = TP, else every expert sliced over the TP GPUs, fit).
# Their own target (MOE_TARGET) for Qwen3's GQA MoE: one fused-MoE row per generation fits AIC's
# measured grouped GEMMs only so closely (runtime/catalog/perf.yaml `moe`). DeepSeek-V3 (MLA,
# FP8 block-scaled checkpoint) runs BF16 and FP8 KV caches and is judged at the decode target.
MOE_CONFIGS = [
    ("qwen3-235b-a22b", "H200", 4, 1, (8, 32, 128), True, True),
    ("qwen3-235b-a22b", "H200", 8, 1, (8, 32, 128, 512), True, True),
    ("qwen3-235b-a22b", "H200", 8, 8, (8, 64, 128, 512, 1024), True, True),
    ("qwen3-235b-a22b", "H200", 4, 4, (128,), True, True),
    ("qwen3-235b-a22b", "H200", 8, 4, (128,), True, True),
    # Experts sliced over the TP GPUs (SGLang without --ep-size; AIC moe_tp = TP, moe_ep 1).
    ("qwen3-235b-a22b", "H200", 4, 1, (8, 32, 128), False, True),
    ("qwen3-235b-a22b", "H200", 8, 1, (8, 128, 512), False, True),
    ("qwen3-235b-a22b", "H200", 8, 8, (8, 40, 128, 512), False, True),
    ("qwen3-235b-a22b", "H200", 4, 4, (128,), False, True),
    # MLA MoE: DeepSeek-V3 on one 8-GPU node, attention DP8 or TP8, both expert layouts.
    ("deepseek-v3", "H200", 8, 8, (1, 8, 32, 128, 256), True, True),
    ("deepseek-v3", "H200", 8, 1, (1, 8, 32, 128, 512), True, True),
    ("deepseek-v3", "H200", 8, 1, (8, 32, 128), False, True),
    ("deepseek-v3", "H200", 8, 8, (8, 64, 128), False, False),
    ("deepseek-v3", "H200", 8, 4, (16, 64, 256), True, False),
    ("deepseek-v3", "B200", 8, 8, (8, 64, 256), True, False),
    ("deepseek-v3", "B200", 8, 1, (8, 64, 256), True, False),
]
# DeepSeek-V3 via DeepEP, FP8 KV (model, gpu, ranks = EP, decodes, prefills, fit); 16: two nodes
DEEPEP_CONFIGS = [
    ("deepseek-v3", "H200", 8, (1, 8, 40, 128, 256), (256, 512, 1024, 2048, 4096), True),
    ("deepseek-v3", "H200", 16, (1, 8, 40, 128, 256), (256, 1024, 4096), False),
]
MLA_MODELS = ("deepseek-v3",)
MOE_TARGET = 0.25
MLA_KV = ("auto", "fp8_e4m3")  # an MLA model's latent cache: BF16, and FP8 (SGLang's common choice)
# (GEMM quantization, KV-cache dtype): BF16; FP8 weights with BF16 KV (SGLang's default); both FP8.
DTYPES = ((None, "auto"), ("fp8", "auto"), ("fp8", "fp8_e4m3"))
AIC_KV = {"auto": "bfloat16", "fp8_e4m3": "fp8"}
BATCHES = (1, 32, 128)
CONTEXTS = (1024, 4096)
PREFILLS = (512, 2048, 8192)
# Points where AIConfigurator's own data is not monotone in the GEMMs' rows M (a prompt's tokens,
# a decode step's batch), so no physics that is can match it: marked and counted apart (its wide
# FP8 gate-ups take 3-4x M=128 at M=256; perf.yaml says which GEMMs). (gpu, quant, phase, M).
AIC_ANOMALIES: dict[tuple[str, str | None, str, int], str] = {
    ("H100-SXM", "fp8", "prefill", 512): "h100_sxm fp8_block GEMMs at M=512 no faster than M=2048",
    ("H100-SXM", "fp8", "decode", 256): "h100_sxm fp8_block gate-ups at M=256 slower than M=512",
}

# Runs inside the AIConfigurator venv: AIC's own measured SGLang GEMM latencies (its silicon
# table, which its estimates are built from) at the rows M of the asked shapes (the nearest shape
# the table holds), and per system and dtype how many of its shapes take longer at M = 512 than
# at M = 1024.
_AIC_GEMM_WORKER = r"""
import json, math, sys
from pathlib import Path
import aiconfigurator_core, pandas as pd
root = Path(aiconfigurator_core.__file__).parent / "systems" / "data"
ask = json.load(sys.stdin)
tables, out = {}, {"shapes": [], "non_monotone": []}
def table(system):
    if system not in tables:
        path = root / system / "gemm" / "sglang" / "0.5.14" / "gemm_perf.parquet"
        tables[system] = pd.read_parquet(path)
    return tables[system]
for q in ask["shapes"]:
    df = table(q["system"])
    d = df[df.gemm_dtype == q["dtype"]]
    pairs = set(zip(d.n, d.k))
    n, k = min(pairs, key=lambda p: abs(math.log(p[0] / q["n"])) + abs(math.log(p[1] / q["k"])))
    rows = d[(d.n == n) & (d.k == k)].set_index("m").latency
    out["shapes"].append({**q, "table_n": int(n), "table_k": int(k),
                          "ms": {str(m): float(rows[m]) for m in q["m"] if m in rows.index}})
for system in ask["systems"]:
    df = table(system)
    for dtype in ("bfloat16", "fp8_block"):
        p = df[df.gemm_dtype == dtype].pivot_table(index=["n", "k"], columns="m", values="latency")
        both = p[[512, 1024]].dropna()
        out["non_monotone"].append({"system": system, "dtype": dtype, "shapes": len(both),
                                    "slower_at_512": int((both[512] > both[1024]).sum())})
print(json.dumps(out))
"""
GEMM_ROWS = (256, 512, 1024, 2048)
# Systems whose GPUs have the same compute silicon: H200 is H100's GH100 die (132 SMs, the same
# tensor cores and clocks) with more and faster HBM, so a GEMM at M >= 512 rows, which is bound by
# compute, takes about as long on both. Printed beside a marked point's GEMMs: where H100's entry
# alone is out of line, it is the measurement, not the kernel.
SAME_SILICON = {"h100_sxm": ("h200_sxm",)}


@dataclass(frozen=True)
class Point:
    model: str
    gpu: str
    tp: int
    quant: str | None
    kv: str  # --kv-cache-dtype
    mode: str  # decode | prefill
    batch: int
    tokens: int  # context (decode) or prompt length (prefill)
    attn_dp: int = 1  # MoE rows: attention-DP ranks in the TP group; `batch` is per rank
    moe: bool = False
    ep: int = 1  # MoE rows: expert parallelism (TP, or 1: experts sliced over the TP GPUs)
    fit: bool = True  # the catalogue's constants were fitted on this configuration
    a2a: str = "none"  # MoE rows: how tokens reach whole experts ("deepep": DeepEP)


def aic_anomaly(p: Point) -> str | None:  # why AIC's own data at `p` is out of line, if it is
    return AIC_ANOMALIES.get((p.gpu, p.quant, p.mode, p.batch if p.mode == "decode" else p.tokens))


def step_model(model: str, gpu: str, tp: int, quant: str | None, kv: str = "auto",
               spec: SpecConfig | None = None, attn_dp: int = 1, ep: int = 1, a2a: str = "none",
               catalog: PerfCatalog | None = None) -> StepModel:  # fmt: skip
    shape = _shape(model)
    weights = shape.quantized_weight_bytes(bytes_per_param(quant, "auto"))
    kv_bytes = kv_dtype_bytes(kv, "auto")
    engine = EngineShape(
        tp=tp,
        quantization=quant,
        weight_bytes=weights,
        kv_bytes_per_value=kv_bytes,
        spec=spec,
        attn_dp=attn_dp,
        ep=ep,
        moe_a2a=a2a,
    )
    return StepModel(resolve_gpu(gpu), shape, engine, catalog)


def _shape(model: str) -> ModelShape:
    shape = lookup_model(model)
    if shape is None:
        raise SystemExit(f"model {model!r} is not in the catalogue")
    return shape


def model_ms(point: Point, catalog: PerfCatalog | None = None) -> float:
    physics = step_model(point.model, point.gpu, point.tp, point.quant, point.kv,
                         attn_dp=point.attn_dp, ep=point.ep, a2a=point.a2a,
                         catalog=catalog)  # fmt: skip
    if point.mode == "decode":
        return physics.decode_step_seconds(point.batch * point.attn_dp, point.tokens) * 1e3
    return physics.prefill_seconds(point.tokens, point.batch * point.attn_dp) * 1e3


def grid(quick: bool, only: str | None = None) -> list[Point]:
    points = [p for p in _dense_grid(quick) + _moe_grid(quick) if p.batch <= kv_limit(p)]
    return [p for p in points if only is None or p.model == only]


def _dense_grid(quick: bool) -> list[Point]:
    points: list[Point] = []
    for c in CONFIGS:
        for quant, kv in DTYPES if c.fit else DTYPES[:2]:
            batches = (1, 32) if quick else (*BATCHES, *c.batches)
            for batch in batches:
                # Long contexts with the model's own formats (the KV read grows with both).
                contexts = CONTEXTS if quant is None and not quick else CONTEXTS[:1]
                for context in contexts:
                    points.append(
                        Point(c.model, c.gpu, c.tp, quant, kv, "decode", batch, context, fit=c.fit)
                    )
            if kv != "auto":
                continue  # AIConfigurator has no SGLang context-attention data for an FP8 cache
            for tokens in (2048,) if quick else PREFILLS[0 if c.fit else 1 :]:
                points.append(
                    Point(c.model, c.gpu, c.tp, quant, kv, "prefill", 1, tokens, fit=c.fit)
                )
    return points


def _moe_grid(quick: bool) -> list[Point]:
    points: list[Point] = []
    for model, gpu, tp, dp, batches, whole, fit in MOE_CONFIGS:
        ep = tp if whole else 1
        mla = model in MLA_MODELS
        quant = "fp8" if mla else None  # DeepSeek-V3 ships block-scaled FP8
        for kv in MLA_KV if mla else ("auto",):
            for batch in batches[:2] if quick else batches:
                points.append(
                    Point(model, gpu, tp, quant, kv, "decode", batch, 1024, dp, True, ep, fit)
                )
        if mla and not quick:  # prefill: attention DP ranks prefill a prompt each
            for tokens in (1024, 4096):
                points.append(Point(model, gpu, tp, quant, "auto", "prefill", 1, tokens, dp, True,
                                    ep, fit))  # fmt: skip
    for model, gpu, tp, batches, prompts, fit in DEEPEP_CONFIGS:
        deep = {"attn_dp": tp, "moe": True, "ep": tp, "a2a": "deepep", "fit": fit}
        runs = [("decode", b, 1024) for b in batches] + [("prefill", 1, n) for n in prompts]
        points += [Point(model, gpu, tp, "fp8", "fp8_e4m3", *run, **deep) for run in runs]
    return points


def kv_limit(point: Point) -> int:
    """The most sequences of `point.tokens` an attention rank's KV pool holds: 90% of the GPU's
    memory less its weights (SGLang's default static share is near that), over the KV bytes."""
    physics = step_model(point.model, point.gpu, point.tp, point.quant, point.kv,
                         attn_dp=point.attn_dp, ep=point.ep)  # fmt: skip
    weights = (physics.engine.weight_bytes or 0.0) / point.tp
    free = physics.gpu.memory_gib * 2**30 * 0.9 - weights
    per_rank = free / physics.kv_bytes_per_token  # each GPU holds its share of a token's KV
    return max(0, int(per_rank / (point.tokens + 1)))


def query_aic(python: Path, points: list[Point]) -> list[dict[str, object]]:
    return query_reference(AIC, python, aic_requests(points))


def aic_requests(points: list[Point]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for p in points:
        request: dict[str, object] = {
            "model": AIC_MODELS[p.model],
            "system": AIC_SYSTEMS[p.gpu],
            "mode": "static_gen" if p.mode == "decode" else "static_ctx",
            "isl": p.tokens,
            "batch": p.batch,
            "tp": p.tp // p.attn_dp,  # the references' tp is the attention rank's
            "gemm": AIC_GEMM[p.quant],
            "kv": AIC_KV[p.kv],
        }
        if p.moe:  # dense points keep their cached keys
            request.update(dp=p.attn_dp, moe_ep=p.ep)
            if p.ep == 1:
                request["moe_tp"] = p.tp
            request.update({"a2a": p.a2a} if p.a2a != "none" else {})
        out.append(request)
    return out


def phase_of(p: Point) -> str:
    """The summary's phase: dense decode/prefill, Qwen-style MoE decode, MLA MoE decode."""
    if p.mode == "prefill":
        return "prefill"
    if p.model in MLA_MODELS:
        return "mla"
    return "moe" if p.moe else "decode"


def target_of(phase: str) -> float:
    return {"decode": DECODE_TARGET, "mla": DECODE_TARGET, "moe": MOE_TARGET}.get(
        phase, PREFILL_TARGET
    )


def _label(p: Point) -> str:
    dtype = f"{p.quant or 'bf16'}/{'fp8' if p.kv != 'auto' else 'bf16'}"
    tp = f"{p.tp}/{p.attn_dp}" if p.attn_dp > 1 else str(p.tp)
    model = p.model
    if p.moe:
        short = "dsv3" if p.model in MLA_MODELS else "qwen3-235b"
        model = f"{short} {'DeepEP' if p.a2a != 'none' else 'EP' if p.ep > 1 else 'TP'}"
    return f"{model:<14}{p.gpu:<9}{tp:>4} {dtype:<10}{p.mode:<8}{p.batch:>6}{p.tokens:>7}"


def print_reference_table(points: list[Point], answers: dict[str, list[dict[str, object]]]) -> bool:
    """Both references side by side at every point, the model's difference from each, and a
    mark where the references disagree with each other by more than the phase's target."""
    names = list(answers)
    print(f"\n== runtime/perf vs {' and '.join(names)} (SGLang silicon data) ==")
    head = f"{'model':<14}{'gpu':<9}{'tp':>4} {'w/kv':<10}{'phase':<8}{'batch':>6}{'tokens':>7}"
    head += f"{'set':>5}" + "".join(f"{n + ' ms':>11}" for n in names)
    print(head + f"{'model ms':>10}" + "".join(f"{'vs ' + n.split()[0]:>8}" for n in names))
    diffs: dict[tuple[str, str, str, str], list[float]] = {}
    anomalies: dict[tuple[str, str, str, str], list[float]] = {}
    disagreements: list[str] = []
    versions: dict[str, set[str]] = {n: set() for n in names}
    for i, p in enumerate(points):
        ours, phase, held = model_ms(p), phase_of(p), "fit" if p.fit else "held"
        theirs: dict[str, float] = {}
        for name in names:
            answer = answers[name][i]
            if "error" not in answer:
                theirs[name] = float(str(answer["ms"]))
                versions[name].add(str(answer.get("version")))
        cells = "".join(f"{theirs[n]:>11.2f}" if n in theirs else f"{'n/a':>11}" for n in names)
        rel = "".join(
            f"{ours / theirs[n] - 1:>+8.1%}" if n in theirs else f"{'':>8}" for n in names
        )
        why = aic_anomaly(p)
        marks = [f"* {why}"] if why else []
        if len(theirs) == 2:
            first, second = theirs.values()
            gap = first / second - 1
            if abs(gap) > target_of(phase):
                marks.append(f"references differ {gap:+.0%}")
                disagreements.append(f"{_label(p)}  {names[0]}/{names[1]} {gap:+.1%}")
        for name, value in theirs.items():
            key = (name, held, p.gpu, phase)
            diffs.setdefault(key, []).append(ours / value - 1)
            if why:
                anomalies.setdefault(key, []).append(ours / value - 1)
        errors = [str(answers[n][i]["error"])[:60] for n in names if n not in theirs]
        tail = "  " + "; ".join(marks + errors) if marks or errors else ""
        print(f"{_label(p)}{held:>5}{cells}{ours:>10.2f}{rel}{tail}")
    for name, found in versions.items():
        print(f"{name} SGLang data version(s): {', '.join(sorted(found))}")
    ok = print_summary(diffs, anomalies)
    print(f"\n== points where the references disagree beyond the target ({len(disagreements)}) ==")
    for line in disagreements:
        print(line)
    return ok


def print_summary(
    diffs: dict[tuple[str, str, str, str], list[float]],
    anomalies: dict[tuple[str, str, str, str], list[float]],
) -> bool:
    """Per reference, fit/held-out set, GPU and phase: points within target, median and worst
    absolute difference; the last column counts the misses among the marked AIC anomalies."""
    print(f"\n{'reference':<10}{'set':<6}{'gpu':<10}{'phase':<9}{'within':>9}{'median':>9}"
          f"{'worst':>9}  target  anomalies")  # fmt: skip
    ok = True
    for (name, held, gpu, phase), values in sorted(diffs.items()):
        target = target_of(phase)
        errors = sorted(abs(d) for d in values)
        within = sum(e <= target for e in errors)
        median = errors[len(errors) // 2]
        marked = sum(abs(d) > target for d in anomalies.get((name, held, gpu, phase), []))
        ok = ok and within + marked == len(errors)
        cells = f"{f'{within}/{len(errors)}':>9}{median:>9.1%}{errors[-1]:>9.1%}"
        print(f"{name:<10}{held:<6}{gpu:<10}{phase:<9}{cells}  {target:>6.0%}  "
              f"{f'{marked} missed' if marked else ''}")  # fmt: skip
    print(f"targets (decode and MLA decode {DECODE_TARGET:.0%}, prefill {PREFILL_TARGET:.0%}, "
          f"Qwen MoE decode {MOE_TARGET:.0%}; MoE rows: TP/attention DP, batch per rank): "
          f"{'met' if ok else 'NOT met'}")  # fmt: skip
    return ok


def print_gemm_evidence(python: Path, points: list[Point]) -> None:
    """AIConfigurator's own GEMM table at the marked points: the QKV and output projections of
    each marked model, per M, beside BF16's. Where the table's GEMM takes longer at fewer rows,
    no physics whose time grows with M can meet AIC on both sides."""
    marked = {(p.model, p.gpu, p.tp, p.quant) for p in points if aic_anomaly(p)}
    shapes = []
    for model, gpu, tp, quant in sorted(marked, key=str):
        m = _shape(model)
        qkv = ((m.num_attention_heads + 2 * m.num_kv_heads) * m.head_dim // tp, m.hidden_size)
        out = (m.hidden_size, m.num_attention_heads * m.head_dim // tp)
        systems = [AIC_SYSTEMS[gpu], *SAME_SILICON.get(AIC_SYSTEMS[gpu], ())]
        for system in systems:
            for dtype in ("bfloat16", AIC_GEMM[quant]):
                for name, (n, k) in (("qkv", qkv), ("output", out)):
                    label = f"{model} TP{tp} {name}"
                    shapes.append({"system": system, "dtype": dtype, "n": n, "k": k,
                                   "m": list(GEMM_ROWS), "label": label})  # fmt: skip
    if not shapes:
        return
    ask = {"shapes": shapes, "systems": sorted({s["system"] for s in shapes})}
    done = subprocess.run([python, "-c", _AIC_GEMM_WORKER], input=json.dumps(ask),
                          capture_output=True, text=True, check=True)  # fmt: skip
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    print("\n== AIConfigurator's own GEMM table at the marked points (ms per GEMM, by rows M) ==")
    print(f"{'shape':<30}{'system':<10}{'dtype':<11}{'table n x k':>13}"
          + "".join(f"{f'M={m}':>9}" for m in GEMM_ROWS))  # fmt: skip
    for row in answer["shapes"]:
        ms = [row["ms"].get(str(m)) for m in GEMM_ROWS]
        cells = "".join(f"{v:>9.4f}" if v is not None else f"{'-':>9}" for v in ms)
        size = f"{row['table_n']}x{row['table_k']}"
        steps = [
            f"{a} slower than {b}"
            for a, b, ta, tb in zip(GEMM_ROWS, GEMM_ROWS[1:], ms, ms[1:], strict=False)
            if ta is not None and tb is not None and ta > tb
        ]
        flag = f"  M={', M='.join(steps)}" if steps else ""
        print(f"{row['label']:<30}{row['system']:<10}{row['dtype']:<11}{size:>13}{cells}{flag}")
    for row in answer["non_monotone"]:
        print(f"{row['system']} {row['dtype']}: {row['slower_at_512']} of {row['shapes']} shapes "
              "take longer at M=512 than at M=1024")  # fmt: skip


PROMPT_LENGTHS = (256, 384, 512, 640, 768, 1024, 1536, 2048)


def print_prefill_by_length(python: Path, points: list[Point]) -> None:
    """AIConfigurator's own prefill estimates at the marked configurations, by prompt length,
    FP8 beside BF16, with the model's. Marks where AIC's prefill takes less time for a longer
    prompt, or longer in FP8 than in BF16 at the same length: item 8 requires the model never
    to do either, so it cannot follow AIC there."""
    flagged = [p for p in points if p.mode == "prefill" and aic_anomaly(p)]
    marked = sorted({(p.model, p.gpu, p.tp, p.quant, p.kv) for p in flagged}, key=str)
    if not marked:
        return
    asked = [Point(model, gpu, tp, quant, kv, "prefill", 1, n) for model, gpu, tp, low, kv in marked
             for quant in (low, None) for n in PROMPT_LENGTHS]  # fmt: skip
    aic = {p: float(str(a["ms"])) for p, a in zip(asked, query_aic(python, asked), strict=True)}
    print("\n== AIConfigurator's own prefill at the marked configurations, ms by prompt length ==")
    print(f"{'configuration':<28}{'tokens':>7}{'AIC fp8':>9}{'AIC bf16':>10}{'model':>8}  marks")
    for model, gpu, tp, quant, kv in marked:
        before = None
        for n in PROMPT_LENGTHS:
            low = Point(model, gpu, tp, quant, kv, "prefill", 1, n)
            fp8, bf16 = aic[low], aic[Point(model, gpu, tp, None, kv, "prefill", 1, n)]
            marks = []
            if before is not None and fp8 < before:
                marks.append("faster than the shorter prompt")
            if fp8 > bf16:
                marks.append("FP8 slower than BF16")
            before = fp8
            label = f"{model} {gpu} TP{tp}"
            print(f"{label:<28}{n:>7}{fp8:>9.2f}{bf16:>10.2f}{model_ms(low):>8.2f}  "
                  + "; ".join(marks))  # fmt: skip


def decode_tok_s(figure: PublishedFigure, quant: str | None, algorithm: str | None,
                 catalog: PerfCatalog | None = None) -> float:  # fmt: skip
    """Output tokens/s of one request (or `figure.batch` requests, per request) at `context`."""
    target = _shape(figure.model)
    spec = None
    if algorithm:
        draft = lookup_model(figure.draft) if figure.draft else None
        spec = resolve_spec(algorithm, target, draft)
    physics = step_model(figure.model, figure.gpu, figure.tp, quant, "auto", spec, catalog=catalog)
    if spec is None:
        return 1.0 / physics.decode_step_seconds(figure.batch, figure.context)
    # A verify step checks every draft token of each sequence and includes the draft passes.
    verify = StepWork(
        decode_seqs=figure.batch,
        decode_tokens=figure.batch * spec.shape.draft_tokens,
        decode_context=figure.batch * figure.context,
        draft_passes=spec.shape.num_steps,
    )
    return spec.accept_length / physics.step_seconds(verify)


def published_model_value(figure: PublishedFigure, catalog: PerfCatalog | None = None) -> float:
    """The model's value of a published figure: a speed, or a ratio of two formats' speeds."""
    if figure.metric == "ratio":
        return decode_tok_s(figure, figure.quantization, None, catalog) / decode_tok_s(
            figure, figure.baseline_quantization, None, catalog
        )
    return decode_tok_s(figure, figure.quantization, figure.speculative_algorithm, catalog)


def print_published_table() -> bool:
    print("\n== runtime/perf vs published end-to-end figures ==")
    print(f"{'figure':<28}{'published':>11}{'model':>10}{'diff':>8}  source")
    worst = 0.0
    for figure in perf_catalog().published:
        ours = published_model_value(figure)
        diff = ours / figure.value - 1
        worst = max(worst, abs(diff))
        print(f"{figure.id:<28}{figure.value:>11.2f}{ours:>10.2f}{diff:>+8.1%}  {figure.source}")
    ok = worst <= PUBLISHED_TARGET
    print(f"worst {worst:.1%} (target {PUBLISHED_TARGET:.0%}: {'met' if ok else 'NOT met'})")
    return ok


def print_algorithms() -> None:
    """Same model, GPU and batch: what each algorithm's default shape gives (not a target)."""
    print("\n== speculative algorithms, Llama-3.1-8B on H100-SXM, batch 1, context 1024 ==")
    print(f"{'algorithm':<11}{'draft':<22}{'shape':<10}{'accept len':>11}{'tok/s':>9}")
    base = PublishedFigure(id="x", model="llama-3.1-8b", gpu="H100-SXM", metric="x", value=1,
                           source="")  # fmt: skip
    rows = [
        (None, None),
        ("EAGLE", "eagle-llama-3-8b"),
        ("EAGLE3", "eagle3-llama-3.1-8b"),
        ("STANDALONE", "llama-3.2-1b"),
        ("NGRAM", None),
        ("NEXTN", None),
    ]
    for algorithm, draft in rows:
        figure = base.model_copy(update={"draft": draft})
        tok_s = decode_tok_s(figure, None, algorithm)
        if algorithm is None:
            print(f"{'none':<11}{'':<22}{'':<10}{1.0:>11.2f}{tok_s:>9.1f}")
            continue
        spec = resolve_spec(algorithm, _shape("llama-3.1-8b"), lookup_model(draft or ""))
        shape = f"{spec.shape.num_steps},{spec.shape.topk},{spec.shape.draft_tokens}"
        line = f"{algorithm:<11}{draft or '-':<22}{shape:<10}{spec.accept_length:>11.2f}"
        print(line + f"{tok_s:>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few points per configuration")
    parser.add_argument("--no-aic", action="store_true", help="skip the references (part 2 only)")
    parser.add_argument("--only", help="the configurations of one catalogue model")
    args = parser.parse_args()
    for name in {c.model for c in CONFIGS}:
        assert get_model(name) is not None, name
    _ = [get_gpu(gpu) for gpu in AIC_SYSTEMS]  # every reference system is a catalogue GPU
    ok = True
    if not args.no_aic:
        points = grid(args.quick, args.only)
        pythons = {ref.name: ensure(ref) for ref in REFERENCES}
        asked = aic_requests(points)
        answers = {ref.name: query_reference(ref, pythons[ref.name], asked) for ref in REFERENCES}
        ok = print_reference_table(points, answers)
        print_gemm_evidence(pythons[AIC.name], points)
        print_prefill_by_length(pythons[AIC.name], points)
    ok = print_published_table() and ok
    print_algorithms()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
