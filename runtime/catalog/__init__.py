"""Catalogues as data: GPUs, models, quantization formats, and the launch flags of each supported
SGLang/smg version."""

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
from runtime.catalog.quantization import (
    QuantFormat,
    kv_cache_dtypes,
    kv_cache_labels,
    kv_format,
    kv_native_on,
    native_on,
    native_sm,
    quantization_labels,
    quantization_methods,
    weight_format,
)

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
    "QuantFormat",
    "UnknownGpuError",
    "get_gpu",
    "get_model",
    "gpu_ids",
    "kv_cache_dtypes",
    "kv_cache_labels",
    "kv_format",
    "kv_native_on",
    "list_gpus",
    "list_models",
    "native_on",
    "native_sm",
    "quantization_labels",
    "quantization_methods",
    "sglang_flags",
    "smg_flags",
    "weight_format",
]
