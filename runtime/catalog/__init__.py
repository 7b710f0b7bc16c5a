"""Catalogues as data: GPUs, models, and the launch flags of each supported SGLang/smg version."""

from __future__ import annotations

from runtime.catalog.flags import (
    DEFAULT_SGLANG_VERSION,
    SMG_VERSION,
    SUPPORTED_SGLANG_VERSIONS,
    FlagCatalog,
    FlagProblem,
    FlagSpec,
    sglang_flags,
    smg_flags,
)
from runtime.catalog.gpus import (
    GPU_PRODUCT_LABEL,
    GpuType,
    UnknownGpuError,
    get_gpu,
    gpu_ids,
    list_gpus,
)
from runtime.catalog.models import ModelArch, get_model, list_models

__all__ = [
    "DEFAULT_SGLANG_VERSION",
    "GPU_PRODUCT_LABEL",
    "SMG_VERSION",
    "SUPPORTED_SGLANG_VERSIONS",
    "FlagCatalog",
    "FlagProblem",
    "FlagSpec",
    "GpuType",
    "ModelArch",
    "UnknownGpuError",
    "get_gpu",
    "get_model",
    "gpu_ids",
    "list_gpus",
    "list_models",
    "sglang_flags",
    "smg_flags",
]
