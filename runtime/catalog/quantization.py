"""The quantization catalogue: weight methods and KV-cache dtypes, over `quantization.yaml`.

One home for every fact about a format: SGLang's flag name and a person's label, its bytes per
value, the tensor-core path it computes on and from which SM that path is native, the SM below
which SGLang refuses it, how it runs where it is emulated, how far it moves the logits, and
whether a RuntimeSpec offers it. ``runtime.spec`` (accepted names), ``runtime.rules.quantization``
(GPU rules), ``runtime.memory`` (memory fit), ``runtime.optimize`` (choices), ``runtime.perf.quant``
(step times) and ``runtime.sim.memory`` (the simulator's memory and quality) all read it.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from runtime.catalog.data import read_yaml

_DATA = Path(__file__).with_name("quantization.yaml")

Compute = Literal["bf16", "fp8", "fp4"]
Noise = Literal[
    "eight_bit", "mixed_eight_four_bit", "calibrated_four_bit", "coarse_four_bit", "four_bit"
]


class ComputeGpu(Protocol):
    """What the catalogue asks of a GPU: the catalogue's `GpuType` and the physics' `GpuShape`."""

    @property
    def sm(self) -> int: ...
    @property
    def fp8_tflops(self) -> float | None: ...
    @property
    def fp4_tflops(self) -> float | None: ...


class ComputePath(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    native_sm: int = Field(ge=0)


class QuantFormat(BaseModel):
    """One weight quantization method or KV-cache dtype (see quantization.yaml for each field)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    label: str
    bytes: float = Field(gt=0)
    compute: Compute
    min_sm: int = Field(ge=0)
    emulated: str | None = None
    noise: Noise | None = None
    offered: bool


class ToolFormat(BaseModel):
    """A format Plinth's quantization jobs make (see quantization.yaml's tool_formats)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    label: str
    scheme: str
    serve_as: str
    priced_as: str
    calibrated: bool


class LayerDrift(BaseModel):
    """The simulator's per-layer drift model (see quantization.yaml's layer_drift)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shared_share: float = Field(ge=0, le=1)
    size_spread: float = Field(ge=0, lt=1)


class _Catalogue(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    compute_paths: dict[Compute, ComputePath]
    tool_formats: tuple[ToolFormat, ...]
    layer_drift: LayerDrift
    weights: tuple[QuantFormat, ...]
    kv_cache: tuple[QuantFormat, ...]


@cache
def _load() -> _Catalogue:
    return _Catalogue.model_validate(read_yaml(_DATA))


@cache
def _by_name(kind: Literal["weights", "kv_cache"]) -> dict[str, QuantFormat]:
    return {row.name: row for row in getattr(_load(), kind)}


def weight_format(method: str | None) -> QuantFormat | None:
    """The weight method named `method` (SGLang's spelling); None for none or an unknown name."""
    return None if method is None else _by_name("weights").get(method)


def tool_format(name: str) -> ToolFormat | None:
    """The quantization jobs' target format `name`; None for an unknown name."""
    return next((row for row in _load().tool_formats if row.name == name), None)


def layer_drift() -> LayerDrift:
    """How the simulator splits a quantized checkpoint's drift over its layers."""
    return _load().layer_drift


def tool_formats() -> tuple[str, ...]:
    """The formats a quantization job can make, in the catalogue's order."""
    return tuple(row.name for row in _load().tool_formats)


def kv_format(dtype: str) -> QuantFormat | None:
    """The KV-cache dtype named `dtype`; None for an unknown name."""
    return _by_name("kv_cache").get(dtype)


def quantization_methods() -> tuple[str, ...]:
    """The weight methods a RuntimeSpec accepts, in the catalogue's order."""
    return tuple(row.name for row in _load().weights if row.offered)


def kv_cache_dtypes() -> tuple[str, ...]:
    """The KV-cache dtypes a RuntimeSpec accepts, in the catalogue's order."""
    return tuple(row.name for row in _load().kv_cache if row.offered)


def catalogued_names() -> frozenset[str]:
    """Every weight method and KV-cache dtype the catalogue knows, offered or not."""
    catalogue = _load()
    return frozenset(row.name for row in (*catalogue.weights, *catalogue.kv_cache))


def quantization_labels() -> dict[str, str]:
    """Each offered weight method's label, by name (the console's quantization select)."""
    return {row.name: row.label for row in _load().weights if row.offered}


def kv_cache_labels() -> dict[str, str]:
    """Each offered KV-cache dtype's label, by name (the console's KV-cache select)."""
    return {row.name: row.label for row in _load().kv_cache if row.offered}


def native_sm(form: QuantFormat) -> int:
    """The SM from which `form` runs on its own tensor-core path (0 for BF16 compute)."""
    path = _load().compute_paths.get(form.compute)
    return 0 if path is None else path.native_sm


def runs_natively(gpu: ComputeGpu, form: QuantFormat) -> bool:
    """Whether `gpu` has `form`'s compute path: its SM and a peak figure for that precision."""
    if form.compute == "bf16":
        return True
    peak = gpu.fp8_tflops if form.compute == "fp8" else gpu.fp4_tflops
    return gpu.sm >= native_sm(form) and bool(peak)


def native_on(gpu: ComputeGpu, method: str) -> bool:
    """Whether weight method `method` computes natively on `gpu` (an unknown name: no)."""
    form = weight_format(method)
    return form is not None and runs_natively(gpu, form)


def kv_native_on(gpu: ComputeGpu, dtype: str) -> bool:
    """Whether a KV cache of `dtype` runs natively on `gpu` (an unknown name: no)."""
    form = kv_format(dtype)
    return form is not None and runs_natively(gpu, form)
