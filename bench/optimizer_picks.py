"""Picks in both vocabularies: a Plinth candidate or an AIConfigurator row as one engine
configuration (``Pick``), and the AIConfigurator jobs that price a pick (``pinned_config``, its own
sweep pinned to the pick; ``disagg_job``, a P/D pick at its exact pools), for bench/optimizer.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.calibration import AIC_MODELS, AIC_SYSTEMS, MLA_MODELS
from runtime import optimize as opt

if TYPE_CHECKING:
    from bench.optimizer import Case

MODELS = AIC_MODELS
MOE = ("qwen3-235b-a22b", "deepseek-v3")
MOE_REPOS = {*MOE, "Qwen/Qwen3-235B-A22B", "deepseek-ai/DeepSeek-V3"}
# Plinth format -> AIConfigurator quant mode (SGLang's FP8 checkpoints are block-scaled).
AIC_GEMM = {"fp8": "fp8_block"}
AIC_KV = {"fp8_e4m3": "fp8"}
PLINTH_GEMM = {"fp8_block": "fp8", "fp8": "fp8", "fp8_static": "fp8"}
PLINTH_KV = {"fp8": "fp8_e4m3"}
# AIConfigurator's DeepEP data for DeepSeek (its SGLang WideEP MLA collectors) is labelled FP8
# block attention and FP8 KV only; its own search sets these labels when it resolves DeepEP
# (moe_comm_resolver), so a DeepEP pick is pinned with them, whatever its KV format.
DEEPEP_LABELS = {"fmha_quant_mode": "fp8_block", "kvcache_quant_mode": "fp8"}


@dataclass(frozen=True)
class Pick:
    """One engine configuration, as either tool picked it."""

    layout: opt.Layout
    speculator: str = "none"
    dp: int = 1  # AIConfigurator's attention data parallelism (inside `layout.tp`'s GPUs)
    experts: str = ""  # MoE: "EP" (whole experts per GPU), "DeepEP" or "MoE-TP" (sliced)

    def describe(self) -> str:
        lay = self.layout
        formats = f"{lay.quantization or 'as shipped'}/KV {lay.kv_dtype}"
        spec = "" if self.speculator == "none" else f" {self.speculator}"
        if self.dp > 1 or self.experts:
            inner = [f"attention DP{self.dp}"] if self.dp > 1 else []
            spec += f" ({', '.join(inner + ([self.experts] if self.experts else []))})"
        if lay.prefill_tp is None:
            return f"agg TP{lay.tp} x{lay.replicas} {formats}{spec}"
        return (
            f"P/D {lay.prefill_replicas}xTP{lay.prefill_tp}:{lay.replicas}xTP{lay.tp} "
            f"{formats}{spec}"
        )


def plinth_pick(candidate: opt.Candidate) -> Pick:
    s = candidate.spec
    d = s.disaggregation
    layout = opt.Layout(
        gpu=s.hardware.gpu,
        tp=(d.decode.tp or s.parallelism.tp) if d.enabled else s.parallelism.tp,
        quantization=s.quantization.method,
        kv_dtype=s.quantization.kv_cache_dtype,
        replicas=d.decode.replicas if d.enabled else s.autoscaling.max_replicas,
        prefill_tp=(d.prefill.tp or s.parallelism.tp) if d.enabled else None,
        prefill_replicas=d.prefill.replicas if d.enabled else 0,
        attn_dp=s.parallelism.attn_dp,
        ep=s.parallelism.ep,
        moe_a2a=s.parallelism.moe_a2a,
    )
    algorithm = s.speculator.algorithm if s.speculator.enabled else "none"
    experts = _experts(layout) if s.model.source in MOE_REPOS else ""
    return Pick(layout, algorithm or "none", dp=s.parallelism.attn_dp, experts=experts)


def _experts(layout: opt.Layout) -> str:
    if layout.moe_a2a == "deepep":
        return "DeepEP"
    return "MoE-TP" if layout.ep == 1 else "EP"


def _row_a2a(case: Case, row: dict[str, Any], prefix: str = "") -> str:
    """How AIConfigurator's search ran the experts of its row: DeepEP ("deepep") where its
    large-EP data covers the tuple, which for DeepSeek-V3 is pure EP with every GPU its own
    attention rank (its resolver then prices DeepEP dispatch, its MoE compute and the WideEP
    MLA tables); else the fused MoE ("none")."""
    gpus = int(row.get(f"{prefix}tp") or 1) * int(row.get(f"{prefix}dp") or 1)
    pure_ep = (
        int(row.get(f"{prefix}moe_ep") or 1) == gpus > 1 == int(row.get(f"{prefix}moe_tp") or 1)
    )
    every_rank = int(row.get(f"{prefix}dp") or 1) == gpus
    return "deepep" if case.model in MLA_MODELS and pure_ep and every_rank else "none"


def _row_ep(row: dict[str, Any], prefix: str = "") -> int | None:
    """AIConfigurator's expert layout as Plinth's EP: 1 when experts are sliced (moe_tp > 1,
    moe_ep 1), else None (EP = TP)."""
    moe_ep = int(row.get(f"{prefix}moe_ep") or 1)
    moe_tp = int(row.get(f"{prefix}moe_tp") or 1)
    return 1 if moe_ep == 1 and moe_tp > 1 else None


def aic_pick(case: Case, mode: str, row: dict[str, Any]) -> Pick:
    """AIConfigurator's row as a Plinth layout (attention DP x TP priced as one TP group)."""
    if mode == "agg":
        return Pick(
            opt.Layout(
                gpu=case.gpu,
                tp=int(row["tp"]) * int(row.get("dp") or 1),
                quantization=PLINTH_GEMM.get(str(row["gemm"])),
                kv_dtype=PLINTH_KV.get(str(row["kvcache"]), "auto"),
                attn_dp=int(row.get("dp") or 1),
                ep=_row_ep(row) if case.model in MOE else 1,
                moe_a2a=_row_a2a(case, row),
            ),
            dp=int(row.get("dp") or 1),
            experts=_experts(opt.Layout(case.gpu, 1, ep=_row_ep(row), moe_a2a=_row_a2a(case, row)))
            if case.model in MOE
            else "",
        )
    return Pick(
        opt.Layout(
            gpu=case.gpu,
            tp=int(row["(d)tp"]) * int(row.get("(d)dp") or 1),
            quantization=PLINTH_GEMM.get(str(row["(d)gemm"])),
            kv_dtype=PLINTH_KV.get(str(row["(d)kvcache"]), "auto"),
            replicas=int(row["(d)workers"]),
            prefill_tp=int(row["(p)tp"]) * int(row.get("(p)dp") or 1),
            prefill_replicas=int(row["(p)workers"]),
            # Plinth's spec holds one attention-DP size for both pools: the decode side's.
            attn_dp=int(row.get("(d)dp") or 1),
            ep=_row_ep(row, "(d)") if case.model in MOE else 1,
            moe_a2a=_row_a2a(case, row, "(d)"),
        ),
        dp=int(row.get("(d)dp") or 1),
    )


def pinned_config(case: Case, pick: Pick, kv_as_shipped: bool) -> dict[str, Any]:
    """An AIConfigurator experiment that sweeps only `pick`'s configuration."""
    lay = pick.layout
    moe = case.model in MOE
    common: dict[str, Any] = {
        "backend_name": "sglang",
        "total_gpus": case.gpus,
        "isl": case.isl,
        "osl": case.osl,
        "ttft": case.ttft_ms,
        "tpot": case.tpot_ms,
    }

    def side(prefix: str, tp: int) -> dict[str, Any]:
        dp = pick.dp if tp % pick.dp == 0 else 1  # attention DP: TP/DP-GPU ranks, DP of them
        out: dict[str, Any] = {
            f"{prefix}num_gpu_candidates": [tp],
            f"{prefix}tp_candidates": [tp // dp],
            f"{prefix}pp_candidates": [1],
            f"{prefix}dp_candidates": [dp],
        }
        if moe:  # whole experts over the TP group (EP = TP), or each sliced over it (MoE TP)
            sliced = lay.ep == 1
            out[f"{prefix}moe_tp_candidates"] = [tp if sliced else 1]
            out[f"{prefix}moe_ep_candidates"] = [1 if sliced else tp]
        return out

    def formats(prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if lay.quantization:
            out[f"{prefix}gemm_quant_mode"] = AIC_GEMM[lay.quantization]
        if lay.kv_dtype != "auto" and not kv_as_shipped:
            out[f"{prefix}kvcache_quant_mode"] = AIC_KV[lay.kv_dtype]
        if lay.moe_a2a == "deepep" and case.model in MLA_MODELS:
            out.update({f"{prefix}{k}": v for k, v in DEEPEP_LABELS.items()})
        return out

    model, system = MODELS[case.model], AIC_SYSTEMS[case.gpu]
    if lay.prefill_tp is None:
        return {"serving_mode": "agg", "model_path": model, "system_name": system, **common,
                **formats(""), **side("agg_", lay.tp)}  # fmt: skip
    return {
        "serving_mode": "disagg",
        "prefill_model_path": model,
        "prefill_system_name": system,
        "prefill_backend_name": "sglang",
        "decode_model_path": model,
        "decode_system_name": system,
        "decode_backend_name": "sglang",
        **common,
        **formats("prefill_"),
        **formats("decode_"),
        **side("prefill_", lay.prefill_tp),
        **side("decode_", lay.tp),
    }


def disagg_job(case: Case, pick: Pick, kv_as_shipped: bool) -> dict[str, Any]:
    """Price a P/D pick with its exact pools (AIConfigurator picks only the decode batch)."""
    lay = pick.layout
    assert lay.prefill_tp is not None
    p_dp = pick.dp if lay.prefill_tp % pick.dp == 0 else 1
    d_dp = pick.dp if lay.tp % pick.dp == 0 else 1
    pools: dict[str, Any] = {
        "prefill_tp_size": lay.prefill_tp // p_dp,
        "prefill_attention_dp_size": p_dp,
        "prefill_num_workers": lay.prefill_replicas,
        "decode_tp_size": lay.tp // d_dp,
        "decode_attention_dp_size": d_dp,
        "decode_num_workers": lay.replicas,
    }
    if case.model in MOE and lay.ep == 1:
        pools.update(prefill_moe_tp_size=lay.prefill_tp, prefill_moe_ep_size=1,
                     decode_moe_tp_size=lay.tp, decode_moe_ep_size=1)  # fmt: skip
    elif case.model in MOE:
        pools.update(prefill_moe_tp_size=1, prefill_moe_ep_size=lay.prefill_tp,
                     decode_moe_tp_size=1, decode_moe_ep_size=lay.tp)  # fmt: skip
    if lay.quantization:
        pools["gemm_quant_mode"] = AIC_GEMM[lay.quantization]
    if lay.kv_dtype != "auto" and not kv_as_shipped:
        pools["kvcache_quant_mode"] = AIC_KV[lay.kv_dtype]
    return {
        "op": "disagg", "model": MODELS[case.model], "system": AIC_SYSTEMS[case.gpu],
        "isl": case.isl, "osl": case.osl, "ttft": case.ttft_ms, "tpot": case.tpot_ms,
        "pools": pools,
    }  # fmt: skip
