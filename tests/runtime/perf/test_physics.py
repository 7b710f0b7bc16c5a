"""runtime/perf: speculative, quantization and parallelism physics, as examples and properties.

Every figure here is the model's own deterministic output (simulated seconds), never a wall-clock
measurement.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.catalog import get_gpu, get_model
from runtime.catalog.perf import perf_catalog
from runtime.memory import memory_fit
from runtime.perf.hardware import ModelShape, lookup_model, resolve_gpu
from runtime.perf.quant import bytes_per_param
from runtime.perf.spec import (
    Curve,
    SpecConfig,
    SpecShape,
    chain_rate,
    default_shape,
    expected_accept_length,
    resolve_spec,
)
from runtime.perf.step import EngineShape, StepModel, StepWork
from runtime.spec import RuntimeSpec
from runtime.topology import engine_groups

examples = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TARGETS = ["llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "qwen3-32b", "mistral-7b", "gpt-oss-20b"]
FP8_GPUS = ["H100-SXM", "H200", "B200", "L40S"]


def shape(model_id: str) -> ModelShape:
    found = lookup_model(model_id)
    assert found is not None
    return found


def physics(
    model: str,
    gpu: str,
    *,
    tp: int = 1,
    quant: str | None = None,
    kv: float = 2.0,
    spec: SpecConfig | None = None,
) -> StepModel:
    target = shape(model)
    weights = target.quantized_weight_bytes(bytes_per_param(quant, "auto"))
    engine = EngineShape(
        tp=tp, quantization=quant, weight_bytes=weights, kv_bytes_per_value=kv, spec=spec
    )
    return StepModel(resolve_gpu(gpu), target, engine)


def tokens_per_second(model: StepModel, batch: int = 1, context: int = 1024) -> float:
    """Output tokens/s of one request in a batch of `batch` (speculation included)."""
    spec = model.engine.spec
    if spec is None:
        return 1.0 / model.decode_step_seconds(batch, context)
    verify = StepWork(
        decode_seqs=batch,
        decode_tokens=batch * spec.shape.draft_tokens,
        decode_context=batch * context,
        draft_passes=spec.shape.num_steps,
    )
    return spec.accept_length / model.step_seconds(verify)


# ---- speculative decoding ------------------------------------------------------------------
def test_sglang_default_shapes_depend_on_the_architecture() -> None:
    assert default_shape("EAGLE3", "LlamaForCausalLM") == SpecShape(5, 4, 8)
    assert default_shape("EAGLE", "Qwen3ForCausalLM") == SpecShape(3, 1, 4)
    assert default_shape("NGRAM", "LlamaForCausalLM").draft_tokens == 12
    assert default_shape("EAGLE", "Qwen3ForCausalLM", num_steps=2, topk=1, draft_tokens=9) == (
        SpecShape(2, 1, 3)  # topk 1 forces num_steps + 1 draft tokens
    )


def test_eagle3_ngram_and_eagle_differ_as_published() -> None:
    """SGLang's docs: Llama-3.1-8B on one H100, 158 / 244 (EAGLE-2) / 373 (EAGLE-3) tok/s, shape
    not stated (context rows of the published table). At SGLang's default Llama shape the
    model is within 25% and never faster than published; EAGLE-3 beats EAGLE-2."""
    target = shape("llama-3.1-8b")
    base = tokens_per_second(physics("llama-3.1-8b", "H100-SXM"))
    speeds = {}
    for algorithm, draft in (
        ("EAGLE", "eagle-llama-3-8b"),
        ("EAGLE3", "eagle3-llama-3.1-8b"),
        ("NGRAM", None),
    ):
        spec = resolve_spec(algorithm, target, lookup_model(draft) if draft else None)
        speeds[algorithm] = tokens_per_second(physics("llama-3.1-8b", "H100-SXM", spec=spec))
    assert base < speeds["NGRAM"] and base < speeds["EAGLE"] < speeds["EAGLE3"]
    assert base == pytest.approx(158.34, rel=0.2)
    for algorithm, published in (("EAGLE", 244.10), ("EAGLE3", 373.25)):
        assert 0.75 * published <= speeds[algorithm] <= 1.0 * published, algorithm


def test_every_cited_decode_figure_is_within_20_percent() -> None:
    for figure in perf_catalog().published:
        if figure.metric != "decode_tok_s":
            continue
        spec = None
        if figure.speculative_algorithm:
            draft = lookup_model(figure.draft) if figure.draft else None
            spec = resolve_spec(figure.speculative_algorithm, shape(figure.model), draft)
        model = physics(
            figure.model, figure.gpu, tp=figure.tp, quant=figure.quantization, spec=spec
        )
        speed = tokens_per_second(model, figure.batch, figure.context)
        assert speed == pytest.approx(figure.value, rel=0.2), figure.id


def test_draft_cost_follows_the_draft_models_size() -> None:
    target = shape("llama-3.1-8b")
    small = resolve_spec("STANDALONE", target, shape("qwen3-0.6b"))
    large = resolve_spec("STANDALONE", target, shape("llama-3.2-1b"))
    model_small = physics("llama-3.1-8b", "H100-SXM", spec=small)
    model_large = physics("llama-3.1-8b", "H100-SXM", spec=large)
    assert model_small.draft_seconds(1, 1024) < model_large.draft_seconds(1, 1024)
    # EAGLE-2 heads reuse the target's 128k-vocabulary LM head; EAGLE-3 heads carry a small one.
    eagle = physics(
        "llama-3.1-8b", "H100-SXM", spec=resolve_spec("EAGLE", target, shape("eagle-llama-3-8b"))
    )
    eagle3 = physics(
        "llama-3.1-8b",
        "H100-SXM",
        spec=resolve_spec("EAGLE3", target, shape("eagle3-llama-3.1-8b")),
    )
    assert eagle3.draft_seconds(1, 1024) < eagle.draft_seconds(1, 1024)


def test_tree_verification_cost_grows_with_draft_tokens() -> None:
    target = shape("llama-3.1-8b")
    times = []
    for tokens in (4, 8, 16, 32):
        spec = resolve_spec(
            "EAGLE3", target, shape("eagle3-llama-3.1-8b"), num_steps=3, topk=4, draft_tokens=tokens
        )
        model = physics("llama-3.1-8b", "H100-SXM", spec=spec)
        work = StepWork(decode_seqs=8, decode_tokens=8 * tokens, decode_context=8 * 1024)
        times.append(model.step_seconds(work))
    assert times == sorted(times) and times[0] < times[-1]


@examples
@given(
    acceptance=st.floats(0.05, 0.95),
    more=st.floats(0.0, 0.5),
    steps=st.integers(1, 8),
    topk=st.integers(1, 8),
    extra_tokens=st.integers(0, 32),
    decay=st.floats(0.5, 1.0),
)
def test_a_longer_accepted_draft_never_lowers_speed(
    acceptance: float, more: float, steps: int, topk: int, extra_tokens: int, decay: float
) -> None:
    shape_ = SpecShape(steps, topk, steps + 1 + (extra_tokens if topk > 1 else 0))
    better = min(0.99, acceptance + more)
    tree = perf_catalog().speculative.fit.tree
    low_curve = Curve(acceptance, acceptance * decay, decay)
    high_curve = Curve(better, better * decay, decay)
    low = expected_accept_length(shape_, low_curve, **tree.model_dump())
    high = expected_accept_length(shape_, high_curve, **tree.model_dump())
    assert 1.0 <= low <= high <= steps + 1
    # The step costs the same whatever is accepted, so tokens/s follows the accept length.
    target = shape("llama-3.1-8b")
    slow = resolve_spec(
        "EAGLE3",
        target,
        shape("eagle3-llama-3.1-8b"),
        num_steps=steps,
        topk=topk,
        draft_tokens=shape_.draft_tokens,
        acceptance=acceptance,
    )
    fast = resolve_spec(
        "EAGLE3",
        target,
        shape("eagle3-llama-3.1-8b"),
        num_steps=steps,
        topk=topk,
        draft_tokens=shape_.draft_tokens,
        acceptance=better,
    )
    speed_slow = tokens_per_second(physics("llama-3.1-8b", "H100-SXM", spec=slow))
    speed_fast = tokens_per_second(physics("llama-3.1-8b", "H100-SXM", spec=fast))
    assert speed_fast >= speed_slow
    # The simulator's sampled chain keeps the same mean.
    rate = chain_rate(low, steps)
    assert sum(rate**i for i in range(steps + 1)) == pytest.approx(low, rel=1e-6)


# (acceptance, more, num_steps, topk, draft tokens, decay): draws the property above found, where
# a hard cut at the budget let a better draft lift a deep node of small true chance over a
# likelier sibling and accept less (e.g. 1.874 -> 1.822; the first, from the issue, on main).
FLIPS = [
    (0.4229820669551948, 0.0007923749777629663, 6, 8, 8, 0.9022847422570177),
    (0.30035203981967185, 0.0034222692635534346, 7, 8, 11, 0.8741689988491781),
    (0.07165152913038476, 0.07656576340442034, 2, 7, 8, 0.8972630039060341),
]


@pytest.mark.parametrize("case", FLIPS)
def test_a_better_draft_accepts_at_least_as_much_with_no_jump(
    case: tuple[float, float, int, int, int, float],
) -> None:
    """SGLang verifies the best-scored nodes of each request's tree; over requests whose draft
    scores vary, a node near the cut is verified some of the time, so the mean accept length
    rises with the curve and moves by little for a little better draft."""
    acceptance, more, steps, topk, tokens, decay = case
    tree = perf_catalog().speculative.fit.tree.model_dump()
    better = acceptance + more
    shape_ = SpecShape(steps, topk, tokens)
    low = expected_accept_length(shape_, Curve(acceptance, acceptance * decay, decay), **tree)
    high = expected_accept_length(shape_, Curve(better, better * decay, decay), **tree)
    assert low <= high <= low + 10 * more * steps, (low, high)


# ---- batching, quantization, parallelism ---------------------------------------------------
@examples
@given(
    model=st.sampled_from(TARGETS),
    gpu=st.sampled_from(["H100-SXM", "H200", "B200", "A100-80GB"]),
    tp=st.sampled_from([1, 2, 4, 8]),
    quant=st.sampled_from([None, "fp8"]),
    batch=st.integers(1, 255),
    more=st.integers(1, 256),
    context=st.integers(16, 32768),
)
def test_batching_slows_each_request_and_raises_total_throughput(
    model: str, gpu: str, tp: int, quant: str | None, batch: int, more: int, context: int
) -> None:
    engine = physics(model, gpu, tp=tp, quant=quant)
    small = engine.decode_step_seconds(batch, context)
    large = engine.decode_step_seconds(batch + more, context)
    assert large >= small  # each request's tokens/s (1 / step) falls or stays
    assert (batch + more) / large > batch / small  # the engine's tokens/s rises


@examples
@given(
    model=st.sampled_from(TARGETS),
    gpu=st.sampled_from(FP8_GPUS),
    tp=st.sampled_from([1, 2, 4]),
    batch=st.integers(1, 512),
    context=st.integers(16, 32768),
    prompt=st.integers(1, 16384),
    kv=st.sampled_from([2.0, 1.0]),
)
def test_fp8_costs_bf16_at_most_its_fixed_per_gemm_overhead(
    model: str, gpu: str, tp: int, batch: int, context: int, prompt: int, kv: float
) -> None:
    """FP8 streams half the bytes at a higher FLOP rate, but each FP8 GEMM pays a fixed cost
    (activation quantization, block scales): a narrow GEMM (a small model at high TP) can come
    out slower than BF16, as in AIConfigurator's measured SGLang GEMM tables, never by more."""
    bf16 = physics(model, gpu, tp=tp, kv=kv)
    fp8 = physics(model, gpu, tp=tp, quant="fp8", kv=kv)
    per_layer = max(0.0, fp8.layer_overhead - bf16.layer_overhead)
    if fp8.moe is not None and bf16.moe is not None:
        # A block-FP8 fused MoE quantizes the routed activations per layer too (issue 27's
        # DeepSeek-V3 rows): the same kind of fixed cost, per MoE layer.
        per_layer += max(0.0, fp8.moe.fixed_us - bf16.moe.fixed_us) * 1e-6
    extra = shape(model).num_layers * per_layer + 1e-12
    assert (
        fp8.decode_step_seconds(batch, context) <= bf16.decode_step_seconds(batch, context) + extra
    )
    assert fp8.prefill_seconds(prompt) <= bf16.prefill_seconds(prompt) + extra


def test_fp8_is_faster_wherever_weights_dominate() -> None:
    for model, gpu, tp in (("llama-3.1-8b", "H100-SXM", 1), ("llama-3.1-70b", "B200", 2)):
        bf16, fp8 = physics(model, gpu, tp=tp), physics(model, gpu, tp=tp, quant="fp8")
        assert fp8.decode_step_seconds(1, 1024) < bf16.decode_step_seconds(1, 1024)
        assert fp8.prefill_seconds(8192) < bf16.prefill_seconds(8192)


def test_quantized_gemms_stream_a_bf16_lm_head() -> None:
    bf16 = physics("llama-3.1-8b", "H100-SXM")
    fp8 = physics("llama-3.1-8b", "H100-SXM", quant="fp8")
    llama = shape("llama-3.1-8b")
    assert bf16.head_bytes == 0.0  # part of the BF16 body
    assert fp8.head_bytes == llama.vocab_size * llama.hidden_size * 2
    assert fp8.head_bandwidth == bf16.gemm_bandwidth


def test_fp8_gain_on_an_8b_model_is_practical_not_the_byte_ratio() -> None:
    bf16 = physics("llama-3.1-8b", "H100-SXM").decode_step_seconds(1, 1024)
    fp8 = physics("llama-3.1-8b", "H100-SXM", quant="fp8").decode_step_seconds(1, 1024)
    assert 1.2 < bf16 / fp8 < 1.6  # Baseten (Mistral-7B, H100): ~1.33x; AIConfigurator: ~1.5x


def test_quantized_weights_keep_a_bf16_embedding_and_lm_head() -> None:
    llama70 = shape("llama-3.1-70b")
    embedding = 2 * llama70.vocab_size * llama70.hidden_size * 2  # two BF16 matrices, ~2.1 GB
    fp8 = llama70.quantized_weight_bytes(1.0)
    assert fp8 == pytest.approx(llama70.params_b * 1e9 + embedding / 2, rel=1e-9)
    spec = RuntimeSpec.model_validate(
        {
            "model": {"source": "meta-llama/Llama-3.1-70B-Instruct"},
            "hardware": {"gpu": "H100-SXM"},
            "quantization": {"method": "fp8"},
            "parallelism": {"tp": 4},
        }
    )
    arch = get_model("llama-3.1-70b")
    assert arch is not None
    fit = memory_fit(spec, get_gpu("H100-SXM"), arch, engine_groups(spec)[0])
    body = llama70.params_b * 1e9 - embedding / 2  # FP8 at 1.02 bytes with its scales
    assert fit.weights * 4 == pytest.approx(body * 1.02 + embedding, rel=1e-6)


def test_tensor_parallel_speedup_pays_two_all_reduces_per_layer() -> None:
    one = physics("llama-3.1-8b", "H100-SXM").decode_step_seconds(1, 1024)
    two = physics("llama-3.1-8b", "H100-SXM", tp=2).decode_step_seconds(1, 1024)
    # AIConfigurator's SGLang data: 6.61 / 4.09 ms = 1.62x; the all-reduce latency now comes from
    # its custom all-reduce tables, so TP2 sits a little nearer the ideal 2x.
    assert 1.2 < one / two < 1.8
    # A PCIe GPU's all-reduce costs far more than NVLink's, from the interconnect catalogue.
    h100 = physics("llama-3.1-8b", "H100-SXM", tp=4).allreduce_seconds(64)
    l40s = physics("llama-3.1-8b", "L40S", tp=4).allreduce_seconds(64)
    assert l40s > 2 * h100


def test_an_fp8_kv_cache_reads_fewer_bytes_at_long_context() -> None:
    for gpu in ("H100-SXM", "B200"):
        bf16 = physics("llama-3.1-8b", gpu).decode_step_seconds(64, 32768)
        fp8 = physics("llama-3.1-8b", gpu, kv=1.0).decode_step_seconds(64, 32768)
        assert fp8 < bf16
    # ...but on Blackwell quantizing K and V on write is a fixed cost one short request pays.
    short_bf16 = physics("llama-3.1-8b", "B200").decode_step_seconds(1, 256)
    assert physics("llama-3.1-8b", "B200", kv=1.0).decode_step_seconds(1, 256) > short_bf16


def test_attention_kernels_differ_by_generation() -> None:
    catalog = perf_catalog()
    # Blackwell's FP8-KV decode kernel reaches more of its bandwidth than Hopper's.
    assert catalog.attention_bandwidth(1.0, 100) > catalog.attention_bandwidth(1.0, 90)
    assert catalog.attention_compute_share(100) != catalog.attention_compute_share(90)


def test_kv_transfer_link_figures_come_from_the_catalogue() -> None:
    transfer = perf_catalog().kv_transfer
    assert all(row.source for row in transfer.nics)
    assert all(row.source for row in transfer.backends)
    assert transfer.nic_gbs(100) > transfer.nic_gbs(90) > transfer.nic_gbs(80)
    assert transfer.backend(None).name == "mooncake"
    assert transfer.backend("fake").efficiency == 0.0


def test_catalogue_constants_carry_their_sources() -> None:
    catalog = perf_catalog()
    assert all(row.source for row in catalog.kernels)
    assert all(row.source for row in catalog.attention)
    assert all(row.source for row in catalog.attention_compute)
    assert all(row.source for row in catalog.speculative.algorithms.values())
    assert all(figure.source.startswith("https://") for figure in catalog.published)
    assert catalog.kernel(90, "fp8", "H200").gpu == "H200"
    assert catalog.kernel(90, "fp4", "H100-SXM").dtype == "bf16"  # no FP4 path on Hopper
