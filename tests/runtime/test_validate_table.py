"""A table of specs, valid and invalid: each invalid one must be refused with a specific code on a
specific field, each valid one must produce no error (and a plan that runs `check` cleanly)."""

# One case per line keeps the table readable as a table; hence the long lines.
# ruff: noqa: E501

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from runtime.launch import plan
from runtime.validate import check
from tests.runtime.conftest import SpecData

L70 = {"source": "meta-llama/Llama-3.1-70B-Instruct"}
DSV3 = {"source": "deepseek-ai/DeepSeek-V3"}
QWEN_MOE = {"source": "Qwen/Qwen3-235B-A22B"}
PD = {"enabled": True}


class Case(NamedTuple):
    name: str
    overrides: dict[str, Any]
    expect: tuple[str, str, str] | None  # (severity, code, field); None: no errors at all


CASES = [
    # --- valid ---
    Case("minimal 8B on H100", {}, None),
    Case("70B TP4 FP8", {"model": L70, "parallelism": {"tp": 4}, "quantization": {"method": "fp8"}}, None),
    Case("DeepSeek-V3 TP8 H200 attn-DP", {"model": DSV3, "hardware": {"gpu": "H200"}, "parallelism": {"tp": 8, "attn_dp": 8}}, None),
    Case("Qwen3-235B FP8 TP8 EP8", {"model": QWEN_MOE, "parallelism": {"tp": 8, "ep": 8}, "quantization": {"method": "fp8"}}, None),
    Case("GLM-4.5-Air MTP TP4", {"model": {"source": "zai-org/GLM-4.5-Air"}, "parallelism": {"tp": 4}, "speculator": {"algorithm": "MTP"}}, None),
    Case("gpt-oss-120b on one H100", {"model": {"source": "openai/gpt-oss-120b"}}, None),
    Case("gpt-oss-20b on L40S", {"model": {"source": "openai/gpt-oss-20b"}, "hardware": {"gpu": "L40S"}}, None),
    Case("Mistral-7B on A100-40GB", {"model": {"source": "mistralai/Mistral-7B-Instruct-v0.3"}, "hardware": {"gpu": "A100-40GB"}}, None),
    Case("inline architecture", {"model": {"source": "acme/private-13b", "architecture": {"num_layers": 40, "hidden_size": 5120, "num_attention_heads": 40, "num_kv_heads": 40, "head_dim": 128, "vocab_size": 32000, "params_b": 13.0, "max_context": 4096}}, "parallelism": {"tp": 2}}, None),
    Case("scale to zero", {"autoscaling": {"min_replicas": 0, "max_replicas": 3, "scale_to_zero": True}}, None),
    Case("scale to zero with a warm pool", {"autoscaling": {"min_replicas": 0, "max_replicas": 3, "scale_to_zero": True, "warm_replicas": 1}}, None),
    Case("allowlisted extra flags", {"runtime": {"extra_flags": {"--tool-call-parser": "llama3", "--enable-torch-compile": True, "--watchdog-timeout": 600}}}, None),
    # --- GPU count and node shape ---
    Case("gpus != tp x pp", {"hardware": {"gpu": "H100-SXM", "gpus_per_replica": 8}, "parallelism": {"tp": 4}}, ("error", "gpu_count_mismatch", "hardware.gpus_per_replica")),
    Case("8 GPUs over 3 nodes", {"model": L70, "hardware": {"gpu": "H100-SXM", "nodes_per_replica": 3}, "parallelism": {"tp": 8}}, ("error", "nodes_gpus_indivisible", "hardware.nodes_per_replica")),
    Case("TP16 on one H100 node", {"model": L70, "hardware": {"gpu": "H100-SXM", "nodes_per_replica": 1}, "parallelism": {"tp": 16}}, ("error", "node_too_small", "hardware.nodes_per_replica")),
    Case("TP8 on one GB200 tray", {"model": L70, "hardware": {"gpu": "GB200", "nodes_per_replica": 1}, "parallelism": {"tp": 8}}, ("error", "node_too_small", "hardware.nodes_per_replica")),
    # --- heads ---
    Case("tp 3 vs 64 heads", {"model": L70, "parallelism": {"tp": 3}}, ("error", "tp_heads_indivisible", "parallelism.tp")),
    Case("tp 12 vs 8 KV heads", {"model": {"source": "zai-org/GLM-4.5-Air"}, "parallelism": {"tp": 12}}, ("error", "tp_kv_heads_indivisible", "parallelism.tp")),
    Case("attn_dp 3 in tp 8", {"model": DSV3, "hardware": {"gpu": "H200"}, "parallelism": {"tp": 8, "attn_dp": 3}}, ("error", "attn_dp_indivisible", "parallelism.attn_dp")),
    Case("ep 3 in tp 8", {"model": QWEN_MOE, "parallelism": {"tp": 8, "ep": 3}, "quantization": {"method": "fp8"}}, ("error", "ep_indivisible", "parallelism.ep")),
    Case("ep on a dense model", {"parallelism": {"tp": 2, "ep": 2}}, ("error", "ep_dense_model", "parallelism.ep")),
    Case("DeepEP with sliced experts", {"model": QWEN_MOE, "parallelism": {"tp": 8, "moe_a2a": "deepep"}, "quantization": {"method": "fp8"}}, ("error", "deepep_needs_ep_equal_tp", "parallelism.moe_a2a")),
    Case("DeepEP with EP 4 in TP 8", {"model": QWEN_MOE, "parallelism": {"tp": 8, "ep": 4, "moe_a2a": "deepep"}, "quantization": {"method": "fp8"}}, ("error", "deepep_needs_ep_equal_tp", "parallelism.moe_a2a")),
    Case("pp beyond layers", {"parallelism": {"pp": 40}}, ("error", "pp_exceeds_layers", "parallelism.pp")),
    # --- memory ---
    Case("70B BF16 on one H100", {"model": L70}, ("error", "memory_weights_exceed", "parallelism.tp")),
    Case("405B BF16 on 8xH100", {"model": {"source": "meta-llama/Llama-3.1-405B-Instruct"}, "parallelism": {"tp": 8}}, ("error", "memory_weights_exceed", "parallelism.tp")),
    Case("Qwen3-32B full context on A100-80GB", {"model": {"source": "Qwen/Qwen3-32B"}, "hardware": {"gpu": "A100-80GB"}}, ("error", "memory_context_exceeds_kv", "model.context_length")),
    Case("context beyond the model", {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "context_length": 200000}}, ("error", "context_length_exceeds_model", "model.context_length")),
    # --- quantization ---
    Case("w8a8_fp8 on A100", {"hardware": {"gpu": "A100-80GB"}, "quantization": {"method": "w8a8_fp8"}}, ("error", "quantization_unsupported_gpu", "quantization.method")),
    Case("nvfp4_online on H100", {"model": QWEN_MOE, "parallelism": {"tp": 8}, "quantization": {"method": "nvfp4_online"}}, ("error", "quantization_unsupported_gpu", "quantization.method")),
    Case("nvfp4_online on a dense model", {"hardware": {"gpu": "B200"}, "quantization": {"method": "nvfp4_online"}}, ("error", "quantization_requires_moe", "quantization.method")),
    Case("petit_nvfp4 on NVIDIA", {"quantization": {"method": "petit_nvfp4"}}, ("error", "quantization_unsupported_gpu", "quantization.method")),
    Case("NVFP4 KV cache on H100", {"quantization": {"kv_cache_dtype": "nvfp4"}}, ("error", "kv_cache_dtype_unsupported_gpu", "quantization.kv_cache_dtype")),
    Case("MXFP8 KV cache on H200", {"hardware": {"gpu": "H200"}, "quantization": {"kv_cache_dtype": "mxfp8"}}, ("error", "kv_cache_dtype_unsupported_gpu", "quantization.kv_cache_dtype")),
    Case("NVFP4 KV cache with PD", {"hardware": {"gpu": "B200"}, "quantization": {"kv_cache_dtype": "nvfp4"}, "disaggregation": PD}, ("error", "kv_nvfp4_disaggregation", "quantization.kv_cache_dtype")),
    Case("NVFP4 KV cache, head_dim 80", {"hardware": {"gpu": "B200"}, "model": {"source": "acme/odd", "architecture": {"num_layers": 24, "hidden_size": 2560, "num_attention_heads": 32, "num_kv_heads": 32, "head_dim": 80, "vocab_size": 50000, "params_b": 2.7, "max_context": 8192}}, "quantization": {"kv_cache_dtype": "nvfp4"}}, ("error", "kv_nvfp4_head_dim", "quantization.kv_cache_dtype")),
    Case("FP8 on A100 is emulated", {"hardware": {"gpu": "A100-80GB"}, "quantization": {"method": "fp8"}}, ("warning", "quantization_emulated", "quantization.method")),
    Case("FP8 over an FP8 checkpoint", {"model": DSV3, "hardware": {"gpu": "H200"}, "parallelism": {"tp": 8}, "quantization": {"method": "fp8"}}, ("warning", "quantization_overrides_checkpoint", "quantization.method")),
    # --- speculator ---
    Case("EAGLE3 without a draft", {"speculator": {"algorithm": "EAGLE3"}}, ("error", "speculator_draft_required", "speculator.draft_model")),
    Case("MTP on Llama", {"speculator": {"algorithm": "MTP"}}, ("error", "speculator_mtp_unsupported", "speculator.algorithm")),
    Case("Qwen draft for Llama", {"speculator": {"algorithm": "STANDALONE", "draft_model": "Qwen/Qwen3-0.6B"}}, ("error", "speculator_vocab_mismatch", "speculator.draft_model")),
    Case("EAGLE3 head run as EAGLE", {"speculator": {"algorithm": "EAGLE", "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}}, ("error", "speculator_draft_kind_mismatch", "speculator.algorithm")),
    Case("topk without steps", {"speculator": {"algorithm": "EAGLE3", "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "eagle_topk": 4}}, ("error", "speculator_steps_required", "speculator.num_steps")),
    Case("draft tokens beyond the tree", {"speculator": {"algorithm": "EAGLE3", "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_steps": 2, "eagle_topk": 2, "num_draft_tokens": 20}}, ("error", "speculator_draft_tokens_exceed_tree", "speculator.num_draft_tokens")),
    Case("topk 1 forces draft tokens", {"speculator": {"algorithm": "EAGLE3", "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 8}}, ("warning", "speculator_draft_tokens_forced", "speculator.num_draft_tokens")),
    Case("NGRAM with attention-DP", {"model": DSV3, "hardware": {"gpu": "H200"}, "parallelism": {"tp": 8, "attn_dp": 8}, "speculator": {"algorithm": "NGRAM"}}, ("error", "speculator_attn_dp", "parallelism.attn_dp")),
    Case("NGRAM breadth order", {"speculator": {"algorithm": "NGRAM", "ngram": {"min_bfs_breadth": 8, "max_bfs_breadth": 2}}}, ("error", "ngram_breadth_order", "speculator.ngram.min_bfs_breadth")),
    Case("PP with speculation", {"model": L70, "parallelism": {"tp": 4, "pp": 2}, "speculator": {"algorithm": "EAGLE3", "draft_model": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"}}, ("error", "speculator_pp", "speculator.algorithm")),
    Case("chunk not a page multiple", {"batching": {"chunked_prefill_size": 1000, "page_size": 64}}, ("error", "chunked_prefill_page_size", "batching.chunked_prefill_size")),
    Case("graphs beyond running requests", {"batching": {"max_running_requests": 32, "cuda_graph_max_bs_decode": 256}}, ("warning", "cuda_graph_bs_above_running", "batching.cuda_graph_max_bs_decode")),
    Case("memory fraction near 1", {"batching": {"mem_fraction_static": 0.97}}, ("warning", "mem_fraction_too_high", "batching.mem_fraction_static")),
    Case("PD ignores gpus_per_replica", {"hardware": {"gpu": "H100-SXM", "gpus_per_replica": 2}, "disaggregation": PD}, ("warning", "hardware_ignored_with_disaggregation", "hardware.gpus_per_replica")),
    Case("mixed chunk with EAGLE3", {"batching": {"mixed_chunk": True}, "speculator": {"algorithm": "EAGLE3", "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}}, ("warning", "mixed_chunk_ignored", "batching.mixed_chunk")),
    # --- disaggregation ---
    Case("PD tp 4 vs 3", {"model": L70, "parallelism": {"tp": 4}, "quantization": {"method": "fp8"}, "disaggregation": {"enabled": True, "decode": {"tp": 3}}}, ("error", "disagg_tp_incompatible", "disaggregation.decode.tp")),
    Case("PD fake backend", {"disaggregation": {"enabled": True, "transfer_backend": "fake"}}, ("error", "disagg_fake_backend", "disaggregation.transfer_backend")),
    Case("PD bootstrap on the HTTP port", {"disaggregation": {"enabled": True, "bootstrap_port": 30000}}, ("error", "disagg_bootstrap_port_conflict", "disaggregation.bootstrap_port")),
    Case("PD decode radix with NGRAM", {"disaggregation": {"enabled": True, "decode_radix_cache": True}, "speculator": {"algorithm": "NGRAM"}}, ("error", "disagg_decode_radix_speculator", "disaggregation.decode_radix_cache")),
    # --- autoscaling and routing ---
    Case("min above max", {"autoscaling": {"min_replicas": 3, "max_replicas": 2}}, ("error", "autoscaling_min_above_max", "autoscaling.min_replicas")),
    Case("min 0 without scale to zero", {"autoscaling": {"min_replicas": 0}}, ("error", "autoscaling_zero_without_scale_to_zero", "autoscaling.min_replicas")),
    Case("scale to zero with min 1", {"autoscaling": {"scale_to_zero": True}}, ("error", "autoscaling_scale_to_zero_min", "autoscaling.scale_to_zero")),
    Case("warm pool above max", {"autoscaling": {"max_replicas": 2, "warm_replicas": 3}}, ("error", "autoscaling_warm_above_max", "autoscaling.warm_replicas")),
    Case("warm pool on a split endpoint", {"disaggregation": {"enabled": True}, "autoscaling": {"warm_replicas": 1}}, ("error", "autoscaling_warm_disaggregated", "autoscaling.warm_replicas")),
    Case("warm pool on a two-node replica", {"model": L70, "hardware": {"gpu": "H100-SXM", "nodes_per_replica": 2}, "parallelism": {"tp": 16}, "autoscaling": {"max_replicas": 2, "warm_replicas": 1}}, ("error", "autoscaling_warm_multi_node", "autoscaling.warm_replicas")),
    Case("thresholds on round robin", {"routing": {"policy": "round_robin", "cache_threshold": 0.5}}, ("warning", "routing_thresholds_unused", "routing.policy")),
    Case("overload protection on round robin", {"routing": {"policy": "round_robin", "overload_protection": True}}, ("warning", "routing_thresholds_unused", "routing.policy")),
    Case("warm-up on power of two", {"routing": {"policy": "power_of_two", "warmup_seconds": 30}}, ("warning", "routing_thresholds_unused", "routing.policy")),
    Case("tree threshold placed by count", {"routing": {"placement": "by_count", "cache_threshold": 0.5}}, ("warning", "routing_thresholds_unused", "routing.placement")),
    # --- flags and runtime ---
    Case("managed flag as extra", {"runtime": {"extra_flags": {"--tp-size": 2}}}, ("error", "flag_not_allowed", "runtime.extra_flags.--tp-size")),
    Case("abbreviated flag", {"runtime": {"extra_flags": {"--tp": 2}}}, ("error", "flag_unknown", "runtime.extra_flags.--tp")),
    Case("removed flag", {"runtime": {"extra_flags": {"--cuda-graph-max-bs": 64}}}, ("error", "flag_unknown", "runtime.extra_flags.--cuda-graph-max-bs")),
    Case("alias as extra flag", {"runtime": {"extra_flags": {"--enable-hicache": True}}}, ("error", "flag_not_canonical", "runtime.extra_flags.--enable-hicache")),
    Case("bad choice in extra flag", {"runtime": {"extra_flags": {"--tool-call-parser": "nonsense"}}}, ("error", "flag_invalid_value", "runtime.extra_flags.--tool-call-parser")),
    Case("bad number in extra flag", {"runtime": {"extra_flags": {"--watchdog-timeout": "soon"}}}, ("error", "flag_invalid_value", "runtime.extra_flags.--watchdog-timeout")),
    Case("HF token in env", {"runtime": {"env": {"HF_TOKEN": "hf_x"}}}, ("error", "env_secret_in_plain_text", "runtime.env.HF_TOKEN")),
    Case("unknown model", {"model": {"source": "acme/secret-model"}}, ("warning", "model_not_in_catalog", "model.source")),
    # --- bad input (parse errors, reported by check) ---
    Case("unknown GPU", {"hardware": {"gpu": "RTX-9090"}}, ("error", "unknown_gpu", "hardware.gpu")),
    Case("negative tp", {"parallelism": {"tp": -1}}, ("error", "out_of_range", "parallelism.tp")),
    Case("negative memory fraction", {"batching": {"mem_fraction_static": -0.5}}, ("error", "out_of_range", "batching.mem_fraction_static")),
    Case("nvfp4 is not a method name", {"quantization": {"method": "nvfp4"}}, ("error", "unknown_quantization", "quantization.method")),
    Case("fp8 is not a KV dtype name", {"quantization": {"kv_cache_dtype": "fp8"}}, ("error", "unknown_kv_cache_dtype", "quantization.kv_cache_dtype")),
    Case("colon in served name", {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "served_name": "llama:8b"}}, ("error", "served_name_colon", "model.served_name")),
    Case("unknown field", {"parallelism": {"tp": 1, "dp": 2}}, ("error", "unknown_field", "parallelism.dp")),
    Case("string for a number", {"parallelism": {"tp": "4"}}, ("error", "invalid_type", "parallelism.tp")),
    Case("unknown speculator", {"speculator": {"algorithm": "MEDUSA"}}, ("error", "invalid_choice", "speculator.algorithm")),
    Case("old SGLang version", {"runtime": {"sglang_version": "0.4.6"}}, ("error", "unsupported_version", "runtime.sglang_version")),
    Case("chunk size zero", {"batching": {"chunked_prefill_size": 0}}, ("error", "invalid_value", "batching.chunked_prefill_size")),
    Case("bad env name", {"runtime": {"env": {"BAD-NAME": "1"}}}, ("error", "invalid_env_name", "runtime.env")),
    Case("env that runs code", {"runtime": {"env": {"PYTHONWARNINGS": "ignore::antigravity.x"}}}, ("error", "env_name_not_allowed", "runtime.env")),
    Case("lower-case HF token in env", {"runtime": {"env": {"hf_token": "hf_x"}}}, ("error", "env_secret_in_plain_text", "runtime.env.hf_token")),
]  # fmt: skip


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 40
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_spec_table(case: Case, spec_data: SpecData) -> None:
    spec, issues = check(spec_data(**case.overrides))
    errors = [issue for issue in issues if issue.is_error]
    if case.expect is None:
        assert spec is not None
        assert errors == [], errors
        assert plan(spec).roles
        return
    severity, code, field = case.expect
    found = [(i.severity, i.code, i.field) for i in issues]
    assert (severity, code, field) in found, found
    issue = next(i for i in issues if (i.severity, i.code, i.field) == case.expect)
    assert issue.message and issue.fix, issue
    if severity == "warning":
        assert errors == [], errors  # the warned-about spec still deploys
