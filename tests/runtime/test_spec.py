"""RuntimeSpec parsing: defaults, strictness, stable serialisation, and the cost estimate."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runtime.spec import RuntimeSpec
from runtime.validate import check, estimate, validate
from tests.runtime.conftest import MINIMAL, SpecData


def test_a_model_and_a_gpu_are_enough() -> None:
    spec = RuntimeSpec.model_validate(MINIMAL)
    assert validate(spec) == []
    assert spec.parallelism.tp == 1 and spec.routing.policy == "cache_aware"
    assert spec.runtime.engine_image == "lmsysorg/sglang:v0.5.23"
    assert spec.served_model_name == "meta-llama/Llama-3.1-8B-Instruct"


def test_gpu_names_are_stored_as_catalogue_ids(spec_data: SpecData) -> None:
    spec = RuntimeSpec.model_validate(spec_data(hardware={"gpu": "h100"}))
    assert spec.hardware.gpu == "H100-SXM"


def test_parsing_is_strict(spec_data: SpecData) -> None:
    with pytest.raises(ValidationError):
        RuntimeSpec.model_validate(spec_data(parallelism={"tp": "2"}))
    with pytest.raises(ValidationError):
        RuntimeSpec.model_validate(spec_data(routing={"policy": "cache_aware", "extra": 1}))


def test_content_hash_is_stable_and_sensitive(spec_data: SpecData) -> None:
    one = RuntimeSpec.model_validate(spec_data())
    same = RuntimeSpec.model_validate({"hardware": {"gpu": "H100-SXM"}, **MINIMAL})
    other = RuntimeSpec.model_validate(spec_data(parallelism={"tp": 2}))
    assert one.content_hash() == same.content_hash()
    assert one.content_hash() != other.content_hash()
    assert len(one.content_hash()) == 64


def test_a_field_added_at_its_default_leaves_the_hash_as_it_was(spec_data: SpecData) -> None:
    """A later version's new setting, at its default, must not change a stored revision's hash:
    re-applying unchanged settings after an upgrade is no new revision (and no rollout), and the
    quality gate that revision passed still counts. A field set away from its default does."""

    class Later(RuntimeSpec):
        new_setting: int = 7

    data = spec_data(parallelism={"tp": 2})
    now = RuntimeSpec.model_validate(data)
    assert Later.model_validate(data).content_hash() == now.content_hash()
    assert Later.model_validate({**data, "new_setting": 8}).content_hash() != now.content_hash()
    assert Later.model_validate({**data, "new_setting": 7}).content_hash() == now.content_hash()


def test_field_names_are_stable() -> None:
    """Stored revisions depend on these names; renaming one is a migration, not a refactor."""
    dumped = RuntimeSpec.model_validate(MINIMAL).model_dump(mode="json")
    assert list(dumped) == [
        "model", "hardware", "parallelism", "batching", "quantization", "speculator",
        "disaggregation", "routing", "autoscaling", "runtime", "kv_cache", "lora",
    ]  # fmt: skip
    assert set(dumped["lora"]) == {
        "enabled", "adapters", "max_loras_per_batch", "max_loaded_loras", "max_lora_rank",
        "target_modules", "backend", "eviction_policy",
    }  # fmt: skip
    assert set(dumped["parallelism"]) == {"tp", "pp", "attn_dp", "ep", "moe_a2a"}
    assert set(dumped["autoscaling"]) >= {"min_replicas", "max_replicas", "concurrency_target"}


def test_check_turns_parse_errors_into_issues() -> None:
    spec, issues = check({"model": {"source": "m"}, "hardware": {"gpu": "nope"}})
    assert spec is None
    assert [(i.code, i.field) for i in issues] == [("unknown_gpu", "hardware.gpu")]
    assert issues[0].fix and "H100-SXM" in issues[0].fix


def test_check_handles_input_that_is_not_a_mapping() -> None:
    spec, issues = check(["not", "a", "spec"])
    assert spec is None and issues[0].code == "invalid_type" and issues[0].field == "spec"


def test_estimate_of_8b_on_one_h100(spec_data: SpecData) -> None:
    est = estimate(RuntimeSpec.model_validate(spec_data()))
    assert est.fits and est.model_known
    assert 14 < (est.weights_gib or 0) < 16  # 8.03B params in BF16
    assert est.total_gib == pytest.approx(est.capacity_gib, abs=0.05)
    # 128 KiB of KV per token: a few hundred thousand tokens fit beside the weights
    assert 300_000 < (est.max_concurrent_tokens or 0) < 500_000
    assert est.cost_per_hour_min == est.cost_per_hour_max == 2.49


def test_estimate_cost_scales_with_replicas(spec_data: SpecData) -> None:
    data = spec_data(parallelism={"tp": 2}, autoscaling={"min_replicas": 1, "max_replicas": 5})
    est = estimate(RuntimeSpec.model_validate(data))
    assert (est.gpus_per_replica, est.total_gpus_min, est.total_gpus_max) == (2, 2, 10)
    assert est.cost_per_hour_max == pytest.approx(5 * est.cost_per_hour_min)


def test_price_override(spec_data: SpecData) -> None:
    data = spec_data(hardware={"gpu": "H100-SXM", "price_per_gpu_hour": 1.0})
    assert estimate(RuntimeSpec.model_validate(data)).cost_per_hour_max == 1.0


def test_fp8_kv_cache_doubles_capacity(spec_data: SpecData) -> None:
    bf16 = estimate(RuntimeSpec.model_validate(spec_data()))
    fp8 = estimate(
        RuntimeSpec.model_validate(spec_data(quantization={"kv_cache_dtype": "fp8_e4m3"}))
    )
    assert fp8.max_concurrent_tokens == pytest.approx(
        2 * (bf16.max_concurrent_tokens or 0), rel=0.01
    )


def test_unknown_model_is_estimated_without_memory(spec_data: SpecData) -> None:
    est = estimate(RuntimeSpec.model_validate(spec_data(model={"source": "acme/x"})))
    assert not est.model_known and est.weights_gib is None and est.fits
    assert est.cost_per_hour_min == 2.49
