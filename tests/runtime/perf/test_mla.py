"""runtime/perf: multi-head latent attention (DeepSeek-V3/R1 class) at decode.

MLA caches one latent vector per token and layer, which every head of a rank scores and sums
(the absorbed form SGLang decodes with), so its decode attention is bound by the KV read only
where few heads share a GPU and by its FLOPs where many do. The reference figures are
AIConfigurator 0.12's own per-op SGLang 0.5.14 table (``mla/sglang/0.5.14/
generation_mla_perf.parquet``, per layer), quoted beside each test. Figures are the model's
deterministic output (simulated seconds).
"""

from __future__ import annotations

import pytest

from runtime.catalog.perf import PerfCatalog, perf_catalog
from runtime.perf.hardware import ModelShape, lookup_model, resolve_gpu
from runtime.perf.quant import bytes_per_param, kv_dtype_bytes
from runtime.perf.step import EngineShape, StepModel


def shape(model_id: str) -> ModelShape:
    found = lookup_model(model_id)
    assert found is not None
    return found


DSV3 = shape("deepseek-v3")


def dsv3(
    gpu: str,
    kv: str = "auto",
    attn_dp: int = 8,
    ep: int = 8,
    moe_a2a: str = "none",
    tp: int = 8,
    catalog: PerfCatalog | None = None,
) -> StepModel:
    """DeepSeek-V3 as shipped (block FP8) on one 8-GPU node (or `tp` GPUs over nodes of 8)."""
    weights = DSV3.quantized_weight_bytes(bytes_per_param("fp8", "auto"))
    engine = EngineShape(
        tp=tp,
        quantization="fp8",
        weight_bytes=weights,
        kv_bytes_per_value=kv_dtype_bytes(kv, "auto"),
        attn_dp=attn_dp,
        ep=ep,
        moe_a2a=moe_a2a,
    )
    return StepModel(resolve_gpu(gpu), DSV3, engine, catalog)


def attention_ms(model: StepModel, batch_per_rank: int, context: int) -> float:
    """What `context` more tokens of cache cost one decode step of `batch_per_rank` sequences
    per attention rank (the rest of the step does not depend on the context)."""
    batch = batch_per_rank * model.attn_dp
    longer = model.decode_step_seconds(batch, context + 1024)
    return (longer - model.decode_step_seconds(batch, 1024)) * 1e3


def test_mla_caches_fewer_bytes_per_token_than_gqa_with_as_many_heads() -> None:
    gqa = ModelShape(**{**DSV3.__dict__, "kv_lora_rank": None, "qk_rope_head_dim": None})
    assert DSV3.kv_bytes_per_token(2.0) < gqa.kv_bytes_per_token(2.0) / 50


def test_mla_attention_with_every_head_on_the_gpu_is_bound_by_its_flops() -> None:
    """H200, BF16 latent cache, 128 heads (attention DP8), 64 sequences: AIC's per-op table
    gives 0.048 ms per layer at 1024 tokens and 0.134 ms at 4096, so 3072 more tokens cost
    61 layers x 0.086 = 5.2 ms; reading those bytes at the GQA kernels' share is 1.6 ms."""
    assert attention_ms(dsv3("H200"), 64, 3072) == pytest.approx(5.2, rel=0.25)


def test_an_fp8_latent_cache_is_slower_on_hopper_and_faster_on_blackwell() -> None:
    """AIC's per-op table at 128 heads, batch 128 x 4096 tokens, per layer: H200 BF16 0.261 ms,
    FP8 1.134 ms (a dequantizing path); B200 BF16 0.148 ms, FP8 0.090 ms (TRT-LLM's FP8 MLA)."""
    h200_bf16, h200_fp8 = (attention_ms(dsv3("H200", kv), 128, 3072) for kv in ("auto", "fp8_e4m3"))
    b200_bf16, b200_fp8 = (attention_ms(dsv3("B200", kv), 128, 3072) for kv in ("auto", "fp8_e4m3"))
    assert h200_fp8 > 2 * h200_bf16
    assert b200_fp8 < b200_bf16


def test_mla_attention_at_tp8_reads_the_whole_latent_cache_on_every_gpu() -> None:
    """TP8 splits the 128 heads (16 per GPU) but not the latent cache: each GPU reads every
    sequence's latent vectors, where attention DP8 reads an eighth of them with all heads."""
    tp8, dp8 = dsv3("H200", attn_dp=1), dsv3("H200", attn_dp=8)
    # 512 sequences in all, 4096 more tokens of context each.
    assert attention_ms(tp8, 512, 4096) > attention_ms(dp8, 64, 4096)


@pytest.mark.parametrize(
    ("attn_dp", "ep", "kv", "batch", "aic_ms"),
    [
        # AIConfigurator 0.12 h200_sxm SGLang 0.5.14 static_gen, DeepSeek-V3 (FP8 block) on 8
        # GPUs, 1024 tokens of context, batch per attention rank (bench/calibration.py's fit
        # rows); aisimulate 0.13 gives the same figures.
        (8, 8, "auto", 128, 65.04),
        (8, 8, "fp8_e4m3", 256, 132.09),
        (1, 8, "auto", 512, 55.01),
        (1, 1, "auto", 128, 31.28),
    ],
)
def test_deepseek_v3_decode_is_calibrated_against_aiconfigurator(
    attn_dp: int, ep: int, kv: str, batch: int, aic_ms: float
) -> None:
    ours = dsv3("H200", kv, attn_dp, ep).decode_step_seconds(batch * attn_dp, 1024) * 1e3
    assert ours == pytest.approx(aic_ms, rel=0.20)


def test_deepseek_v3_expert_layouts_rank_as_the_references_rank_them() -> None:
    """H200, attention DP8, 128 sequences per rank: AIC and aisimulate give experts sliced over
    the 8 GPUs 57.2 ms and whole experts per GPU (EP8) 65.0 ms per step."""
    sliced = dsv3("H200", attn_dp=8, ep=1).decode_step_seconds(1024, 1024)
    whole = dsv3("H200", attn_dp=8, ep=8).decode_step_seconds(1024, 1024)
    assert sliced < whole


# AIConfigurator 0.12's DeepEP path, the one its own search prices attention DP8 x EP8 with
# (deepep_ht prefill, deepep_ll decode, its WideEP MLA and MoE tables; ``cli_estimate`` keeps
# intra-node EP on the fused path, so these come from its estimator with the DeepEP coverage its
# search resolves): DeepSeek-V3, H200, FP8 KV, ms per step, prefill per rank / decode per rank.
DEEPEP_PREFILL = [(1024, 176.4), (2048, 299.3), (4096, 527.0)]
DEEPEP_DECODE = [(40, 36.6), (128, 46.7)]


@pytest.mark.parametrize(("tokens", "aic_ms"), DEEPEP_PREFILL)
def test_deepep_prefill_of_every_rank_within_calibration(tokens: int, aic_ms: float) -> None:
    model = dsv3("H200", "fp8_e4m3", moe_a2a="deepep")
    assert model.prefill_seconds(tokens, batch=8) * 1e3 == pytest.approx(aic_ms, rel=0.15)


@pytest.mark.parametrize(("batch", "aic_ms"), DEEPEP_DECODE)
def test_deepep_decode_within_calibration(batch: int, aic_ms: float) -> None:
    model = dsv3("H200", "fp8_e4m3", moe_a2a="deepep")
    assert model.decode_step_seconds(batch * 8, 1024) * 1e3 == pytest.approx(aic_ms, rel=0.15)


def test_deepep_prefills_every_rank_at_least_twice_as_fast_as_the_fused_moe() -> None:
    """AIC: 4096 tokens a rank take 1260 ms through the fused MoE and 527 ms through DeepEP;
    the grouped GEMMs, not the routing, make the difference."""
    fused, deepep = (dsv3("H200", "fp8_e4m3", moe_a2a=a2a) for a2a in ("none", "deepep"))
    assert fused.prefill_seconds(4096, batch=8) > 2 * deepep.prefill_seconds(4096, batch=8)


def test_deepep_sends_each_token_only_where_its_experts_are() -> None:
    """Gathering every rank's tokens on every GPU moves more than sending each token to the
    (at most top-k) GPUs holding its experts."""
    fused, deepep = (dsv3("H200", "fp8_e4m3", moe_a2a=a2a) for a2a in ("none", "deepep"))
    assert deepep._moe_comm_seconds(8192) < fused._moe_comm_seconds(8192)


def _slower_nic(factor: float) -> PerfCatalog:
    """The shipped catalogue with every NIC `factor` times slower."""
    cat = perf_catalog()
    nics = tuple(n.model_copy(update={"gbs": n.gbs / factor}) for n in cat.kv_transfer.nics)
    return cat.model_copy(update={"kv_transfer": cat.kv_transfer.model_copy(update={"nics": nics})})


def test_deepep_across_two_nodes_is_priced_by_the_nic() -> None:
    """DP16 x EP16 over two 8-GPU nodes: the tokens bound for the other node's experts cross
    the scale-out NIC (50 GB/s a GPU on H200, at the share DeepEP's RDMA reaches), far slower
    than NVLink, so a slower NIC slows the two-node engine and not the one-node one. A prompt
    step (DeepEP's normal mode) sends a token once to the other node; a decode step (its
    low-latency mode) once per expert there."""
    two_node = {"attn_dp": 16, "ep": 16, "moe_a2a": "deepep", "tp": 16}
    one_node = {"attn_dp": 8, "ep": 8, "moe_a2a": "deepep"}
    tokens = 16 * 4096  # every rank prefills a 4096-token chunk
    wide = dsv3("H200", "fp8_e4m3", **two_node)
    crossing = tokens / 16 * DSV3.hidden_size * 3 * (1 - 0.5**8)  # FP8 out, BF16 back, per GPU
    assert wide.moe is not None
    nic = perf_catalog().kv_transfer.nic_gbs(90) * 1e9 * wide.moe.nic_share
    per_layer = crossing / nic + 2 * wide.link_latency
    assert wide._moe_comm_seconds(tokens) == pytest.approx(DSV3.num_layers * per_layer)
    # A decode step runs DeepEP's low-latency mode: one copy per expert on the other node (4 of 8).
    decode = 16 * 256 / 16 * DSV3.hidden_size * 3 * 4 / nic + 2 * wide.link_latency
    assert wide._moe_comm_seconds(16 * 256, decode_only=True) == pytest.approx(
        DSV3.num_layers * decode
    )
    slow = dsv3("H200", "fp8_e4m3", **two_node, catalog=_slower_nic(2))
    assert slow._moe_comm_seconds(tokens) > 1.5 * wide._moe_comm_seconds(tokens)
    narrow = dsv3("H200", "fp8_e4m3", **one_node)
    narrow_slow = dsv3("H200", "fp8_e4m3", **one_node, catalog=_slower_nic(2))
    assert narrow_slow._moe_comm_seconds(tokens / 2) == narrow._moe_comm_seconds(tokens / 2)
