"""LoRA adapters (`lora` of a RuntimeSpec): one base model serving many fine-tunes, each addressed
by name (`"<served_name>:<adapter>"` in an OpenAI request's `model`, `lora_path` in a native one).

Parsed one field at a time, as every spec group; what relates the fields to each other, to the
base model and to SGLang 0.5.23's checks is `runtime.rules.lora`'s, the flags are rendered by
`lora_args`, and `lora_live_change` tells whether a change of spec is adapters only (applied to a
running engine with SGLang's `/load_lora_adapter` and `/unload_lora_adapter`, no restart).

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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, Field, field_validator
from pydantic_core import PydanticCustomError

from runtime.spec_base import ModelSource, RepoRevision, SpecGroup

if TYPE_CHECKING:
    from runtime.catalog import ModelArch
    from runtime.spec import RuntimeSpec

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
    """One adapter: its name, where its weights come from and its rank (`r` of its
    adapter_config.json, which sizes SGLang's memory pool and is checked against max_lora_rank).
    `pinned` keeps it in a GPU pool slot (SGLang's pinned adapters are never evicted)."""

    name: AdapterName
    source: ModelSource = Field(description="Hugging Face repo id, or a path in the model cache")
    revision: RepoRevision | None = None
    rank: PositiveInt = Field(le=1024, description="the adapter's LoRA rank r")
    pinned: bool = False


class LoraSettings(SpecGroup):
    """LoRA serving. On when `adapters` lists any, or when `enabled` is true (adapters then come
    later through the load API: `max_lora_rank` and `target_modules` must be set, as SGLang
    cannot size its pool from adapters it has not seen). None takes SGLang 0.5.23's default;
    `max_lora_rank` unset is the largest adapter's rank."""

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


def lora_args(spec: RuntimeSpec) -> list[str]:
    """SGLang's LoRA flags for `spec.lora`, every setting spelled out (SGLang's defaults where
    unset), so the argv says what runs."""
    lora = spec.lora
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


@dataclass(frozen=True)
class LoraLiveChange:
    """What to do on a running engine to go from one spec to the next: unload these adapter
    names, then load these adapters (`POST /unload_lora_adapter {"lora_name"}`, then
    `POST /load_lora_adapter {"lora_name", "lora_path", "pinned"}`)."""

    load: tuple[LoraAdapter, ...]
    unload: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.load and not self.unload


def lora_live_change(old: RuntimeSpec, new: RuntimeSpec) -> LoraLiveChange | None:
    """The adapter loads and unloads that take a running engine of `old` to `new`, or None when
    the change needs a restart (a rollout).

    Live only when everything but `lora.adapters` is equal and LoRA was already on (the engine
    sized its pool at start-up from max_lora_rank and target_modules: those, and every other
    lora setting, are start-up flags). An adapter whose source, revision or pinning changed is
    unloaded and loaded again under its name. The new adapters must also fit what the running
    pool was sized for: a rank above the pool's, or (target modules left to SGLang) any new
    adapter at all when the engine took its modules from the first adapters, needs a restart.
    Validate `new` first; this does not repeat the rules.
    """
    if not old.lora.active or not new.lora.active:
        return None
    if _without_adapters(old) != _without_adapters(new):
        return None
    before = {adapter.name: adapter for adapter in old.lora.adapters}
    after = {adapter.name: adapter for adapter in new.lora.adapters}
    unload = tuple(name for name, adapter in before.items() if after.get(name) != adapter)
    load = tuple(adapter for name, adapter in after.items() if before.get(name) != adapter)
    if load and not _pool_takes(old, load):
        return None
    return LoraLiveChange(load=load, unload=unload)


def _without_adapters(spec: RuntimeSpec) -> str:
    data = spec.model_dump(mode="json")
    lora = data["lora"]
    lora["adapters"] = []
    # An unset max_lora_rank follows the adapters; what the engine runs with is the resolved one.
    lora["max_lora_rank"] = spec.lora.resolved_max_lora_rank
    lora["enabled"] = True
    return json.dumps(data, sort_keys=True)


def _pool_takes(spec: RuntimeSpec, adapters: Sequence[LoraAdapter]) -> bool:
    if spec.lora.target_modules is None:
        # SGLang sized the pool for the union of the first adapters' modules, which Plinth does
        # not know: a new adapter may target others, and would be refused.
        return False
    return all(adapter.rank <= spec.lora.resolved_max_lora_rank for adapter in adapters)


# The modules SGLang can adapt, per family of base architecture (its model code's names).
_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj")
_MLA_ATTENTION = ("q_a_proj", "kv_a_proj_with_mqa", "q_b_proj", "kv_b_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj", "gate_up_proj")
_EMBEDDINGS = ("embed_tokens", "lm_head")
# Fused names SGLang also accepts: each stands for its parts, so they are not counted twice.
_FUSED = ("qkv_proj", "gate_up_proj")


def base_modules(arch: ModelArch) -> tuple[str, ...]:
    """The target modules `arch` has (MLA models: DeepSeek's compressed-attention projections)."""
    attention = _MLA_ATTENTION if arch.kv_lora_rank is not None else _ATTENTION
    return attention + _MLP + _EMBEDDINGS


def resolved_target_modules(lora: LoraSettings, arch: ModelArch) -> tuple[str, ...]:
    """The modules the pool holds weights for: the setting (`all` expanded to the attention and
    MLP projections), or, left to SGLang, every projection (the adapters' own lists are not
    known before they load, so the memory fit assumes the most)."""
    modules = lora.target_modules or ["all"]
    if "all" in modules:
        return tuple(m for m in base_modules(arch) if m not in _EMBEDDINGS + _FUSED)
    return tuple(modules)


def module_dims(arch: ModelArch, module: str) -> tuple[int, int]:
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


def _layers_of(module: str, arch: ModelArch) -> int:
    return 1 if module in _EMBEDDINGS else arch.num_layers


def adapter_params(arch: ModelArch, modules: Sequence[str], rank: int) -> int:
    """Weights of one adapter of `rank` over `modules` of `arch` (all layers, all GPUs): the one
    home of the adapter-size fact, read by the memory fit, the optimizer and the simulator."""
    total = 0
    for module in modules:
        inputs, outputs = module_dims(arch, module)
        total += rank * (inputs + outputs) * _layers_of(module, arch)
    return total
