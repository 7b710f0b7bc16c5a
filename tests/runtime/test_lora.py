"""LoRA adapters as typed settings (`lora`, issue 30 item 1): SGLang 0.5.23's choices and flags,
what it would refuse refused here naming the field, the adapter pool taken out of the KV cache,
and which spec changes a running engine takes through its load/unload API."""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest

from runtime.catalog import get_gpu, sglang_flags
from runtime.launch import plan
from runtime.lora import LoraBackend, LoraEvictionPolicy, LoraTargetModule
from runtime.lora_live import lora_live_change
from runtime.memory import memory_fit
from runtime.optimize.predict import predict_layout
from runtime.optimize.types import Layout, OptimizeRequest, Traffic
from runtime.spec import RuntimeSpec
from runtime.topology import engine_groups
from runtime.validate import check, estimate
from tests.runtime.conftest import SpecData

SQL = {"name": "sql", "source": "org/sql-lora", "rank": 16}
OCR = {"name": "ocr", "source": "org/ocr-lora", "rank": 64}


def lora(**settings: Any) -> dict[str, Any]:
    return {"lora": settings}


def errors(spec_data: SpecData, **groups: Any) -> set[tuple[str, str]]:
    _, issues = check(spec_data(**groups))
    return {(i.code, i.field) for i in issues if i.is_error}


def pairs(args: list[str]) -> dict[str, str]:
    return dict(zip(args, [*args[1:], ""], strict=True))


@pytest.mark.parametrize(
    ("alias", "flag"),
    [
        (LoraTargetModule, "--lora-target-modules"),
        (LoraBackend, "--lora-backend"),
        (LoraEvictionPolicy, "--lora-eviction-policy"),
    ],
)
def test_every_choice_offered_is_one_sglang_accepts(alias: Any, flag: str) -> None:
    catalogue = sglang_flags().get(flag)
    assert catalogue is not None and catalogue.choices
    assert set(typing.get_args(alias)) <= set(catalogue.choices)


def test_adapters_render_sglangs_flags_and_pass_the_catalogue(spec_data: SpecData) -> None:
    pinned = {**OCR, "pinned": True}
    spec, issues = check(spec_data(**lora(adapters=[SQL, pinned], max_loaded_loras=8)))
    assert spec is not None and not [i for i in issues if i.is_error], issues
    args = plan(spec).roles[0].args
    at = args.index("--lora-paths")
    assert args[at + 1] == "sql=org/sql-lora"
    # Only SGLang's JSON form carries `pinned`.
    assert json.loads(args[at + 2]) == {"lora_name": "ocr", "lora_path": "org/ocr-lora",
                                        "pinned": True}  # fmt: skip
    given = pairs(args)
    assert "--enable-lora" in args
    assert given["--max-lora-rank"] == "64"  # the largest adapter's
    assert given["--max-loaded-loras"] == "8"
    # SGLang's defaults are spelled out: a new release cannot move them under an endpoint.
    assert given["--max-loras-per-batch"] == "8"
    assert given["--lora-backend"] == "csgmv"
    assert given["--lora-eviction-policy"] == "lru"
    assert "--lora-target-modules" not in args  # SGLang takes the adapters' own
    assert list(sglang_flags().check(args)) == []


def test_lora_with_no_adapters_yet_needs_the_pool_size(spec_data: SpecData) -> None:
    assert errors(spec_data, **lora(enabled=True)) == {
        ("lora_needs_pool_size", "lora.max_lora_rank"),
        ("lora_needs_pool_size", "lora.target_modules"),
    }
    settings = lora(enabled=True, max_lora_rank=32, target_modules=["q_proj", "v_proj"])
    spec, issues = check(spec_data(**settings))
    assert spec is not None and not [i for i in issues if i.is_error], issues
    args = plan(spec).roles[0].args
    assert "--lora-paths" not in args
    assert args[args.index("--lora-target-modules") :][:3] == [
        "--lora-target-modules", "q_proj", "v_proj"
    ]  # fmt: skip
    assert list(sglang_flags().check(args)) == []


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"adapters": [SQL, SQL]}, ("lora_duplicate_name", "lora.adapters.1.name")),
        ({"adapters": [{**SQL, "name": "base"}]}, ("lora_name_is_base", "lora.adapters.0.name")),
        ({"adapters": [{**SQL, "name": "b:x"}]}, ("invalid_adapter_name", "lora.adapters.0.name")),
        ({"adapters": [OCR], "max_lora_rank": 32}, ("lora_rank_too_large", "lora.adapters.0.rank")),
        (
            {"adapters": [SQL], "max_loaded_loras": 4},
            ("lora_loaded_below_batch", "lora.max_loaded_loras"),
        ),
        (
            {"adapters": [SQL, OCR], "max_loaded_loras": 1, "max_loras_per_batch": 1},
            ("lora_too_many_adapters", "lora.adapters"),
        ),
        (
            {"adapters": [{**SQL, "pinned": True}], "max_loras_per_batch": 1},
            ("lora_too_many_pinned", "lora.adapters"),
        ),
        (
            {"adapters": [SQL], "target_modules": ["kv_b_proj"]},
            ("lora_unknown_module", "lora.target_modules"),
        ),
        (
            {"adapters": [SQL], "target_modules": ["all", "q_proj"]},
            ("lora_all_with_others", "lora.target_modules"),
        ),
        (
            {"adapters": [{**SQL, "revision": "v2"}]},
            ("lora_revision_unsupported", "lora.adapters.0.revision"),
        ),
        (
            {"adapters": [{**SQL, "source": "/etc"}]},
            ("invalid_model_source", "lora.adapters.0.source"),
        ),
        ({"adapters": [SQL], "backend": "ascend"}, ("invalid_choice", "lora.backend")),
        (
            {"adapters": [SQL], "max_loras_per_batch": 64, "max_lora_rank": 1024},
            ("lora_pool_too_large", "lora.max_loras_per_batch"),
        ),
    ],
)
def test_bad_lora_settings_are_refused_naming_the_field(
    spec_data: SpecData, settings: dict[str, Any], expected: tuple[str, str]
) -> None:
    model = {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "base"}
    assert expected in errors(spec_data, model=model, **lora(**settings))


def test_lora_refuses_a_speculator_sglang_cannot_run_it_with(spec_data: SpecData) -> None:
    speculator = {"algorithm": "STANDALONE", "draft_model": "meta-llama/Llama-3.2-1B-Instruct"}
    found = errors(spec_data, speculator=speculator, **lora(adapters=[SQL]))
    assert ("lora_speculator", "speculator.algorithm") in found


def test_lora_paths_as_an_extra_flag_points_at_the_lora_group(spec_data: SpecData) -> None:
    _, issues = check(spec_data(runtime={"extra_flags": {"--lora-paths": "x=/tmp/x"}}))
    refused = [i for i in issues if i.field == "runtime.extra_flags.--lora-paths"]
    assert refused and "lora.adapters" in refused[0].message


def test_the_adapter_pool_comes_out_of_the_kv_cache(spec_data: SpecData) -> None:
    plain = RuntimeSpec.model_validate(spec_data())
    served = RuntimeSpec.model_validate(
        spec_data(**lora(adapters=[SQL, OCR], target_modules=["all"], max_loras_per_batch=4))
    )
    arch, gpu = plain.model.arch(), get_gpu(plain.hardware.gpu)
    assert arch is not None
    before = memory_fit(plain, gpu, arch, engine_groups(plain)[0])
    after = memory_fit(served, gpu, arch, engine_groups(served)[0])
    # Llama-3.1-8B, per layer and rank: q 4096+4096, k and v 4096+1024, o 4096+4096, gate and
    # up 4096+14336, down 14336+4096 = 81,920 weights; 32 layers, rank 64 (the largest), BF16,
    # 4 slots.
    assert after.adapters == 4 * 64 * 81_920 * 32 * 2
    assert after.kv_cache == pytest.approx(before.kv_cache - after.adapters)
    assert after.total == pytest.approx(before.total)
    assert after.max_kv_tokens < before.max_kv_tokens
    assert estimate(served).adapters_gib == round(after.adapters / 1024**3, 2)


def _spec(spec_data: SpecData, **settings: Any) -> RuntimeSpec:
    return RuntimeSpec.model_validate(spec_data(**lora(**settings)))


def test_an_adapters_only_change_is_live_and_anything_else_restarts(spec_data: SpecData) -> None:
    modules = {"target_modules": ["q_proj", "v_proj"], "max_lora_rank": 64}
    old = _spec(spec_data, adapters=[SQL], **modules)
    change = lora_live_change(old, _spec(spec_data, adapters=[OCR], **modules))
    assert change is not None
    assert [a.name for a in change.load] == ["ocr"] and change.unload == ("sql",)
    assert change.calls() == [
        ("/unload_lora_adapter", {"lora_name": "sql"}),
        ("/load_lora_adapter", {"lora_name": "ocr", "lora_path": "org/ocr-lora", "pinned": False}),
    ]
    # A changed source is an unload and a load under the same name.
    moved = _spec(spec_data, adapters=[{**SQL, "source": "org/sql-v2"}], **modules)
    change = lora_live_change(old, moved)
    assert change is not None and change.unload == ("sql",) and change.load[0].name == "sql"
    # Start-up settings, a rank above the running pool's, or LoRA turned on: a restart.
    assert lora_live_change(old, _spec(spec_data, adapters=[SQL], max_loras_per_batch=2,
                                       **modules)) is None  # fmt: skip
    wide = {**OCR, "name": "wide", "rank": 128}
    assert lora_live_change(old, _spec(spec_data, adapters=[SQL, wide], **modules)) is None
    assert lora_live_change(RuntimeSpec.model_validate(spec_data()), old) is None
    # Modules left to SGLang: it sized the pool for the first adapters, so only unloads are live.
    inferred = _spec(spec_data, adapters=[SQL, OCR])
    change = lora_live_change(inferred, _spec(spec_data, adapters=[OCR]))
    assert change is not None and change.unload == ("sql",) and change.load == ()
    assert (
        lora_live_change(inferred, _spec(spec_data, adapters=[SQL, OCR, {**SQL, "name": "x"}]))
        is None
    )


def test_the_optimizer_prices_the_adapters_in_use(spec_data: SpecData) -> None:
    adapters = [{"name": f"a{i}", "source": f"org/a{i}", "rank": 16} for i in range(8)]
    served = RuntimeSpec.model_validate(
        spec_data(**lora(adapters=adapters, target_modules=["all"]))
    )
    model, layout = "meta-llama/Llama-3.1-8B-Instruct", Layout("H100-SXM", 1)

    def capacity(in_use: int | None, with_lora: bool = True) -> float:
        traffic = Traffic(rate_rps=1, adapters_in_use=in_use)
        request = OptimizeRequest(model, traffic, lora=served.lora if with_lora else None)
        predicted = predict_layout(request, layout)
        assert predicted is not None
        return predicted.capacity_rps

    base = capacity(None, with_lora=False)
    # All traffic to the base model: the pool still takes KV memory, no kernel runs.
    assert capacity(0) <= base
    # One adapter for every request, then the 8 listed (the default): each batch holds more.
    assert base > capacity(1) > capacity(None)
