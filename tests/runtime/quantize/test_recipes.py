"""Quantization jobs without torch: the recipe and job schema, the events, proposals, pricing."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runtime.memory import mixed_bytes_per_param
from runtime.quantize import (
    CandidateEvent,
    Job,
    LayerSensitivity,
    Recipe,
    parse_event,
    price_candidate,
    propose,
)
from runtime.quantize.propose import cheaper_siblings
from runtime.spec import RuntimeSpec

SPEC = RuntimeSpec.model_validate(
    {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}
)


def sensitivity(*kls: float) -> list[LayerSensitivity]:
    return [LayerSensitivity(name=f"model.layers.{i}", kl=kl) for i, kl in enumerate(kls)]


def test_a_recipe_keeps_lm_head_and_its_patterns_and_moves_its_formats() -> None:
    recipe = Recipe(
        name="r", keep_bf16=["model.layers.0.*"], formats={"model.layers.1.mlp.*": "fp8"}
    )
    assert recipe.format_of("model.layers.0.self_attn.q_proj", "nvfp4") is None
    assert recipe.format_of("model.layers.1.mlp.up_proj", "nvfp4") == "fp8"
    assert recipe.format_of("model.layers.1.self_attn.o_proj", "nvfp4") == "nvfp4"
    assert recipe.format_of("lm_head", "nvfp4") is None
    assert Recipe(name="h", formats={"lm_head": "fp8"}).format_of("lm_head", "nvfp4") == "fp8"


def test_a_job_names_the_bad_field() -> None:
    base = {"source_path": "/m", "output_dir": "/o", "propose": True}
    with pytest.raises(ValidationError, match="format"):
        Job.model_validate({**base, "format": "int3"})
    with pytest.raises(ValidationError, match="candidates, or set propose"):
        Job.model_validate({**base, "format": "fp8", "propose": False})
    with pytest.raises(ValidationError, match="name"):
        Job.model_validate({**base, "format": "fp8", "candidates": [{"name": "../x"}]})
    with pytest.raises(ValidationError, match="formats"):
        Recipe.model_validate({"name": "r", "formats": {"*": "int2"}})


def test_events_parse_from_the_tool_s_lines() -> None:
    line = (
        '{"event":"candidate","name":"a","recipe":{"name":"a"},"mean_kl":0.01,"top1":0.9,'
        '"quantized_fraction":0.75,"format_shares":{"fp8":0.75},"bits_per_weight":9.5,'
        '"checkpoint":"/o/a","quantization":"compressed-tensors",'
        '"tool":{"name":"llmcompressor","version":"0.14.0.1"},"calibration_sha256":"ab"}'
    )
    event = parse_event(line)
    assert isinstance(event, CandidateEvent) and event.format_shares == {"fp8": 0.75}
    with pytest.raises(ValidationError):
        parse_event('{"event":"progress"}')


def test_propose_keeps_the_most_sensitive_blocks_and_tries_the_same_width_sibling() -> None:
    recipes = {r.name: r for r in propose(sensitivity(0.1, 0.02, 0.5, 0.01, 0.3, 0.0, 0, 0), "fp8")}
    assert next(iter(recipes)) == "all-layers" and recipes["all-layers"].keep_bf16 == []
    assert recipes["keep-1-most-sensitive"].keep_bf16 == ["model.layers.2.*"]
    assert recipes["keep-2-most-sensitive"].keep_bf16 == ["model.layers.2.*", "model.layers.4.*"]
    assert recipes["1-most-sensitive-at-w8a8_int8"].formats == {"model.layers.2.*": "w8a8_int8"}
    assert recipes["keep-first-last"].keep_bf16 == ["model.layers.0.*", "model.layers.7.*"]
    assert recipes["attention-only"].keep_bf16 == ["*.mlp.*"]
    assert recipes["mlp-only"].keep_bf16 == ["*.self_attn.*"]
    assert all("lm_head" not in r.formats for r in recipes.values())
    with_head = propose(sensitivity(0.1, 0.2), "nvfp4", quantize_lm_head=True)
    assert all(r.formats.get("lm_head") == "nvfp4" for r in with_head)


def test_siblings_weigh_the_same_or_less_at_the_same_width() -> None:
    assert cheaper_siblings("w8a8_int8") == ["fp8"]
    assert cheaper_siblings("fp8") == ["w8a8_int8"]
    assert cheaper_siblings("nvfp4") == ["w4a16"]
    assert cheaper_siblings("w4a16") == []


def test_a_mixed_checkpoint_weighs_its_shares_at_the_catalogue_s_bytes() -> None:
    assert mixed_bytes_per_param({"w8a8_fp8": 1.0}) == pytest.approx(1.02)
    assert mixed_bytes_per_param({"w8a8_fp8": 0.5}) == pytest.approx(0.51 + 1.0)
    assert mixed_bytes_per_param({}) == 2.0
    with pytest.raises(ValueError):
        mixed_bytes_per_param({"w8a8_fp8": 0.8, "w8a8_int8": 0.4})


def test_keeping_layers_in_bf16_costs_throughput_and_a_same_weight_sibling_does_not() -> None:
    every = price_candidate(SPEC, "w8a8_int8", 1.0)
    half = price_candidate(SPEC, "w8a8_int8", 0.5)
    none = price_candidate(SPEC, "w8a8_int8", 0.0)
    mixed = price_candidate(SPEC, "w8a8_int8", {"w8a8_int8": 0.75, "fp8": 0.25})
    assert every.fits and every.meets_slo
    assert every.bytes_per_weight == pytest.approx(1.02) and none.bytes_per_weight == 2.0
    assert every.weight_gib_per_gpu < half.weight_gib_per_gpu < none.weight_gib_per_gpu
    assert every.tokens_per_s_per_gpu >= half.tokens_per_s_per_gpu > none.tokens_per_s_per_gpu
    assert mixed.tokens_per_s_per_gpu == every.tokens_per_s_per_gpu
    fp4 = price_candidate(SPEC, "nvfp4", 1.0)
    assert fp4.weight_gib_per_gpu < every.weight_gib_per_gpu
