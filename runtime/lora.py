"""LoRA adapters (`lora` of a RuntimeSpec): one base model serving many fine-tunes, each addressed
by name (`"<served_name>:<adapter>"` in an OpenAI request's `model`, `lora_path` in a native one).

Parsed one field at a time, as every spec group; what relates the fields to each other, to the
base model and to SGLang 0.5.23's checks is `runtime.rules.lora`'s, and `lora_args` renders the
flags. Whether a change of spec is adapters only (applied to a running engine with SGLang's
`/load_lora_adapter` and `/unload_lora_adapter`, no restart) is `runtime.lora_live`'s. The size
of an adapter (rank x target modules x layers) has its one home here: `adapter_params`.

SGLang's two limits, as 0.5.23 has them (`srt/lora`, `arg_groups/lora_hook.py`):
- `max_loras_per_batch`: GPU memory pool slots, i.e. distinct adapters one batch may hold. A
  request whose adapter has no slot waits; a slot whose adapter no running request uses is
  evicted by `eviction_policy` (lru or fifo) to make room. Pinned adapters keep their slot.
- `max_loaded_loras`: adapters loaded at all (their weights in host memory). A load beyond it is
  refused ("Maximum number of loaded LoRA adapters is N"); nothing is evicted from here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Annotated, Literal, Protocol

from pydantic import AfterValidator, Field, field_validator
from pydantic_core import PydanticCustomError

from runtime.spec_base import ModelSource, RepoRevision, SpecGroup

PositiveInt = Annotated[int, Field(ge=1)]

# SGLang 0.5.23's `--lora-target-modules` choices (tests/runtime/test_lora.py checks them against
# the flag catalogue). `all` means every module of the base model SGLang can adapt.
LoraTargetModule = Literal[
    "q_proj", "k_proj", "v_proj", "o_proj", "q_a_proj", "kv_a_proj_with_mqa", "q_b_proj",
    "kv_b_proj", "wq_b", "wk", "weights_proj", "gate_proj", "up_proj", "down_proj", "qkv_proj",
    "gate_up_proj", "embed_tokens", "lm_head", "qkvr", "wo_ud", "all",
]  # fmt: skip
# `--lora-backend`; `ascend` is Ascend-NPU only, so it is not offered on NVIDIA GPUs.
LoraBackend = Literal["csgmv", "triton", "triton_v2", "torch_native"]
LoraEvictionPolicy = Literal["lru", "fifo"]
# SGLang 0.5.23's defaults for the settings left unset (the flag catalogue's).
DEFAULT_MAX_LORAS_PER_BATCH = 8
DEFAULT_LORA_BACKEND: LoraBackend = "csgmv"
DEFAULT_EVICTION_POLICY: LoraEvictionPolicy = "lru"

# An adapter name: what a client writes after "<served_name>:" and what the gateway routes by.
# No ':' (SGLang splits `base:adapter` on it), no '=' (`--lora-paths name=path`), no '/', so a
# name is never mistaken for a repository id or a path.
_ADAPTER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


def _adapter_name(value: str) -> str:
    if _ADAPTER_NAME.fullmatch(value):
        return value
    raise PydanticCustomError(
        "invalid_adapter_name",
        "'{value}' is not an adapter name: clients write it after '<model>:' in requests",
        {"value": value, "fix": "use letters, digits, '.', '_' and '-' (no ':', '/' or '='), "
                                "at most 128"},
    )  # fmt: skip


AdapterName = Annotated[str, AfterValidator(_adapter_name)]


class LoraAdapter(SpecGroup):
    """One LoRA adapter: its name, where its weights come from, and its rank.

    `rank` is `r` of its adapter_config.json, which sizes SGLang's memory pool and is checked
    against max_lora_rank. `pinned` keeps it in a GPU pool slot (never evicted)."""

    name: AdapterName
    source: ModelSource = Field(description="Hugging Face repo id, or a path in the model cache")
    revision: RepoRevision | None = None
    rank: PositiveInt = Field(le=1024, description="the adapter's LoRA rank r")
    pinned: bool = False


class LoraSettings(SpecGroup):
    """LoRA serving: fine-tunes of the base model, each addressed by name.

    On when `adapters` lists any, or when `enabled` is true (adapters then come later through
    the load API: `max_lora_rank` and `target_modules` must be set, as SGLang cannot size its
    pool from adapters it has not seen). None takes SGLang 0.5.23's default; `max_lora_rank`
    unset is the largest adapter's rank."""

    enabled: bool = False
    adapters: list[LoraAdapter] = Field(default_factory=list)
    max_loras_per_batch: PositiveInt | None = Field(
        default=None, description="distinct adapters in one batch (GPU pool slots); default 8"
    )
    max_loaded_loras: PositiveInt | None = Field(
        default=None, description="adapters loaded at once (host memory); default: no limit"
    )
    max_lora_rank: PositiveInt | None = Field(
        default=None, le=1024, description="largest rank the pool holds; default: adapters' max"
    )
    target_modules: list[LoraTargetModule] | None = Field(
        default=None, description="modules the pool holds weights for; default: the adapters'"
    )
    backend: LoraBackend | None = Field(default=None, description="default csgmv")
    eviction_policy: LoraEvictionPolicy | None = Field(default=None, description="default lru")

    @field_validator("target_modules")
    @classmethod
    def _modules_listed_once(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise PydanticCustomError(
                "duplicate_target_module",
                "a target module is listed twice",
                {"fix": "list each module once"},
            )
        return value

    @property
    def active(self) -> bool:
        """Whether the engine runs with LoRA on."""
        return self.enabled or bool(self.adapters)

    @property
    def resolved_max_loras_per_batch(self) -> int:
        return self.max_loras_per_batch or DEFAULT_MAX_LORAS_PER_BATCH

    @property
    def resolved_max_lora_rank(self) -> int:
        """The pool's rank: the setting, else the largest adapter's (0 when neither is known)."""
        if self.max_lora_rank is not None:
            return self.max_lora_rank
        return max((adapter.rank for adapter in self.adapters), default=0)

    @property
    def resolved_backend(self) -> LoraBackend:
        return self.backend or DEFAULT_LORA_BACKEND

    @property
    def resolved_eviction_policy(self) -> LoraEvictionPolicy:
        return self.eviction_policy or DEFAULT_EVICTION_POLICY

    def adapter(self, name: str) -> LoraAdapter | None:
        return next((adapter for adapter in self.adapters if adapter.name == name), None)


def adapter_path(adapter: LoraAdapter) -> str:
    """What the engine loads the adapter from (SGLang's `lora_path`): the repo id or cache path."""
    return adapter.source


def lora_paths_arg(adapter: LoraAdapter) -> str:
    """One `--lora-paths` item: `name=path`, or SGLang's JSON form when the adapter is pinned
    (the only form that carries `pinned`)."""
    if adapter.pinned:
        item = {"lora_name": adapter.name, "lora_path": adapter_path(adapter), "pinned": True}
        return json.dumps(item, separators=(",", ":"))
    return f"{adapter.name}={adapter_path(adapter)}"


def lora_args(lora: LoraSettings) -> list[str]:
    """SGLang's LoRA flags for a spec's `lora`, every setting spelled out (SGLang's defaults
    where unset), so the argv says what runs."""
    if not lora.active:
        return []
    args = ["--enable-lora"]
    if lora.adapters:
        args += ["--lora-paths", *(lora_paths_arg(adapter) for adapter in lora.adapters)]
    if lora.resolved_max_lora_rank:
        args += ["--max-lora-rank", str(lora.resolved_max_lora_rank)]
    if lora.target_modules:
        args += ["--lora-target-modules", *lora.target_modules]
    args += ["--max-loras-per-batch", str(lora.resolved_max_loras_per_batch)]
    if lora.max_loaded_loras is not None:
        args += ["--max-loaded-loras", str(lora.max_loaded_loras)]
    args += ["--lora-backend", lora.resolved_backend]
    args += ["--lora-eviction-policy", lora.resolved_eviction_policy]
    return args


class ArchDims(Protocol):
    """The model widths an adapter's size depends on: the catalogue's ModelArch and the physics'
    ModelShape both have them."""

    @property
    def num_layers(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def num_attention_heads(self) -> int: ...
    @property
    def num_kv_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def intermediate_size(self) -> int | None: ...
    @property
    def num_experts(self) -> int | None: ...
    @property
    def kv_lora_rank(self) -> int | None: ...
    @property
    def qk_rope_head_dim(self) -> int | None: ...


# The modules SGLang can adapt, per family of base architecture (its model code's names).
_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj")
_MLA_ATTENTION = ("q_a_proj", "kv_a_proj_with_mqa", "q_b_proj", "kv_b_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj", "gate_up_proj")
_EMBEDDINGS = ("embed_tokens", "lm_head")
# Fused names SGLang also accepts: each stands for its parts, so they are not counted twice.
_FUSED = ("qkv_proj", "gate_up_proj")
# The GEMMs SGLang runs a module's LoRA in: q/k/v ride the fused QKV projection and gate/up the
# fused gate-up one, so each group is one shrink and one expand kernel per layer.
_KERNEL_GROUP = {
    **dict.fromkeys(("q_proj", "k_proj", "v_proj", "qkv_proj"), "qkv"),
    **dict.fromkeys(("gate_proj", "up_proj", "gate_up_proj"), "gate_up"),
}
# LoRA weights are kept in the model's dtype (BF16/FP16) whatever the base's quantization.
LORA_BYTES_PER_PARAM = 2.0


def base_modules(arch: ArchDims) -> tuple[str, ...]:
    """The target modules `arch` has (MLA models: DeepSeek's compressed-attention projections)."""
    attention = _MLA_ATTENTION if arch.kv_lora_rank is not None else _ATTENTION
    return attention + _MLP + _EMBEDDINGS


def expand_modules(modules: Sequence[str] | None, arch: ArchDims) -> tuple[str, ...]:
    """The modules a pool holds weights for: `modules` with `all` expanded to the attention and
    MLP projections; None (left to SGLang, which takes the adapters' own lists, unknown before
    they load) counts as `all`, so the memory fit assumes the most."""
    modules = list(modules or ["all"])
    if "all" in modules:
        return tuple(m for m in base_modules(arch) if m not in _EMBEDDINGS + _FUSED)
    return tuple(modules)


def resolved_target_modules(lora: LoraSettings, arch: ArchDims) -> tuple[str, ...]:
    return expand_modules(lora.target_modules, arch)


def module_dims(arch: ArchDims, module: str) -> tuple[int, int]:
    """(input, output) width of one adapted projection of one layer; an adapter of rank r adds
    r x (input + output) weights there (A: r x input, B: output x r). MoE MLP modules count
    every routed expert (SGLang holds a LoRA pair per expert). MLA widths are approximations:
    the catalogue keeps no q_lora_rank, so it is taken as 3 x kv_lora_rank (DeepSeek-V3's)."""
    hidden, heads, kv = arch.hidden_size, arch.num_attention_heads, arch.num_kv_heads
    q_out, kv_out = heads * arch.head_dim, kv * arch.head_dim
    inter = arch.intermediate_size or 4 * hidden
    experts = arch.num_experts or 1
    kv_rank = arch.kv_lora_rank or 0
    dims: dict[str, tuple[int, int]] = {
        "q_proj": (hidden, q_out),
        "k_proj": (hidden, kv_out),
        "v_proj": (hidden, kv_out),
        "qkv_proj": (3 * hidden, q_out + 2 * kv_out),
        "o_proj": (q_out, hidden),
        "q_a_proj": (hidden, 3 * kv_rank),
        "kv_a_proj_with_mqa": (hidden, kv_rank + (arch.qk_rope_head_dim or 0)),
        "q_b_proj": (3 * kv_rank, q_out),
        "kv_b_proj": (kv_rank, 2 * q_out),
        "gate_proj": (hidden * experts, inter * experts),
        "up_proj": (hidden * experts, inter * experts),
        "down_proj": (inter * experts, hidden * experts),
        "gate_up_proj": (2 * hidden * experts, 2 * inter * experts),
        "embed_tokens": (arch.vocab_size, hidden),
        "lm_head": (hidden, arch.vocab_size),
    }
    return dims.get(module, (hidden, hidden))


def _layers_of(module: str, arch: ArchDims) -> int:
    return 1 if module in _EMBEDDINGS else arch.num_layers


def adapter_params(arch: ArchDims, modules: Sequence[str], rank: int) -> int:
    """Weights of one adapter of `rank` over `modules` of `arch` (all layers, all GPUs): the one
    home of the adapter-size fact, read by the memory fit, the optimizer and the simulator."""
    total = 0
    for module in modules:
        inputs, outputs = module_dims(arch, module)
        total += rank * (inputs + outputs) * _layers_of(module, arch)
    return total


def adapter_kernels(arch: ArchDims, modules: Sequence[str]) -> int:
    """LoRA kernels one forward pass runs for an adapter over `modules`: a shrink and an expand
    per fused projection per layer (embeddings once)."""
    groups = {_KERNEL_GROUP.get(module, module) for module in modules}
    return sum(2 * _layers_of(group, arch) for group in groups)


def adapter_bytes(arch: ArchDims, lora: LoraSettings, rank: int) -> float:
    """Bytes of one adapter of `rank` over the pool's target modules (all GPUs together)."""
    modules = resolved_target_modules(lora, arch)
    return adapter_params(arch, modules, rank) * LORA_BYTES_PER_PARAM


def adapter_pool_bytes(lora: LoraSettings, arch: ArchDims, shards: int) -> float:
    """GPU memory of SGLang's adapter pool on each of `shards` GPUs (TP x PP split it as they
    split the layers): max_loras_per_batch slots, each sized for max_lora_rank over the target
    modules. 0 with LoRA off. Adapters beyond the slots wait in host memory, not counted here."""
    if not lora.active:
        return 0.0
    slot = adapter_bytes(arch, lora, lora.resolved_max_lora_rank)
    return lora.resolved_max_loras_per_batch * slot / shards
