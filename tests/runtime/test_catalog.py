"""The GPU, model and flag catalogues: lookups, required entries, and the flag checker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.catalog import (
    UnknownGpuError,
    get_gpu,
    get_model,
    list_gpus,
    list_models,
    sglang_flags,
    smg_flags,
)

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"


@pytest.mark.parametrize(
    "gpu", ["A100-40GB", "A100-80GB", "L40S", "H100-SXM", "H200", "B200", "GB200", "GB300"]
)
def test_required_gpus_are_catalogued_with_figures(gpu: str) -> None:
    found = get_gpu(gpu)
    assert found.memory_gib > 0 and found.hbm_bandwidth_gbs > 0 and found.bf16_tflops > 0
    assert found.gpus_per_node in (4, 8)
    assert found.price_per_gpu_hour > 0


def test_gpu_lookup_is_case_insensitive_and_knows_aliases() -> None:
    assert get_gpu("h100-sxm").id == "H100-SXM"
    assert get_gpu("H100").id == "H100-SXM"
    assert get_gpu("a100-80gb").id == "A100-80GB"


def test_compute_capability_becomes_sm() -> None:
    assert get_gpu("H100-SXM").sm == 90
    assert get_gpu("GB300").sm == 103
    assert get_gpu("L40S").sm == 89
    assert [g.sm >= 100 for g in list_gpus()].count(True) == 3


def test_unknown_gpu_error_names_the_known_ones() -> None:
    with pytest.raises(UnknownGpuError) as raised:
        get_gpu("TPU-v5")
    assert isinstance(raised.value, KeyError)
    assert "H100-SXM" in str(raised.value) and "TPU-v5" in str(raised.value)


@pytest.mark.parametrize(
    "name",
    [
        "meta-llama/Llama-3.1-8B-Instruct",
        "meta-llama/Llama-3.1-70B-Instruct",
        "meta-llama/Llama-3.1-405B-Instruct",
        "meta-llama/Llama-3.3-70B-Instruct",
        "Qwen/Qwen3-8B",
        "Qwen/Qwen3-32B",
        "Qwen/Qwen3-235B-A22B",
        "deepseek-ai/DeepSeek-V3",
        "openai/gpt-oss-20b",
        "openai/gpt-oss-120b",
        "mistralai/Mistral-7B-Instruct-v0.3",
        "zai-org/GLM-4.5-Air",
    ],
)
def test_required_models_are_catalogued(name: str) -> None:
    model = get_model(name)
    assert model is not None
    assert model.num_attention_heads % model.num_kv_heads == 0
    assert 0 < model.active_params_b <= model.params_b


def test_model_lookup_by_short_id_basename_and_case() -> None:
    assert get_model("llama-3.1-70b") is get_model("meta-llama/Llama-3.1-70B-Instruct")
    assert get_model("LLAMA-3.1-70B-INSTRUCT") is get_model("llama-3.1-70b")
    assert get_model("some-mirror/Llama-3.1-70B-Instruct") is get_model("llama-3.1-70b")
    assert get_model("nobody/unknown-model") is None


def test_moe_and_mtp_facts() -> None:
    deepseek = get_model("deepseek-v3")
    assert deepseek is not None and deepseek.is_moe and deepseek.has_mtp and deepseek.is_mla
    llama = get_model("llama-3.1-8b")
    assert llama is not None and not llama.is_moe and not llama.has_mtp
    assert llama.active_params_b == llama.params_b
    assert {m.id for m in list_models() if m.has_mtp} == {"deepseek-v3", "glm-4.5-air"}


def test_kv_bytes_per_token_gqa_and_tp_sharding() -> None:
    llama = get_model("llama-3.1-8b")
    assert llama is not None
    # 2 (K,V) x 32 layers x 8 KV heads x 128 dims x 2 bytes
    assert llama.kv_bytes_per_token(2) == 131072
    assert llama.kv_bytes_per_token(2, tp=8) == 131072 / 8
    # past the KV head count, heads are replicated, not split further
    assert llama.kv_bytes_per_token(2, tp=16) == llama.kv_bytes_per_token(2, tp=8)


def test_kv_bytes_per_token_mla_is_not_sharded() -> None:
    deepseek = get_model("deepseek-v3")
    assert deepseek is not None
    assert deepseek.kv_bytes_per_token(2) == 61 * (512 + 64) * 2
    assert deepseek.kv_bytes_per_token(2, tp=16) == deepseek.kv_bytes_per_token(2)


def test_weight_bytes() -> None:
    llama = get_model("llama-3.1-70b")
    assert llama is not None
    assert llama.weight_bytes(2) == pytest.approx(141.1e9)


def test_flag_catalog_canonical_names_and_aliases() -> None:
    flags = sglang_flags()
    assert len(flags) == 531
    assert flags.canonical("--tensor-parallel-size") == "--tp-size"
    assert flags.canonical("--ep") == "--ep-size"
    assert "--tp" not in flags and "--cuda-graph-max-bs" not in flags
    tp = flags.get("--tp-size")
    assert tp is not None and tp.type == "int" and tp.takes_value
    metrics = flags.get("--enable-metrics")
    assert metrics is not None and metrics.store_true


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--tp", "2"], "unknown flag"),
        (["--quantization", "nvfp4"], "not one of"),
        (["--kv-cache-dtype", "fp8"], "not one of"),
        (["--tp-size", "two"], "not an integer"),
        (["--tp-size", "2", "--tp-size", "4"], "more than once"),
        (["--tensor-parallel-size", "2"], "canonical"),
        (["--enable-metrics", "yes"], "takes no value"),
        (["--model-path"], "exactly one value"),
        (["--extra-metric-labels", "{not json"], "JSON"),
        (["--enable-dp-attention"], "deprecated"),
        (["--speculative-algorithm", "MEDUSA"], "not one of"),
    ],
)
def test_flag_check_reports_what_sglang_would_refuse(argv: list[str], fragment: str) -> None:
    problems = sglang_flags().check(argv)
    assert any(fragment in p.message for p in problems), problems


def test_flag_check_accepts_good_argv() -> None:
    argv = ["--model-path", "m", "--tp-size", "2", "--context-length", "32Ki"]
    argv += ["--enable-metrics", "--mem-fraction-static", "0.8", "--extra-metric-labels", "{}"]
    assert sglang_flags().check(argv) == []


def test_smg_catalog_knows_router_flags() -> None:
    router = smg_flags()
    assert router.check(["--policy", "cache_aware", "--prometheus-port", "29000"]) == []
    assert router.check(["--policy", "fastest"])
    assert router.canonical("--cache-match-threshold") == "--cache-threshold"


def test_committed_catalogue_matches_the_reference_dump(tmp_path: Path) -> None:
    """The data file is what the regeneration script makes of SGLang's parser dump."""
    source = REFERENCE / "sglang-0.5.23-server-args.json"
    if not source.exists():
        pytest.skip(f"reference dump not present at {source}")
    from scripts.regen_sglang_flags import main

    out = tmp_path / "flags.json"
    assert (
        main(["sglang", "--from-json", str(source), "--version", "0.5.23", "--out", str(out)]) == 0
    )
    committed = Path(__file__).resolve().parents[2] / "runtime/catalog/sglang-0.5.23.json"
    assert json.loads(out.read_text())["flags"] == json.loads(committed.read_text())["flags"]


def test_catalogues_are_parsed_by_libyaml_where_pyyaml_has_it() -> None:
    """The pure-Python YAML parser took ~0.1 s of CPU of every cold `python -m runtime optimize`
    (issue 27: the CLI answers in under 1 s); libyaml's parser builds the same data."""
    import yaml

    from runtime.catalog import data

    path = Path(data.__file__).with_name("perf.yaml")
    assert data.read_yaml(path) == yaml.safe_load(path.read_text())
    if yaml.__with_libyaml__:
        assert data._LOADER is yaml.CSafeLoader
