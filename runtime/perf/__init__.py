"""The performance model: one physics for the simulator and the optimizer.

``step`` gives the seconds of a prefill/decode step from the GPU, the model and how it is run
(TP, quantization, KV dtype, speculation); ``spec`` gives speculative shapes and acceptance;
``quant`` the bytes of each number format (the quantization catalogue's, the same the optimizer
prices through ``runtime.memory``); ``hardware`` the shapes they work on. Calibrated
constants live in ``runtime/catalog/perf.yaml`` with their sources (``bench/calibration.py``
compares the model with AIConfigurator and published figures).
"""

from __future__ import annotations

from runtime.perf.hardware import GpuShape, ModelShape
from runtime.perf.spec import SpecConfig, SpecShape, resolve_spec
from runtime.perf.step import EngineShape, StepModel, StepWork

__all__ = [
    "EngineShape",
    "GpuShape",
    "ModelShape",
    "SpecConfig",
    "SpecShape",
    "StepModel",
    "StepWork",
    "resolve_spec",
]
