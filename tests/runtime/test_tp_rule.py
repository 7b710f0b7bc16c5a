"""SGLang's TP rule has one home (``runtime.rules.parallel``): the optimizer builds no TP it
refuses, and every user of the rule agrees with it."""

from __future__ import annotations

from runtime.catalog import get_gpu, get_model, list_models
from runtime.optimize import OptimizeRequest, Slo, Traffic, optimize
from runtime.optimize.shapes import tp_choices
from runtime.rules.parallel import heads_allow_tp, suggest_tp, tp_works, working_tps
from runtime.spec import Architecture


def _odd_kv_arch() -> Architecture:
    """24 attention heads over 3 KV heads: TP 2, 4 and 8 divide the attention heads, but the
    KV heads neither split evenly over them nor replicate evenly, so only TP 1 runs."""
    base = get_model("llama-3.1-8b")
    assert base is not None
    data = Architecture.model_validate(base.model_dump(include=set(Architecture.model_fields)))
    return data.model_copy(update={"num_attention_heads": 24, "num_kv_heads": 3})


def test_the_optimizer_offers_only_the_tps_the_kv_heads_allow() -> None:
    arch = get_model("llama-3.1-8b")
    assert arch is not None
    odd = arch.model_copy(update={"num_attention_heads": 24, "num_kv_heads": 3})
    assert tp_choices(get_gpu("H100-SXM"), odd) == [1]
    assert tp_choices(get_gpu("H100-SXM"), arch) == [1, 2, 4, 8]


def test_no_candidate_of_the_optimizer_uses_a_tp_the_heads_refuse() -> None:
    request = OptimizeRequest(
        model="acme/odd-heads-8b",
        architecture=_odd_kv_arch(),
        traffic=Traffic(input_tokens=512, output_tokens=128, rate_rps=40),
        slo=Slo(ttft_p90_s=2.0, itl_p90_s=0.1),
        gpus=("H100-SXM",),
    )
    result = optimize(request)
    assert result.ranked
    assert {c.spec.parallelism.tp for c in result.ranked} == {1}


def test_every_user_of_the_rule_agrees_with_it() -> None:
    for arch in list_models():
        heads = (arch.num_attention_heads, arch.num_kv_heads)
        allowed = working_tps(*heads, range(1, 17))
        assert allowed == [t for t in range(1, 17) if tp_works(arch, t)]
        assert all(heads_allow_tp(*heads, t) for t in suggest_tp(arch, 3, 16) if t > 1)
