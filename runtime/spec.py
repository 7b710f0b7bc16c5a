"""RuntimeSpec: the typed settings of one endpoint (DESIGN.md section 4).

Field names are part of Plinth's stored revisions and REST API: rename nothing. Parsing is strict
(no silent string-to-number coercion, no unknown fields) and checks one field at a time; rules that
relate several fields, the catalogues or the hardware live in `runtime.validate`.

Errors raised here carry a stable error type (`unknown_gpu`, `unknown_quantization`, ...) that
`runtime.validate.check` turns into an Issue code.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    Field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from runtime.argv import unprintable
from runtime.catalog import (
    DEFAULT_SGLANG_VERSION,
    SUPPORTED_SGLANG_VERSIONS,
    ModelArch,
    UnknownGpuError,
    get_gpu,
    get_model,
    gpu_ids,
    kv_cache_dtypes,
    quantization_methods,
)
from runtime.kv_tiers import KvCacheSettings
from runtime.lora import LoraSettings
from runtime.spec_base import (
    MODEL_CACHE_PATH as MODEL_CACHE_PATH,
)
from runtime.spec_base import (
    IbDevices,
    ModelSource,
    RepoRevision,
    SpecGroup,
)

# The quantization methods and KV-cache dtypes Plinth offers, with SGLang 0.5.23's spelling: the
# quantization catalogue's offered rows (runtime/catalog/quantization.yaml, which also holds the
# GPU minimums runtime.validate checks).
QUANTIZATION_METHODS: tuple[str, ...] = quantization_methods()
KV_CACHE_DTYPES: tuple[str, ...] = kv_cache_dtypes()

# Names people bring from older recipes, with the 0.5.23 spelling to suggest (SGLANG.md section 0).
_QUANTIZATION_HINTS = {
    "nvfp4": "use 'modelopt_fp4' for NVFP4 checkpoints, or 'nvfp4_online' to convert MoE weights",
    "fp4": "use 'modelopt_fp4' for NVFP4 checkpoints",
    "int4": "use 'awq' or 'gptq' (whichever the checkpoint was made with)",
    "int8": "use 'w8a8_int8'",
}
_KV_HINTS = {"fp8": "use 'fp8_e4m3' (or 'fp8_e5m2')", "bfloat16": "use 'bf16'"}

SpeculativeAlgorithm = Literal["none", "EAGLE", "EAGLE3", "MTP", "NGRAM", "STANDALONE"]
# prefix_hash (smg 1.13): a consistent-hash ring over the prompt's first tokens, with bounded load.
RoutingPolicy = Literal["cache_aware", "prefix_hash", "round_robin", "power_of_two", "random"]
# How a cache-aware router places a prompt prefix it has not seen (runtime.routing_key).
RoutingPlacement = Literal["by_count", "first_fit"]
SchedulePolicy = Literal[
    "fcfs", "lpm", "random", "dfs-weight", "lof", "priority", "routing-key", "hrrn",
    "shortest-prefill-first",
]  # fmt: skip
TransferBackend = Literal["mooncake", "mooncake_tcp", "nixl", "mori", "fake"]
# One scalar per flag: a list would be spread into argv, and a later item could be any flag.
ExtraFlagValue = bool | int | float | str

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Engine environment variables a spec may set. An allowlist, because the engine is a Python
# process and names such as PYTHONWARNINGS, LD_PRELOAD or BROWSER turn a setting into code
# execution on the host that runs it.
ENV_PREFIXES = (
    "SGLANG_", "SGL_", "NCCL_", "CUDA_", "NVIDIA_", "TORCH_", "TORCHINDUCTOR_", "TRITON_",
    "FLASHINFER_", "HF_", "HUGGING_FACE_", "TRANSFORMERS_", "TOKENIZERS_", "OMP_", "MKL_",
    "MC_", "NVSHMEM_", "GLOO_", "UCX_", "NIXL_", "PLINTH_SIM_",
)  # fmt: skip
# Within those prefixes, names that point at files or directories (HF_HOME, TRITON_CACHE_DIR,
# NCCL_DEBUG_FILE, HF_TOKEN_PATH...): the same hole as `--download-dir /` through the environment.
_HOST_PATH_ENV = re.compile(r".*_(?:DIR|PATH|FILE|HOME|CACHE|FOLDER)(?:_[A-Z0-9]+)?")
PositiveInt = Annotated[int, Field(ge=1)]
Port = Annotated[int, Field(ge=1, le=65535)]


def _env_value(value: str) -> str:
    char = unprintable(value)
    if char is not None:
        raise PydanticCustomError(
            "unsafe_value",
            "contains the control character U+{code}",
            {"code": f"{ord(char):04X}", "fix": "remove control characters and line breaks"},
        )
    return value


# Every group's base (strict, frozen, argv-safe text), kept under its old name here.
_Group = SpecGroup
EnvValue = Annotated[str, AfterValidator(_env_value)]


class Architecture(_Group):
    """The numbers of a model that is not in the catalogue (from its config.json)."""

    architecture: str = "LlamaForCausalLM"
    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    vocab_size: PositiveInt
    params_b: float = Field(gt=0, description="total parameters, billions")
    active_params_b: float | None = Field(default=None, gt=0, description="MoE: active per token")
    max_context: PositiveInt
    has_mtp: bool = False
    num_experts: PositiveInt | None = None
    sliding_window_layers: int = Field(default=0, ge=0)
    kv_lora_rank: PositiveInt | None = None
    qk_rope_head_dim: int | None = Field(default=None, ge=0)
    checkpoint_bytes_per_param: float = Field(default=2.0, gt=0)


class ModelSettings(_Group):
    source: ModelSource = Field(
        min_length=1, description=f"Hugging Face repo id, or a path under {MODEL_CACHE_PATH}/"
    )
    revision: RepoRevision | None = None
    served_name: str | None = Field(default=None, min_length=1, max_length=256)
    trust_remote_code: bool = False
    context_length: PositiveInt | None = None
    dtype: Literal["auto", "bfloat16", "float16"] = "auto"
    hf_token_secret: str | None = Field(default=None, description="name of a Secret with HF_TOKEN")
    architecture: Architecture | None = None

    @field_validator("served_name")
    @classmethod
    def _no_colon(cls, value: str | None) -> str | None:
        if value is not None and ":" in value:
            raise PydanticCustomError(
                "served_name_colon",
                "served name '{value}' contains ':', which SGLang reserves for "
                "'base:adapter' LoRA names",
                {"value": value, "fix": f"use {value.replace(':', '-')!r}"},
            )
        return value

    def arch(self) -> ModelArch | None:
        """The architecture: the inline description if given, else the catalogue's entry."""
        if self.architecture is None:
            return get_model(self.source)
        data = self.architecture.model_dump()
        data["active_params_b"] = data["active_params_b"] or data["params_b"]
        return ModelArch(id=self.source, hf_repo=self.source, **data)


class HardwareSettings(_Group):
    gpu: str = Field(description="GPU type id from the catalogue, e.g. H100-SXM")
    gpus_per_replica: PositiveInt | None = Field(default=None, description="default tp x pp")
    nodes_per_replica: PositiveInt | None = Field(default=None, description="default: fewest")
    price_per_gpu_hour: float | None = Field(default=None, ge=0, description="USD, overrides")

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        try:
            return get_gpu(value).id
        except UnknownGpuError as error:
            raise PydanticCustomError(
                "unknown_gpu",
                "unknown GPU type '{value}'",
                {"value": value, "fix": "use one of: " + ", ".join(gpu_ids())},
            ) from error


class ParallelismSettings(_Group):
    """Inside one replica. Data parallelism is `autoscaling` replicas behind the router."""

    tp: PositiveInt = 1
    pp: PositiveInt = 1
    attn_dp: PositiveInt = 1
    ep: PositiveInt = 1
    moe_a2a: Literal["none", "deepep"] = Field(
        default="none",
        description="how tokens reach whole experts (SGLang --moe-a2a-backend): 'deepep' sends "
        "each token only to the GPUs holding its experts (DeepEP, DeepGEMM experts); needs ep = tp",
    )


class BatchingSettings(_Group):
    """None means "let SGLang choose" (it sizes most of these from GPU memory)."""

    max_running_requests: PositiveInt | None = None
    max_prefill_tokens: PositiveInt | None = None
    chunked_prefill_size: int | None = Field(default=None, ge=-1, description="-1 disables")
    schedule_policy: SchedulePolicy | None = None
    schedule_conservativeness: float | None = Field(default=None, ge=0)
    mem_fraction_static: float | None = Field(default=None, gt=0, lt=1)
    cuda_graph_max_bs_decode: PositiveInt | None = None
    cuda_graph_trim: bool = Field(default=False, description="CUDA graphs up to the concurrency")
    page_size: PositiveInt | None = None
    radix_cache: bool = True
    mixed_chunk: bool = False
    stream_interval: PositiveInt | None = None

    @field_validator("chunked_prefill_size")
    @classmethod
    def _no_zero_chunk(cls, value: int | None) -> int | None:
        if value == 0:
            raise PydanticCustomError(
                "invalid_value", "0 is not a chunk size", {"fix": "use -1 to disable chunking"}
            )
        return value


class QuantizationSettings(_Group):
    method: str | None = Field(default=None, description="weights; None: as the checkpoint ships")
    kv_cache_dtype: str = "auto"

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str | None) -> str | None:
        if value is None or value in QUANTIZATION_METHODS:
            return value
        hint = _QUANTIZATION_HINTS.get(value.lower(), "known: " + ", ".join(QUANTIZATION_METHODS))
        raise PydanticCustomError(
            "unknown_quantization",
            "'{value}' is not a quantization method of SGLang 0.5.23",
            {"value": value, "fix": hint},
        )

    @field_validator("kv_cache_dtype")
    @classmethod
    def _known_kv_dtype(cls, value: str) -> str:
        if value in KV_CACHE_DTYPES:
            return value
        hint = _KV_HINTS.get(value.lower(), "known: " + ", ".join(KV_CACHE_DTYPES))
        raise PydanticCustomError(
            "unknown_kv_cache_dtype",
            "'{value}' is not a KV-cache dtype of SGLang 0.5.23",
            {"value": value, "fix": hint},
        )


class NgramSettings(_Group):
    min_bfs_breadth: PositiveInt | None = None
    max_bfs_breadth: PositiveInt | None = None
    match_type: Literal["BFS", "PROB"] | None = None
    max_trie_depth: PositiveInt | None = None
    capacity: PositiveInt | None = None


class SpeculatorSettings(_Group):
    algorithm: SpeculativeAlgorithm = "none"
    draft_model: ModelSource | None = Field(default=None, min_length=1)
    draft_model_revision: RepoRevision | None = None
    num_steps: PositiveInt | None = None
    eagle_topk: PositiveInt | None = None
    num_draft_tokens: PositiveInt | None = None
    ngram: NgramSettings = NgramSettings()

    @property
    def enabled(self) -> bool:
        return self.algorithm != "none"


class PoolSettings(_Group):
    """One side of a prefill/decode split; `tp` None means parallelism.tp."""

    replicas: PositiveInt = 1
    tp: PositiveInt | None = None


class DisaggregationSettings(_Group):
    enabled: bool = False
    prefill: PoolSettings = PoolSettings()
    decode: PoolSettings = PoolSettings()
    transfer_backend: TransferBackend = "mooncake"
    bootstrap_port: Port = 8998
    ib_device: IbDevices | None = None
    decode_radix_cache: bool = False


class RoutingSettings(_Group):
    """The smg knobs that decide whether cache-aware routing keeps a prefix on its replica.

    None takes Plinth's measured default (`PLINTH_ROUTING`), not smg's: smg 1.13's defaults
    (`SMG_ROUTING`) move requests off the replica holding their prefix, which `bench/routing.py`
    measures. Only the cache-aware policy reads them; the router is always given all of them.
    `prefix_hash` runs with smg's own ring settings (measured below cache_aware, not tuned).

    `placement` decides where cache_aware sends a prefix it has not seen. `by_count` (Plinth's
    default): the gateway names each request's shareable prefix with a routing key
    (`runtime.routing_key`), gives a new key to the replica with the least recent traffic (of
    those about as busy, the one caching the smallest working set; the name is from when it
    counted keys) and keeps it there (`gateway.placement`); the router sends each request to the
    replica named, and the tree's knobs are not read. On a P/D split the router places keys
    itself (smg's manual policy, `min_group`). `first_fit`: smg's cache-aware tree places it,
    with the knobs below. Measured in `PLINTH_ROUTING`'s comment.
    """

    policy: RoutingPolicy = "cache_aware"
    placement: RoutingPlacement | None = Field(
        default=None,
        description="by_count: a new prefix to the least busy replica; first_fit: smg's tree",
    )
    cache_threshold: float | None = Field(
        default=None, ge=0, le=1, description="minimum prefix-match ratio to stick to a replica"
    )
    balance_abs_threshold: int | None = Field(
        default=None,
        ge=0,
        description="load gap (smg's units) above which affinity yields to load balancing",
    )
    balance_rel_threshold: float | None = Field(
        default=None, ge=1, description="load ratio above which affinity yields to balancing"
    )
    # A plain bool: the wizard's checkbox always posts a value. smg's default is on.
    overload_protection: bool = Field(
        default=False, description="divert requests from a replica smg judges overloaded"
    )
    warmup_seconds: int | None = Field(
        default=None, ge=0, le=3600, description="divert some traffic to a new replica this long"
    )

    def resolved(self) -> RoutingDefaults:
        """The values the router runs with: each unset knob takes Plinth's default."""
        knobs = {
            name: getattr(PLINTH_ROUTING, name) if value is None else value
            for name, value in self.model_dump(exclude={"policy", "placement"}).items()
        }
        return RoutingDefaults(placement=self.effective_placement, **knobs)

    @property
    def effective_placement(self) -> RoutingPlacement:
        """`placement`, or Plinth's default when unset."""
        return self.placement or PLINTH_ROUTING.placement

    def tuned(self) -> list[str]:
        """The tree knobs set away from Plinth's defaults (read by cache_aware's first_fit only)."""
        knobs = self.model_dump(exclude={"policy", "placement"})
        return [name for name, value in knobs.items() if value is not None and value is not False]


@dataclass(frozen=True)
class RoutingDefaults:
    """One complete set of cache-aware knob values."""

    cache_threshold: float
    balance_abs_threshold: int
    balance_rel_threshold: float
    overload_protection: bool
    warmup_seconds: int
    placement: RoutingPlacement = "first_fit"


# smg 1.13.0's own defaults (runtime/catalog/smg-1.13.0.json), for comparison in bench/routing.py.
SMG_ROUTING = RoutingDefaults(
    cache_threshold=0.3,
    balance_abs_threshold=64,
    balance_rel_threshold=1.5,
    overload_protection=True,
    warmup_seconds=60,
)
# Plinth's knobs for smg's cache-aware tree (`placement: first_fit`; the deployed defaults until
# placement by count), chosen with bench/routing.py (4 simulated L40S engines, load 64, Qwen3-32B
# FP8; hit rate on shared-prefix / many-tenant / multi-turn; 10 s runs, noisy to ~5 points). The
# load-balance fallback is what costs most: smg's 64 / 1.5 gave 80% on shared-prefix (with overload
# and warm-up off), 32768 / 2 gave 94% / 69%, 131072 / 4 gave 92% / 69%, and never falling back
# (1,000,000 / 100) 99% / 71-76% with the best throughput on both; a hot prefix then queues at its
# engine (max_running_requests) rather than spilling its cache. Overload protection and warm-up
# diversion move requests the same way and are off. A cache threshold of 0.5 measured as 0.3 (smg's)
# on many-tenant and multi-turn, so 0.3 stays. Caveat, measured: with no fallback a tenant stays
# where smg first put it, and smg's first placement can be uneven (6 of 16 tenants on one engine),
# which cost 25 s shared-prefix runs 99% -> 85-93% in about half the repeats. Looked for a
# placement-aware setting (Issue 15, 25 s shared-prefix runs, bench/routing.py): none found in smg
# 1.13. smg places an unseen prefix without counting the prefixes a worker holds: 16 first requests
# at once went 13/1/1/1 or 7/7/1/1, one at a time 6/4/3/3, staggered under load 13/1/1/1, whatever
# the cache threshold (0.8 too) or --selection-accounting-ttl-ms 5000. From a clumped start nothing
# recovered: balance 32/2 61%, 16/1.5 67%, overload protection on the waiting queue alone 52%; with
# smg's placement, --overload-token-usage-threshold 0.9 gave 99.4% in 5 runs of 6 and 75% on 9/3/2/2
# (no gain), --balance-token-usage-threshold 0.25 46-57%, balance 8/1.3 74-75%. prefix_hash (a
# policy a spec may pick) places by hash, which 16 tenants on 4 engines leave above 5 per engine
# about 70% of the time: 63% with its defaults, 82% with load factor 1.5 and abs 16. So the tree
# keeps these, with the caveat, measured again (5 runs): 99.4% on 5/4/4/3, 5/4/4/3 and 4/4/4/4
# placements, 91.6% on 6/4/4/2 and 90.6% on 6/5/3/2; multi-turn 98.2%, many-tenant 72.3%, both the
# best of the four configurations bench/routing.py compares.
# Placement by count (Issue 15; `placement: by_count`, the default since; by recent traffic since
# issue 29): the gateway placed each
# routing key on the replica holding the fewest keys, in a table in Redis (`gateway.placement`),
# and smg's consistent_hashing obeys the slot it names (`x-smg-target-worker`). Measured with
# bench/routing.py (same shape, load 64, 25 s runs): shared-prefix 99.4% in 10 runs of 10, 4/4/4/4
# every time, whether tenants' first requests overlapped (5 runs) or arrived one at a time (5
# runs); in one full table 99.4% against the tree's 80.8% (8/4/3/1) with 5.9x its throughput,
# multi-turn 98.2% (tree 98.2%), many-tenant 70.0% (tree 71.7%; 1.11x its throughput). Earlier,
# smg's manual policy with `min_group` was tried for this: it counts keys in flight, not keys
# placed, so tenants arriving one at a time landed at random (63-68%).
PLINTH_ROUTING = RoutingDefaults(
    cache_threshold=0.3,
    balance_abs_threshold=1_000_000,
    balance_rel_threshold=100.0,
    overload_protection=False,
    warmup_seconds=0,
    placement="by_count",
)


class SloTargets(_Group):
    """Latency targets the SLO autoscaling policy sizes replicas for (p90, milliseconds)."""

    ttft_p90_ms: float | None = Field(default=None, gt=0, description="time to first token, p90")
    itl_p90_ms: float | None = Field(default=None, gt=0, description="inter-token latency, p90")

    @model_validator(mode="after")
    def _some_target(self) -> SloTargets:
        if self.ttft_p90_ms is None and self.itl_p90_ms is None:
            raise PydanticCustomError(
                "slo_without_target",
                "an SLO policy needs a TTFT or an ITL target",
                {"fix": "set ttft_p90_ms and/or itl_p90_ms, or remove slo to scale on "
                        "concurrency_target"},
            )  # fmt: skip
        return self


class PoolBounds(_Group):
    """How far the autoscaler may move one prefill or decode pool; it starts at the pool's size
    (disaggregation.<pool>.replicas). min <= max is checked by runtime.validate."""

    min_replicas: PositiveInt = 1
    max_replicas: PositiveInt = 1


class AutoscalingSettings(_Group):
    """Two policies: in-flight requests per replica (``concurrency_target``), or, when ``slo`` is
    set, latency targets the performance model turns into per-replica capacity (then
    ``concurrency_target`` is not read). ``prefill``/``decode`` let the SLO policy scale a
    disaggregated endpoint's pools, each within its own bounds."""

    min_replicas: int = Field(default=1, ge=0)
    max_replicas: PositiveInt = 1
    concurrency_target: PositiveInt = Field(default=32, description="in-flight requests/replica")
    target_utilization: float = Field(default=0.7, gt=0, le=1)
    window_seconds: PositiveInt = 60
    scale_down_delay_seconds: int = Field(default=300, ge=0)
    scale_to_zero: bool = False
    scale_to_zero_after_seconds: PositiveInt = 900
    prestage_weights: bool = Field(default=False, description="weights kept on the GPU's nodes")
    warm_replicas: int = Field(
        default=0,
        ge=0,
        description="replicas kept loaded with their GPU memory released when scaled down",
    )
    slo: SloTargets | None = Field(
        default=None, description="TTFT/ITL p90 targets; replaces concurrency_target when set"
    )
    prefill: PoolBounds | None = Field(
        default=None, description="prefill pool bounds (disaggregated, with slo); unset: fixed"
    )
    decode: PoolBounds | None = Field(
        default=None, description="decode pool bounds (disaggregated, with slo); unset: fixed"
    )

    def pool_bounds(self, role: str) -> PoolBounds | None:
        """The bounds of pool ``role`` ("prefill" or "decode"); None: the pool keeps its size."""
        bounds: PoolBounds | None = getattr(self, role)
        return bounds


class RuntimeSettings(_Group):
    sglang_version: str = DEFAULT_SGLANG_VERSION
    image: str | None = Field(default=None, min_length=1, description="default: lmsysorg/sglang")
    router_image: str | None = Field(default=None, min_length=1)
    extra_flags: dict[str, ExtraFlagValue] = Field(default_factory=dict)
    env: dict[str, EnvValue] = Field(default_factory=dict)

    @field_validator("sglang_version")
    @classmethod
    def _supported_version(cls, value: str) -> str:
        if value not in SUPPORTED_SGLANG_VERSIONS:
            raise PydanticCustomError(
                "unsupported_version",
                "SGLang {value} is not supported",
                {"value": value, "fix": "use " + " or ".join(SUPPORTED_SGLANG_VERSIONS)},
            )
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            # fullmatch: match() with '$' would let a trailing newline through.
            if not _ENV_NAME.fullmatch(name):
                raise PydanticCustomError(
                    "invalid_env_name",
                    "'{name}' is not a valid environment variable name",
                    {"name": name, "fix": "use letters, digits and '_' only"},
                )
            if not name.upper().startswith(ENV_PREFIXES):
                raise PydanticCustomError(
                    "env_name_not_allowed",
                    "'{name}' is not an engine setting Plinth passes on",
                    {"name": name, "fix": "use a name starting with " + ", ".join(ENV_PREFIXES)},
                )
            if _HOST_PATH_ENV.fullmatch(name.upper()):
                raise PydanticCustomError(
                    "env_name_not_allowed",
                    "'{name}' points the engine at a host path, which Plinth places itself",
                    {"name": name, "fix": "remove it; the model cache and logs are Plinth's"},
                )
        return value

    @property
    def engine_image(self) -> str:
        return self.image or default_engine_image(self.sglang_version)


def default_engine_image(sglang_version: str) -> str:
    """The public SGLang image of a version: what runs unless the spec or the cluster says."""
    return f"lmsysorg/sglang:v{sglang_version}"


class RuntimeSpec(_Group):
    """All settings of one endpoint; only `model.source` and `hardware.gpu` are required."""

    model: ModelSettings
    hardware: HardwareSettings
    parallelism: ParallelismSettings = ParallelismSettings()
    batching: BatchingSettings = BatchingSettings()
    quantization: QuantizationSettings = QuantizationSettings()
    speculator: SpeculatorSettings = SpeculatorSettings()
    disaggregation: DisaggregationSettings = DisaggregationSettings()
    routing: RoutingSettings = RoutingSettings()
    autoscaling: AutoscalingSettings = AutoscalingSettings()
    runtime: RuntimeSettings = RuntimeSettings()
    kv_cache: KvCacheSettings = KvCacheSettings()
    lora: LoraSettings = LoraSettings()

    def canonical_json(self) -> str:
        """Sorted, compact JSON of every field (defaults included): the revision's stored form."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def content_hash(self) -> str:
        """sha256 of the settings that differ from their defaults (sorted, compact JSON): equal
        settings give equal hashes, and a field a later version adds at its default leaves
        every stored revision's hash as it was. Hashing the defaults too (until 2026-12-05)
        made re-applying an endpoint's unchanged settings after such an upgrade a new revision
        and a rollout, and refused them at the quality gate its revision had passed."""
        changed = self.model_dump(mode="json", exclude_defaults=True)
        text = json.dumps(changed, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def served_model_name(self) -> str:
        return self.model.served_name or self.model.source
