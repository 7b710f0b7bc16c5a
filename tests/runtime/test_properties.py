"""Property tests: what holds for every spec, not just the ones in the table.

- A spec that validates without errors yields argv that the pinned SGLang/smg parsers accept,
  with no flag given twice. (The `launch_flag_rejected` safety-net rule is left out, or the
  property would only restate it.)
- Every spec made invalid on purpose yields at least one error, and every error names a field.
- `check` never raises, whatever it is given.
"""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime.catalog import sglang_flags, smg_flags
from runtime.catalog.flags import split_argv
from runtime.extra_flags import EXTRA_FLAG_ALLOWLIST
from runtime.launch import plan
from runtime.spec import QUANTIZATION_METHODS, RuntimeSpec
from runtime.validate import check, validate

TARGETS = [
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.3-70B-Instruct",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-235B-A22B",
    "deepseek-ai/DeepSeek-V3",
    "openai/gpt-oss-20b",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "zai-org/GLM-4.5-Air",
    "acme/not-in-catalogue",
]
DRAFTS = [None, "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "meta-llama/Llama-3.2-1B-Instruct"]
GPUS = ["A100-80GB", "L40S", "H100-SXM", "H200", "B200", "GB200"]
EXTRA_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "--tool-call-parser": st.sampled_from(["llama3", "qwen25", "deepseekv3"]),
    "--reasoning-parser": st.sampled_from(["qwen3", "deepseek-r1"]),
    "--enable-torch-compile": st.booleans(),
    "--watchdog-timeout": st.integers(60, 3600),
    "--log-level": st.sampled_from(["info", "debug"]),
    "--max-queued-requests": st.integers(1, 1000),
}

# Modest example counts (the runtime suite stays well under a minute on 2 cores); set here, not in a
# global profile, so other packages' property tests keep their own settings.
examples = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

optional_int = st.none() | st.integers(1, 64)


@st.composite
def speculators(draw: st.DrawFn) -> dict[str, Any]:
    algorithm = draw(
        st.sampled_from(["none", "none", "EAGLE", "EAGLE3", "MTP", "NGRAM", "STANDALONE"])
    )
    data: dict[str, Any] = {"algorithm": algorithm, "draft_model": draw(st.sampled_from(DRAFTS))}
    if draw(st.booleans()):
        data |= {"num_steps": draw(st.integers(1, 5)), "eagle_topk": draw(st.integers(1, 4))}
        data["num_draft_tokens"] = draw(st.integers(2, 16))
    if algorithm == "NGRAM" and draw(st.booleans()):
        data["ngram"] = {"max_bfs_breadth": draw(st.integers(1, 10))}
    return data


@st.composite
def spec_dicts(draw: st.DrawFn) -> dict[str, Any]:
    """Plausible specs: mostly valid, some not (the rules decide)."""
    tp = draw(st.sampled_from([1, 1, 2, 4, 8]))
    data: dict[str, Any] = {
        "model": {"source": draw(st.sampled_from(TARGETS))},
        "hardware": {"gpu": draw(st.sampled_from(GPUS))},
        "parallelism": {"tp": tp, "pp": draw(st.sampled_from([1, 1, 2]))},
        "quantization": {
            "method": draw(st.sampled_from([None, None, "fp8", "modelopt_fp4", "awq", "mxfp4"])),
            "kv_cache_dtype": draw(st.sampled_from(["auto", "auto", "fp8_e4m3", "bf16", "nvfp4"])),
        },
        "batching": {
            "max_running_requests": draw(st.none() | st.integers(1, 512)),
            "chunked_prefill_size": draw(st.sampled_from([None, -1, 2048, 8192])),
            "schedule_policy": draw(st.sampled_from([None, "fcfs", "lpm"])),
            "mem_fraction_static": draw(st.none() | st.floats(0.5, 0.9)),
            "cuda_graph_max_bs_decode": draw(optional_int),
            "radix_cache": draw(st.booleans()),
            "stream_interval": draw(optional_int),
        },
        "speculator": draw(speculators()),
        "disaggregation": {"enabled": draw(st.booleans()), "decode": {"replicas": 2}},
        "routing": {
            "policy": draw(st.sampled_from(["cache_aware", "round_robin", "power_of_two"])),
            "cache_threshold": draw(st.none() | st.floats(0, 1)),
            "balance_abs_threshold": draw(st.none() | st.integers(0, 10**6)),
            "balance_rel_threshold": draw(st.none() | st.floats(1, 100)),
            "overload_protection": draw(st.booleans()),
            "warmup_seconds": draw(st.none() | st.integers(0, 3600)),
        },
        "autoscaling": {"min_replicas": draw(st.integers(1, 2)), "max_replicas": 4},
    }
    if draw(st.booleans()):
        flags = draw(st.lists(st.sampled_from(sorted(EXTRA_VALUES)), max_size=3, unique=True))
        data["runtime"] = {"extra_flags": {f: draw(EXTRA_VALUES[f]) for f in flags}}
    return data


@examples
@given(spec_dicts())
def test_a_spec_without_errors_yields_argv_its_launchers_accept(data: dict[str, Any]) -> None:
    spec, issues = check(data)
    assert spec is not None, issues
    errors = [i for i in validate(spec) if i.is_error and i.code != "launch_flag_rejected"]
    if errors:
        return
    engines = sglang_flags()
    for role in plan(spec, deployment_labels={"d": "x"}).roles:
        catalog = smg_flags() if role.role == "router" else engines
        assert catalog.check(role.args) == [], (role.role, role.args)
        repeated = [f for f, n in Counter(f for f, _ in split_argv(role.args)).items() if n > 1]
        assert repeated == []
        assert all(catalog.canonical(f) == f for f, _ in split_argv(role.args))


NOT_ALLOWED = sorted(
    spec.flag for spec in sglang_flags().flags() if spec.flag not in EXTRA_FLAG_ALLOWLIST
)


def _set(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(data)
    *groups, leaf = path.split(".")
    node = out
    for group in groups:
        node = node.setdefault(group, {})
    node[leaf] = value
    return out


text = st.text(min_size=1, max_size=12)
MUTATIONS: list[tuple[str, st.SearchStrategy[Any]]] = [
    ("hardware.gpu", text.filter(lambda s: s.strip().lower() not in {"h100", "h200", "b200"})),
    ("parallelism.tp", st.integers(max_value=0)),
    ("parallelism.pp", st.integers(max_value=0)),
    ("batching.max_running_requests", st.integers(max_value=0)),
    ("batching.mem_fraction_static", st.floats(1, 10) | st.floats(-10, 0)),
    ("quantization.method", text.filter(lambda s: s not in QUANTIZATION_METHODS)),
    ("model.served_name", st.builds(lambda a, b: f"{a}:{b}", text, text)),
    ("parallelism.bogus_field", st.integers()),
    ("speculator.algorithm", text.filter(lambda s: s not in {"EAGLE", "EAGLE3", "MTP"})),
    ("autoscaling.max_replicas", st.integers(max_value=0)),
]


@st.composite
def invalid_spec_dicts(draw: st.DrawFn) -> dict[str, Any]:
    base = draw(spec_dicts())
    kind = draw(st.integers(0, len(MUTATIONS) + 1))
    if kind == len(MUTATIONS):
        flag = draw(st.sampled_from(NOT_ALLOWED))
        return _set(base, "runtime.extra_flags", {flag: True})
    if kind == len(MUTATIONS) + 1:
        # min above max: a cross-field rule rather than a parse error
        return _set(_set(base, "autoscaling.min_replicas", 5), "autoscaling.max_replicas", 3)
    path, values = MUTATIONS[kind]
    return _set(base, path, draw(values))


@examples
@given(invalid_spec_dicts())
def test_every_invalid_spec_gets_an_error_naming_a_field(data: dict[str, Any]) -> None:
    _, issues = check(data)
    errors = [issue for issue in issues if issue.is_error]
    assert errors
    assert all(issue.field and issue.message for issue in errors)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children)
    ),
    max_leaves=12,
)


@examples
@given(st.dictionaries(st.sampled_from(["model", "hardware", "parallelism", "x"]), json_values))
def test_check_never_raises(data: dict[str, Any]) -> None:
    spec, issues = check(data)
    assert spec is not None or any(issue.is_error for issue in issues)


@examples
@given(spec_dicts())
def test_content_hash_survives_a_json_round_trip(data: dict[str, Any]) -> None:
    spec = RuntimeSpec.model_validate(data)
    again = RuntimeSpec.model_validate_json(spec.model_dump_json())
    assert again.content_hash() == spec.content_hash()
