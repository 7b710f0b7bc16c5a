"""The GPU and model the simulated engine pretends to run: re-exported from ``runtime.perf``.

The shapes moved to ``runtime.perf.hardware`` so the optimizer and the simulator share one
physics; this module keeps the simulator's imports working.
"""

from __future__ import annotations

from runtime.perf.hardware import (
    DEFAULT_MODEL,
    H100_SXM,
    GpuShape,
    ModelShape,
    UnknownGpu,
    resolve_gpu,
    resolve_model,
)

__all__ = [
    "DEFAULT_MODEL",
    "H100_SXM",
    "GpuShape",
    "ModelShape",
    "UnknownGpu",
    "resolve_gpu",
    "resolve_model",
]
