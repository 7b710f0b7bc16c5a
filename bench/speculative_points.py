"""The published speculative-decoding points of bench/speculative.py: each row of
``runtime/catalog/speculative/published_points.tsv`` read as a Point (its target, draft,
workload, draft shape, batch, GPU and TP, and what the source measured), with the targets the
catalogue lacks built from their public config.json.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from runtime.perf.hardware import ModelShape, lookup_model
from runtime.perf.spec import SpecShape

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "runtime" / "catalog" / "speculative" / "published_points.tsv"


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
