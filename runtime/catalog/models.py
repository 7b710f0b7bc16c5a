"""The model catalogue: `ModelArch` (architecture numbers) and lookups over `models.yaml`."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from runtime.catalog.data import read_yaml

_DATA = Path(__file__).with_name("models.yaml")


class ModelArch(BaseModel):
    """What Plinth needs to know about a model's shape; also the form of an inline description."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    hf_repo: str = ""
    aliases: tuple[str, ...] = ()
    architecture: str = "LlamaForCausalLM"
    num_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    intermediate_size: int | None = Field(default=None, ge=1)
    num_attention_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    vocab_size: int = Field(ge=1)
    params_b: float = Field(gt=0)
    active_params_b: float = Field(default=0.0, ge=0)
    max_context: int = Field(ge=1)
    has_mtp: bool = False
    num_experts: int | None = Field(default=None, ge=1)
    experts_per_token: int | None = Field(default=None, ge=1)
    sliding_window_layers: int = Field(default=0, ge=0)
    kv_lora_rank: int | None = Field(default=None, ge=1)
    qk_rope_head_dim: int | None = Field(default=None, ge=0)
    checkpoint_quantization: str | None = None
    checkpoint_bytes_per_param: float = Field(default=2.0, gt=0)
    draft_algorithm: str | None = None
    draft_for: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _dense_active_params(self) -> ModelArch:
        # Dense models activate every parameter; filling it here keeps arithmetic branch-free.
        if self.active_params_b == 0.0:
            object.__setattr__(self, "active_params_b", self.params_b)
        return self

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None and self.active_params_b < self.params_b

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    def kv_bytes_per_token(self, kv_dtype_bytes: float, tp: int = 1) -> float:
        """KV-cache bytes one token occupies across all layers, on ONE GPU of a `tp`-wide group.

        MLA caches one compressed latent (kv_lora_rank + rope dims) per layer, replicated on every
        rank. Otherwise K and V heads are split across TP ranks, but a rank never holds less than
        one KV head: when tp exceeds the KV heads, heads are replicated. Sliding-window layers
        are left out (see `full_attention_layers`).
        """
        if self.kv_lora_rank is not None:
            latent = self.kv_lora_rank + (self.qk_rope_head_dim or 0)
            return float(self.num_layers * latent * kv_dtype_bytes)
        heads_per_rank = max(1.0, self.num_kv_heads / max(tp, 1))
        return 2.0 * self.full_attention_layers * heads_per_rank * self.head_dim * kv_dtype_bytes

    @property
    def full_attention_layers(self) -> int:
        # Sliding-window layers keep only the last window's KV, a bounded cost per request that
        # SGLang pools separately; only full-attention layers grow with the context.
        return self.num_layers - self.sliding_window_layers

    def weight_bytes(self, bytes_per_param: float) -> float:
        """Bytes of all weights at `bytes_per_param` (before any parallel split)."""
        return self.params_b * 1e9 * bytes_per_param


@cache
def _load() -> tuple[ModelArch, ...]:
    rows = read_yaml(_DATA)
    return tuple(ModelArch.model_validate(row) for row in rows)


@cache
def _index() -> dict[str, ModelArch]:
    index: dict[str, ModelArch] = {}
    for model in _load():
        keys = [model.id, model.hf_repo, *model.aliases]
        keys += [key.rsplit("/", 1)[-1] for key in keys if "/" in key]
        for key in keys:
            index.setdefault(key.lower(), model)
    return index


def list_models() -> list[ModelArch]:
    """Every catalogued model (targets and drafts), in catalogue order."""
    return list(_load())


def get_model(name_or_repo: str) -> ModelArch | None:
    """The model with this id, HF repo or alias; also tries the part after the last '/'."""
    key = name_or_repo.strip().rstrip("/").lower()
    index = _index()
    found = index.get(key)
    if found is None and "/" in key:
        found = index.get(key.rsplit("/", 1)[-1])
    return found
