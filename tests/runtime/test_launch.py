"""Launch plans: golden argv for reference endpoints, and the invariants every plan keeps.

Golden files live in `tests/runtime/golden/`: `<name>.yaml` is the spec, `<name>.plan.json` the
expected plan and issues. After an intended change, regenerate them with
`PLINTH_UPDATE_GOLDEN=1 pytest tests/runtime/test_launch.py` and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.catalog import sglang_flags, smg_flags
from runtime.catalog.flags import split_argv
from runtime.launch import RolePlan, cache_aware_args, gateway_places, plan, with_flag
from runtime.routing_key import ROUTING_KEY_HEADER
from runtime.spec import PLINTH_ROUTING, SMG_ROUTING, RuntimeSpec
from runtime.validate import check
from tests.runtime.conftest import SpecData

GOLDEN = Path(__file__).parent / "golden"
SPECS = sorted(GOLDEN.glob("*.yaml"))
UPDATE = os.environ.get("PLINTH_UPDATE_GOLDEN") == "1"
LABELS = {"plinth_deployment": "d-123", "plinth_revision": "3"}


def _golden_record(path: Path) -> dict[str, Any]:
    spec, issues = check(yaml.safe_load(path.read_text()))
    assert spec is not None, issues
    roles = plan(spec, deployment_labels=LABELS).model_dump(mode="json")["roles"]
    for role in roles:
        # One "--flag value" string per flag keeps the files readable and their diffs small.
        role["args"] = [" ".join([flag, *values]) for flag, values in split_argv(role["args"])]
    return {"issues": [[i.severity, i.code, i.field] for i in issues], "roles": roles}


def test_reference_configs_are_all_present() -> None:
    names = {path.stem for path in SPECS}
    assert {
        "llama-3.1-8b-h100",
        "llama-3.3-70b-tp4-fp8-eagle3-h100",
        "deepseek-v3-tp16-2x-h200",
        "llama-3.1-70b-pd-h100",
        "llama-3.1-8b-ngram-h100",
        "llama-3.3-70b-nvfp4-b200",
        "llama-3.3-70b-nvfp4-h100",
    } <= names


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_golden_plan(path: Path) -> None:
    expected_path = path.with_suffix(".plan.json")
    record = _golden_record(path)
    if UPDATE:
        expected_path.write_text(json.dumps(record, indent=1) + "\n")
    assert record == json.loads(expected_path.read_text())
    assert not [issue for issue in record["issues"] if issue[0] == "error"]


def test_nvfp4_on_h100_is_warned_and_online_nvfp4_refused(spec_data: SpecData) -> None:
    record = _golden_record(GOLDEN / "llama-3.3-70b-nvfp4-h100.yaml")
    assert ["warning", "quantization_emulated", "quantization.method"] in record["issues"]
    _, issues = check(
        spec_data(
            model={"source": "Qwen/Qwen3-235B-A22B"},
            parallelism={"tp": 8},
            quantization={"method": "nvfp4_online"},
        )
    )
    assert ("quantization_unsupported_gpu", "quantization.method") in [
        (i.code, i.field) for i in issues if i.is_error
    ]


def _spec(data: dict[str, Any]) -> RuntimeSpec:
    spec, issues = check(data)
    assert spec is not None and not [i for i in issues if i.is_error], issues
    return spec


def _all_roles() -> list[RolePlan]:
    roles: list[RolePlan] = []
    for path in SPECS:
        roles += plan(_spec(yaml.safe_load(path.read_text())), deployment_labels=LABELS).roles
    return roles


@pytest.mark.parametrize("role", _all_roles(), ids=lambda r: r.role)
def test_every_golden_role_parses_with_its_launcher(role: RolePlan) -> None:
    catalog = smg_flags() if role.role == "router" else sglang_flags()
    assert catalog.check(role.args) == []


def test_engines_always_serve_metrics_on_all_interfaces(spec_data: SpecData) -> None:
    engine = plan(_spec(spec_data()), deployment_labels={"id": "a"}).roles[0]
    assert engine.command == ["python3", "-m", "sglang.launch_server"]
    for flag in ("--enable-metrics", "--enable-cache-report"):
        assert flag in engine.args
    assert engine.args[engine.args.index("--host") + 1] == "0.0.0.0"
    assert engine.args[engine.args.index("--extra-metric-labels") + 1] == '{"id":"a"}'
    assert "--tp" not in engine.args and "--tp-size" in engine.args


def test_engine_probes(spec_data: SpecData) -> None:
    engine = plan(_spec(spec_data())).roles[0]
    assert engine.startup_probe and engine.startup_probe.path == "/ready"
    assert engine.readiness_probe and engine.readiness_probe.path == "/ready"
    assert engine.liveness_probe and engine.liveness_probe.path == "/health"
    assert engine.liveness_probe.timeout_s > 20
    allowance = engine.startup_probe.period_s * engine.startup_probe.failure_threshold
    assert allowance >= 600


def test_multi_node_group_shape() -> None:
    spec = _spec(yaml.safe_load((GOLDEN / "deepseek-v3-tp16-2x-h200.yaml").read_text()))
    engine = plan(spec).roles[0]
    assert (engine.nodes_per_replica, engine.gpus_per_node) == (2, 8)
    assert engine.multi_node and engine.extra_ports == {"dist_init": 20000}
    assert engine.args[engine.args.index("--nnodes") + 1] == "2"
    assert "--node-rank" not in engine.args  # set per pod by the driver, see with_flag


def test_disaggregated_roles() -> None:
    spec = _spec(yaml.safe_load((GOLDEN / "llama-3.1-70b-pd-h100.yaml").read_text()))
    launch = plan(spec)
    assert [r.role for r in launch.roles] == ["prefill", "decode", "router"]
    prefill, decode, router = launch.roles
    assert prefill.extra_ports == {"bootstrap": 8998} and decode.replicas == 2
    assert "--pd-disaggregation" in router.args


def test_router_args_leave_discovery_to_the_driver(spec_data: SpecData) -> None:
    routing = {"placement": "first_fit", "cache_threshold": 0.4}
    router = plan(_spec(spec_data(routing=routing))).roles[-1]
    assert router.command == ["smg", "launch"]
    for flag in ("--worker-urls", "--service-discovery", "--selector"):
        assert flag not in router.args
    for flag in ("--policy", "--host", "--port", "--prometheus-port"):
        assert flag in router.args
    assert router.args[router.args.index("--cache-threshold") + 1] == "0.4"
    assert router.readiness_probe and router.readiness_probe.path == "/readiness"


def _flag(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_router_obeys_the_gateways_placement_by_default(spec_data: SpecData) -> None:
    # The gateway names each request's replica (gateway.placement); consistent_hashing obeys
    # x-smg-target-worker and places a request naming none by the gateway's routing key.
    args = plan(_spec(spec_data())).roles[-1].args
    assert PLINTH_ROUTING.placement == "by_count"
    assert _flag(args, "--policy") == "consistent_hashing"
    assert _flag(args, "--routing-key-headers") == ROUTING_KEY_HEADER
    assert "--cache-threshold" not in args and "--assignment-mode" not in args
    # smg's retries go to the named replica: the gateway sends what reached no engine elsewhere.
    assert "--disable-retries" in args
    assert gateway_places("cache_aware", "by_count", split=False)
    flags = [flag for flag, _ in split_argv(args)]
    assert len(flags) == len(set(flags))


def test_disaggregated_router_places_both_pools_by_key(spec_data: SpecData) -> None:
    # One slot cannot name a prefill and a decode replica: smg pins each key in both pools.
    data = spec_data(disaggregation={"enabled": True}, routing={"placement": "by_count"})
    args = plan(_spec(data)).roles[-1].args
    assert "--pd-disaggregation" in args and _flag(args, "--policy") == "manual"
    assert _flag(args, "--assignment-mode") == "min_group"
    assert int(_flag(args, "--max-idle-secs")) > 0
    assert not gateway_places("cache_aware", "by_count", split=True)


def test_placement_by_count_applies_to_cache_aware_only(spec_data: SpecData) -> None:
    data = spec_data(routing={"policy": "round_robin", "placement": "by_count"})
    args = plan(_spec(data)).roles[-1].args
    assert _flag(args, "--policy") == "round_robin" and "--routing-key-headers" not in args
    assert not gateway_places("round_robin", "by_count", split=False)


def test_tree_placement_gets_plinths_routing_defaults_not_smgs(spec_data: SpecData) -> None:
    args = plan(_spec(spec_data(routing={"placement": "first_fit"}))).roles[-1].args
    assert _flag(args, "--policy") == "cache_aware"
    assert float(_flag(args, "--cache-threshold")) == PLINTH_ROUTING.cache_threshold
    assert int(_flag(args, "--balance-abs-threshold")) == PLINTH_ROUTING.balance_abs_threshold
    assert float(_flag(args, "--balance-rel-threshold")) == PLINTH_ROUTING.balance_rel_threshold
    assert "--disable-worker-overload-protection" in args
    assert "--worker-overload-protection" not in args
    assert _flag(args, "--worker-warmup-secs") == "0"
    assert _flag(args, "--worker-warmup-divert-every") == "0"
    # Every flag is smg's (the plan refuses others), and none is repeated.
    flags = [flag for flag, _ in split_argv(args)]
    assert len(flags) == len(set(flags))


def test_smg_routing_is_what_the_smg_catalogue_defaults_to() -> None:
    # The bench prints Plinth's defaults next to smg's: the comparison holds only if these are.
    defaults = {spec.dest: spec.default for spec in smg_flags().flags()}
    assert SMG_ROUTING.cache_threshold == defaults["cache_threshold"]
    assert SMG_ROUTING.balance_abs_threshold == defaults["balance_abs_threshold"]
    assert SMG_ROUTING.balance_rel_threshold == defaults["balance_rel_threshold"]
    assert SMG_ROUTING.warmup_seconds == defaults["worker_warmup_secs"]
    # Protection is on unless disabled: smg's "--worker-overload-protection" defaults to None.
    assert defaults["disable_worker_overload_protection"] in (None, False)


def test_routing_knobs_set_in_the_spec_reach_the_router(spec_data: SpecData) -> None:
    routing = {
        "placement": "first_fit",
        "balance_abs_threshold": 4096,
        "balance_rel_threshold": 2.5,
        "overload_protection": True,
        "warmup_seconds": 30,
    }
    args = plan(_spec(spec_data(routing=routing))).roles[-1].args
    assert _flag(args, "--balance-abs-threshold") == "4096"
    assert _flag(args, "--balance-rel-threshold") == "2.5"
    assert "--worker-overload-protection" in args
    assert "--disable-worker-overload-protection" not in args
    assert _flag(args, "--worker-warmup-secs") == "30"
    # A warm-up window keeps smg's diversion cadence.
    assert "--worker-warmup-divert-every" not in args


def test_round_robin_router_carries_no_cache_aware_knobs(spec_data: SpecData) -> None:
    args = plan(_spec(spec_data(routing={"policy": "round_robin"}))).roles[-1].args
    assert not set(args) & set(cache_aware_args(SMG_ROUTING) + cache_aware_args(PLINTH_ROUTING))


def test_scale_to_zero_router_stays_ready_without_workers(spec_data: SpecData) -> None:
    data = spec_data(autoscaling={"min_replicas": 0, "max_replicas": 2, "scale_to_zero": True})
    launch = plan(_spec(data))
    assert launch.roles[0].replicas == 1
    router = launch.roles[-1]
    assert router.readiness_probe and router.readiness_probe.path == "/liveness"


def test_nvfp4_online_selects_the_trtllm_moe_runner(spec_data: SpecData) -> None:
    data = spec_data(
        model={"source": "Qwen/Qwen3-235B-A22B"},
        hardware={"gpu": "B200"},
        parallelism={"tp": 4},
        quantization={"method": "nvfp4_online"},
    )
    args = plan(_spec(data)).roles[0].args
    assert args[args.index("--moe-runner-backend") + 1] == "flashinfer_trtllm"


def test_extra_flags_come_last_in_sorted_order(spec_data: SpecData) -> None:
    extra = {"--tool-call-parser": "llama3", "--enable-torch-compile": True, "--log-level": "info"}
    args = plan(_spec(spec_data(runtime={"extra_flags": extra}))).roles[0].args
    assert args[-5:] == [
        "--enable-torch-compile",
        "--log-level",
        "info",
        "--tool-call-parser",
        "llama3",
    ]


def test_with_flag_replaces_or_appends() -> None:
    args = ["--port", "30000", "--enable-metrics", "--x", "a", "b"]
    assert with_flag(args, "--port", 31001) == [
        "--port",
        "31001",
        "--enable-metrics",
        "--x",
        "a",
        "b",
    ]
    assert with_flag(args, "--x", "c") == ["--port", "30000", "--enable-metrics", "--x", "c"]
    assert with_flag(args, "--node-rank", 1)[-2:] == ["--node-rank", "1"]
    assert with_flag(args, "--trust-remote-code")[-1] == "--trust-remote-code"
    assert with_flag(["--port=1"], "--port", 2) == ["--port", "2"]
    assert args == ["--port", "30000", "--enable-metrics", "--x", "a", "b"]  # untouched


def test_cuda_graphs_trimmed_to_the_endpoints_concurrency(spec_data: SpecData) -> None:
    """Issue 29 item 6: with ``cuda_graph_trim``, decode graphs are captured up to twice the
    autoscaler's per-replica concurrency (at most the running-request cap), not SGLang's 256."""

    def graph_bs(**batching: Any) -> str | None:
        data = spec_data(batching=batching, autoscaling={"concurrency_target": 8})
        args = plan(_spec(data)).roles[0].args
        flag = "--cuda-graph-max-bs-decode"
        return args[args.index(flag) + 1] if flag in args else None

    assert graph_bs() is None  # SGLang's own default
    assert graph_bs(cuda_graph_trim=True) == "16"
    assert graph_bs(cuda_graph_trim=True, max_running_requests=12) == "12"
    assert graph_bs(cuda_graph_trim=True, cuda_graph_max_bs_decode=64) == "64"


def test_deepep_reaches_the_engine_as_its_moe_a2a_backend(spec_data: SpecData) -> None:
    data = spec_data(
        model={"source": "deepseek-ai/DeepSeek-V3"},
        hardware={"gpu": "H200"},
        parallelism={"tp": 8, "attn_dp": 8, "ep": 8, "moe_a2a": "deepep"},
    )
    args = plan(_spec(data)).roles[0].args
    assert args[args.index("--moe-a2a-backend") + 1] == "deepep"
    assert sglang_flags().check(args) == []
    plain = plan(
        _spec(
            spec_data(
                model={"source": "deepseek-ai/DeepSeek-V3"},
                hardware={"gpu": "H200"},
                parallelism={"tp": 8, "ep": 8},
            )
        )
    )
    assert "--moe-a2a-backend" not in plain.roles[0].args


def test_two_node_deepep_engine_runs_attention_dp_over_every_gpu(spec_data: SpecData) -> None:
    """The engine the optimizer offers DeepSeek-V3 on 16 H200: one replica over two nodes, every
    GPU its own attention rank (SGLang 0.5.23's --attn-dp-size, which replaces the deprecated
    --enable-dp-attention --dp-size), whole experts through DeepEP."""
    data = spec_data(
        model={"source": "deepseek-ai/DeepSeek-V3"},
        hardware={"gpu": "H200"},
        parallelism={"tp": 16, "attn_dp": 16, "ep": 16, "moe_a2a": "deepep"},
    )
    spec, issues = check(data)
    assert spec is not None and not [i for i in issues if i.severity == "error"], issues
    role = plan(spec).roles[0]
    args = role.args
    for flag, value in (("--tp-size", "16"), ("--attn-dp-size", "16"), ("--ep-size", "16"),
                        ("--moe-a2a-backend", "deepep"), ("--nnodes", "2")):  # fmt: skip
        assert args[args.index(flag) + 1] == value
    assert (role.nodes_per_replica, role.gpus_per_node) == (2, 8)
    assert sglang_flags().check(args) == []
