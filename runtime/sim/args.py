"""Command line of the simulated engine: the SGLang launch flags it models, plus ``--sim-*``.

The simulator lists which SGLang flags it models; their names, aliases, types, defaults and
choices are read from SGLang 0.5.23's flag catalogue (``runtime.catalog``, the same data Plinth
checks plans against), so a malformed value is refused with argparse's usual message and exit
status 2, as SGLang would. SGLang flags the simulator does not model are ignored with one
warning line. Options that stand in for what SGLang learns from the GPU come from ``--sim-*``
flags or ``PLINTH_SIM_*`` environment variables, so a driver can set them without changing the
engine's argv.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.catalog import FlagCatalog, FlagSpec, sglang_flags
from runtime.sim.clock import CLOCK_MODES

_HUMAN_INT = re.compile(r"\A\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]i?)?\s*\Z")
_SI = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_IEC = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def human_readable_int(value: str) -> int:
    """SGLang's integer type for sizes: ``32k`` = 32000, ``32Ki`` = 32768, ``1M``, ``1Mi``."""
    match = _HUMAN_INT.match(value)
    if match is None:
        raise ValueError(value)
    number, suffix = match.groups()
    scale = 1
    if suffix:
        lowered = suffix.lower()
        scale = _IEC[lowered] if lowered.endswith("i") else _SI[lowered]
    return int(float(number) * scale)


def loads(value: str) -> Any:
    """JSON flags (named like SGLang's parser type, so its error message reads the same)."""
    return json.loads(value)


@dataclass(frozen=True)
class SimOptions:
    """What a real engine would learn from its GPU and weights, plus test controls."""

    gpu: str = "H100-SXM"
    time_scale: float = 1.0
    clock: str = "realtime"
    startup_delay: float = 0.0
    output_len_mean: int = 200
    spec_accept_rate: float | None = None  # None: the catalogue's figure for (target, draft)
    crash_after_requests: int = 0
    error_rate: float = 0.0
    stall_after_tokens: int = 0
    stall_seconds: float = 0.0
    slowdown: float = 1.0
    drain_timeout: float = 60.0
    # Answer as an engine that accepts ignore_eos / min_tokens but does not honour them.
    ignore_length_pins: bool = False
    # Start phases take their modelled time (``runtime.sim.startup``); off, they take none.
    cold_start: bool = False
    # HiCache's storage tier read rate, GB/s (None: the backend's figure, runtime.perf.kv_tiers).
    storage_gbs: float | None = None


@dataclass(frozen=True)
class EngineArgs:
    """The SGLang launch flags the simulator models, with SGLang's defaults."""

    model_path: str
    served_model_name: str
    tokenizer_path: str | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    attn_dp_size: int = 1
    ep_size: int = 1
    moe_a2a_backend: str = "none"
    context_length: int | None = None
    dtype: str = "auto"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    mem_fraction_static: float | None = None
    max_running_requests: int | None = None
    max_queued_requests: int | None = None
    max_total_tokens: int | None = None
    max_prefill_tokens: int = 16384
    chunked_prefill_size: int | None = None
    page_size: int | None = None
    schedule_policy: str = "fcfs"
    schedule_conservativeness: float = 1.0
    disable_radix_cache: bool = False
    enable_hierarchical_cache: bool = False
    hicache_ratio: float | None = None
    hicache_size: int = 0
    hicache_write_policy: str = "write_through"
    hicache_storage_backend: str | None = None
    hicache_storage_prefetch_policy: str = "timeout"
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    disaggregation_mode: str = "null"
    disaggregation_bootstrap_port: int = 8998
    disaggregation_transfer_backend: str = "mooncake"
    api_key: str | None = None
    admin_api_key: str | None = None
    enable_metrics: bool = False
    export_metrics_to_file: bool = False
    export_metrics_to_file_dir: str | None = None
    extra_metric_labels: dict[str, str] = field(default_factory=dict)
    enable_cache_report: bool = False
    stream_response_default_include_usage: bool = False
    incremental_streaming_output: bool = False
    stream_interval: int = 1
    random_seed: int | None = None
    log_level: str = "info"
    skip_server_warmup: bool = False
    cuda_graph_max_bs_decode: int | None = None
    cuda_graph_bs_decode: list[int] | None = None
    disable_decode_cuda_graph: bool = False
    download_dir: str | None = None
    enable_lora: bool | None = None  # None: on when --lora-paths lists adapters, as SGLang
    lora_paths: list[str] | None = None
    max_loras_per_batch: int = 8
    max_loaded_loras: int | None = None
    max_lora_rank: int | None = None
    lora_target_modules: list[str] | None = None
    lora_backend: str = "csgmv"
    lora_eviction_policy: str = "lru"
    sim: SimOptions = field(default_factory=SimOptions)
    ignored_flags: tuple[str, ...] = ()
    launch_command: str = ""


# The SGLang flags the simulator models, by canonical name; everything else about them comes from
# the catalogue. Other SGLang flags are accepted and ignored (one warning line).
MODELLED_FLAGS: tuple[str, ...] = (
    "--model-path",
    "--tokenizer-path",
    "--served-model-name",
    "--host",
    "--port",
    "--tp-size",
    "--pp-size",
    "--dp-size",
    "--attn-dp-size",
    "--ep-size",
    "--moe-a2a-backend",
    "--context-length",
    "--dtype",
    "--quantization",
    "--kv-cache-dtype",
    "--mem-fraction-static",
    "--max-running-requests",
    "--max-queued-requests",
    "--max-total-tokens",
    "--max-prefill-tokens",
    "--chunked-prefill-size",
    "--page-size",
    "--schedule-policy",
    "--schedule-conservativeness",
    "--disable-radix-cache",
    "--enable-hierarchical-cache",
    "--hicache-ratio",
    "--hicache-size",
    "--hicache-write-policy",
    "--hicache-storage-backend",
    "--hicache-storage-prefetch-policy",
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-num-steps",
    "--speculative-eagle-topk",
    "--speculative-num-draft-tokens",
    "--disaggregation-mode",
    "--disaggregation-bootstrap-port",
    "--disaggregation-transfer-backend",
    "--api-key",
    "--admin-api-key",
    "--enable-metrics",
    "--export-metrics-to-file",
    "--export-metrics-to-file-dir",
    "--extra-metric-labels",
    "--enable-cache-report",
    "--stream-response-default-include-usage",
    "--incremental-streaming-output",
    "--stream-interval",
    "--random-seed",
    "--log-level",
    "--skip-server-warmup",
    "--cuda-graph-max-bs-decode",
    "--cuda-graph-bs-decode",
    "--disable-decode-cuda-graph",
    "--download-dir",
    "--enable-lora",
    "--lora-paths",
    "--max-loras-per-batch",
    "--max-loaded-loras",
    "--max-lora-rank",
    "--lora-target-modules",
    "--lora-backend",
    "--lora-eviction-policy",
)

# The catalogue's value types (its names for SGLang's argparse types) as Python converters.
_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "human_int": human_readable_int,
    "json": loads,
}


def modelled_flag(flag: str, catalog: FlagCatalog | None = None) -> FlagSpec:
    """The catalogue's entry for a flag the simulator models (KeyError if it has none)."""
    spec = (catalog or sglang_flags()).get(flag)
    if spec is None:
        raise KeyError(f"{flag} is not in the SGLang flag catalogue")
    return spec


def speculative_algorithms() -> tuple[str, ...]:
    """The algorithms SGLang's start-up accepts for ``--speculative-algorithm``."""
    return modelled_flag("--speculative-algorithm").choices or ()


def _non_negative_float(value: str) -> float:
    number = float(value)
    if number < 0:
        raise ValueError(value)
    return number


def _positive_float(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise ValueError(value)
    return number


def _fraction(value: str) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:
        raise ValueError(value)
    return number


def _clock_mode(value: str) -> str:
    if value not in CLOCK_MODES:
        raise ValueError(value)
    return value


def _switch(value: str) -> bool:
    if value.lower() not in ("0", "1", "true", "false"):
        raise ValueError(value)
    return value.lower() in ("1", "true")


def _non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


# (flag names, dest, type, env var, help)
_SimFlag = tuple[tuple[str, ...], str, Callable[[str], Any], str, str]
_SIM_FLAGS: tuple[_SimFlag, ...] = (
    (("--sim-gpu",), "gpu", str, "PLINTH_SIM_GPU", "GPU type from the catalogue (H100-SXM)"),
    (
        ("--time-scale", "--sim-time-scale"),
        "time_scale",
        _positive_float,
        "PLINTH_SIM_TIME_SCALE",
        "simulated seconds per real second (1)",
    ),
    (
        ("--sim-clock",),
        "clock",
        _clock_mode,
        "PLINTH_SIM_CLOCK",
        "realtime: paced to real time x --time-scale; fast: busy periods never sleep (realtime)",
    ),
    (
        ("--sim-startup-delay",),
        "startup_delay",
        _non_negative_float,
        "PLINTH_SIM_STARTUP_DELAY",
        "real seconds before the engine is ready (0)",
    ),
    (
        ("--sim-output-len-mean",),
        "output_len_mean",
        int,
        "PLINTH_SIM_OUTPUT_LEN_MEAN",
        "mean natural answer length in tokens before EOS (200)",
    ),
    (
        ("--sim-spec-accept-rate",),
        "spec_accept_rate",
        _fraction,
        "PLINTH_SIM_SPEC_ACCEPT_RATE",
        "chance the first draft token is accepted, overriding the catalogue's figure for the "
        "(target, draft) pair; deeper drafts decay per algorithm",
    ),
    (
        ("--sim-cold-start",),
        "cold_start",
        _switch,
        "PLINTH_SIM_COLD_START",
        "1: download, load, CUDA graph capture and warm-up take their modelled (simulated) "
        "time at start, from the model's size and the catalogue's figures (0)",
    ),
    (
        ("--sim-crash-after-requests",),
        "crash_after_requests",
        _non_negative_int,
        "PLINTH_SIM_CRASH_AFTER_REQUESTS",
        "exit(1) once this many generation requests have been served (0: never)",
    ),
    (
        ("--sim-error-rate",),
        "error_rate",
        _fraction,
        "PLINTH_SIM_ERROR_RATE",
        "fraction of generation requests answered with HTTP 500 (0)",
    ),
    (
        ("--sim-stall-after-tokens",),
        "stall_after_tokens",
        _non_negative_int,
        "PLINTH_SIM_STALL_AFTER_TOKENS",
        "stall each stream after this many tokens (0: never)",
    ),
    (
        ("--sim-stall-seconds",),
        "stall_seconds",
        _non_negative_float,
        "PLINTH_SIM_STALL_SECONDS",
        "real seconds a stalled stream waits (0)",
    ),
    (
        ("--sim-slowdown",),
        "slowdown",
        _positive_float,
        "PLINTH_SIM_SLOWDOWN",
        "every engine step takes this many times its roofline duration, as on a degraded GPU (1)",
    ),
    (
        ("--sim-drain-timeout",),
        "drain_timeout",
        _non_negative_float,
        "PLINTH_SIM_DRAIN_TIMEOUT",
        "real seconds SIGTERM waits for in-flight requests (60)",
    ),
    (
        ("--sim-storage-gbs",),
        "storage_gbs",
        _positive_float,
        "PLINTH_SIM_STORAGE_GBS",
        "HiCache storage tier read rate in GB/s (default: the backend's typical figure)",
    ),
    (
        ("--sim-ignore-length-pins",),
        "ignore_length_pins",
        _switch,
        "PLINTH_SIM_IGNORE_LENGTH_PINS",
        "1: accept ignore_eos and min_tokens but answer as if they were not sent, as an engine "
        "without them would (0)",
    ),
)


def build_parser(catalog: FlagCatalog | None = None) -> argparse.ArgumentParser:
    """The engine's parser; ``catalog`` is SGLang's flag catalogue (the default version's)."""
    parser = argparse.ArgumentParser(
        prog="python -m runtime.sim",
        description="Simulated SGLang 0.5.23 engine (no GPU). Unmodelled SGLang flags are ignored.",
    )
    for flag in MODELLED_FLAGS:
        _add_sglang_flag(parser, modelled_flag(flag, catalog))
    sim = parser.add_argument_group("simulator")
    for names, dest, kind, env, text in _SIM_FLAGS:
        sim.add_argument(
            *names, dest=f"sim_{dest}", type=kind, default=None, help=f"{text}; ${env}"
        )
    return parser


def _add_sglang_flag(parser: argparse.ArgumentParser, spec: FlagSpec) -> None:
    names = (spec.flag, *spec.aliases)
    if spec.store_true:
        # SGLang's tri-state switches (--enable-lora: None until resolved) keep their None.
        default = None if spec.default is None else bool(spec.default)
        parser.add_argument(*names, dest=spec.dest, action="store_true", default=default)
        return
    parser.add_argument(
        *names,
        dest=spec.dest,
        type=_CONVERTERS[spec.type or "str"],
        nargs=spec.nargs if spec.nargs in ("+", "*", "?") else None,
        default=spec.default,
        choices=spec.parser_choices,
    )


def parse_engine_args(
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    warn: Callable[[str], None] | None = None,
) -> EngineArgs:
    """Parse an SGLang argv (exits 2 on a malformed value, as argparse does)."""
    env = os.environ if env is None else env
    warn = warn or _print_warning
    parser = build_parser()
    namespace, unknown = parser.parse_known_args(list(argv))
    ignored = tuple(a for a in unknown if a.startswith("-"))
    if ignored:
        warn(f"WARNING: runtime.sim ignores flags it does not model: {' '.join(ignored)}")
    values = vars(namespace)
    if values["model_path"] is None:
        parser.error("the following arguments are required: --model-path/--model")
    sim = _sim_options(parser, values, env)
    return _engine_args(parser, values, sim, ignored, argv)


def _sim_options(
    parser: argparse.ArgumentParser, values: dict[str, Any], env: Mapping[str, str]
) -> SimOptions:
    chosen: dict[str, Any] = {}
    for _names, dest, kind, env_name, _ in _SIM_FLAGS:
        value = values.pop(f"sim_{dest}")
        if value is None and env.get(env_name):
            try:
                value = kind(env[env_name])
            except ValueError:
                parser.error(f"environment {env_name}: invalid value: {env[env_name]!r}")
        if value is not None:
            chosen[dest] = value
    return SimOptions(**chosen)


def _engine_args(
    parser: argparse.ArgumentParser,
    values: dict[str, Any],
    sim: SimOptions,
    ignored: tuple[str, ...],
    argv: Sequence[str],
) -> EngineArgs:
    labels = values.pop("extra_metric_labels") or {}
    if not isinstance(labels, dict):
        parser.error("argument --extra-metric-labels: must be a JSON object")
    served = values.pop("served_model_name") or values["model_path"]
    return EngineArgs(
        served_model_name=served,
        extra_metric_labels={str(k): str(v) for k, v in labels.items()},
        sim=sim,
        ignored_flags=ignored,
        launch_command=" ".join(["python3 -m sglang.launch_server", *argv]),
        **values,
    )


def _print_warning(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class StartupError(Exception):
    """A flag combination SGLang accepts at parse time but refuses when the server starts."""


def check_engine_args(args: EngineArgs) -> None:
    """SGLang's start-up checks that the simulator models (raises StartupError)."""
    if ":" in args.served_model_name:
        raise StartupError("--served-model-name must not contain ':' (reserved for LoRA adapters)")
    if args.tp_size < 1 or args.pp_size < 1 or args.dp_size < 1 or args.attn_dp_size < 1:
        raise StartupError("parallel sizes must be >= 1")
    if args.attn_dp_size > 1 and args.tp_size % args.attn_dp_size:
        raise StartupError("tp_size must be divisible by attn_dp_size")
    if args.mem_fraction_static is not None and not 0 < args.mem_fraction_static < 1:
        raise StartupError("--mem-fraction-static must be in (0, 1)")
    if args.schedule_conservativeness < 0:
        raise StartupError("--schedule-conservativeness must be >= 0")
    if args.hicache_storage_backend is not None and not args.enable_hierarchical_cache:
        raise StartupError("--hicache-storage-backend needs --enable-hierarchical-cache")
    if args.enable_hierarchical_cache and args.disable_radix_cache:
        raise StartupError("--enable-hierarchical-cache needs the radix cache")
    if args.disaggregation_mode == "prefill" and args.disaggregation_transfer_backend == "fake":
        raise StartupError("the fake transfer backend is for decode-only benchmarking, not prefill")
    if args.export_metrics_to_file and not args.export_metrics_to_file_dir:
        raise StartupError(
            "--export-metrics-to-file-dir is required when --export-metrics-to-file is enabled"
        )
    _check_speculative(args)
    _check_lora(args)


def _check_lora(args: EngineArgs) -> None:
    """SGLang's ``check_lora_server_args`` (``arg_groups/lora_hook.py``), as it asserts."""
    if args.max_loras_per_batch <= 0:
        raise StartupError("max_loras_per_batch must be positive")
    if not args.enable_lora and not args.lora_paths:
        return
    modules = args.lora_target_modules or []
    if "all" in modules and len(modules) > 1:
        raise StartupError(
            "If 'all' is specified in --lora-target-modules, it should be the only module "
            "specified."
        )
    if not args.lora_paths and not (args.max_lora_rank and modules):
        raise StartupError(
            "When no initial --lora-paths is provided, you need to specify both --max-lora-rank "
            "and --lora-target-modules for LoRA initialization."
        )
    loaded = args.max_loaded_loras
    if loaded is not None and loaded < args.max_loras_per_batch:
        raise StartupError(
            "max_loaded_loras should be greater than or equal to max_loras_per_batch. "
            f"max_loaded_loras={loaded}, max_loras_per_batch={args.max_loras_per_batch}"
        )
    if loaded is not None and len(args.lora_paths or []) > loaded:
        raise StartupError(
            "The number of LoRA paths should not exceed max_loaded_loras. "
            f"max_loaded_loras={loaded}, lora_paths={len(args.lora_paths or [])}"
        )


def _check_speculative(args: EngineArgs) -> None:
    algo = args.speculative_algorithm
    if algo is None:
        return
    if algo.upper() not in speculative_algorithms():
        raise StartupError(f"Unknown speculative algorithm name: {algo}")
    if args.speculative_num_steps is None and (
        args.speculative_eagle_topk is not None or args.speculative_num_draft_tokens is not None
    ):
        raise StartupError(
            "speculative_eagle_topk and speculative_num_draft_tokens require speculative_num_steps"
        )
