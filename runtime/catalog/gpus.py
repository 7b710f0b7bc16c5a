"""The GPU catalogue: `GpuType` and lookups over `gpus.yaml`."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, computed_field

from runtime.catalog.data import read_yaml

_DATA = Path(__file__).with_name("gpus.yaml")
# The node label NVIDIA GPU feature discovery sets to the product name of a node's GPUs.
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


class UnknownGpuError(KeyError):
    """Raised by `get_gpu` for a name that is not in the catalogue; the message lists known ids."""

    def __str__(self) -> str:
        # KeyError's str() wraps the message in quotes; a person should read it plainly.
        return str(self.args[0]) if self.args else "unknown GPU"


class GpuType(BaseModel):
    """One GPU model as the memory and cost arithmetic sees it (dense figures, usable memory)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    name: str
    aliases: tuple[str, ...] = ()
    memory_gib: float = Field(gt=0)
    compute_capability: str
    hbm_bandwidth_gbs: float = Field(gt=0)
    # One direction of the link to host memory (PCIe or NVLink-C2C): HiCache's load-back path.
    host_link_gbs: float = Field(gt=0)
    node_host_memory_gib: float = Field(gt=0)
    bf16_tflops: float = Field(gt=0)
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None
    gpus_per_node: int = Field(ge=1)
    price_per_gpu_hour: float = Field(ge=0)
    # GPU_PRODUCT_LABEL's values on nodes with this GPU: a Kubernetes cluster's default GPU map.
    gpu_products: tuple[str, ...] = Field(min_length=1)

    @computed_field  # type: ignore[prop-decorator]  # pydantic's documented form for mypy
    @property
    def sm(self) -> int:
        """Compute capability as SGLang compares it: "9.0" -> 90, "10.3" -> 103."""
        major, _, minor = self.compute_capability.partition(".")
        return int(major) * 10 + int(minor or 0)

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib * 1024**3


@cache
def _load() -> tuple[GpuType, ...]:
    rows = read_yaml(_DATA)
    return tuple(GpuType.model_validate(row) for row in rows)


@cache
def _index() -> dict[str, GpuType]:
    index: dict[str, GpuType] = {}
    for gpu in _load():
        for key in (gpu.id, *gpu.aliases):
            index[key.lower()] = gpu
    return index


def list_gpus() -> list[GpuType]:
    """Every catalogued GPU, in catalogue order."""
    return list(_load())


def gpu_ids() -> list[str]:
    return [gpu.id for gpu in _load()]


def get_gpu(name: str) -> GpuType:
    """The GPU with this id or alias (case-insensitive); `UnknownGpuError` names the known ids."""
    gpu = _index().get(name.strip().lower())
    if gpu is None:
        raise UnknownGpuError(f"unknown GPU type {name!r}; known: {', '.join(gpu_ids())}")
    return gpu
