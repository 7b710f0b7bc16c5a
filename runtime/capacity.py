"""What one replica of an endpoint's own spec carries within latency targets: the optimizer's
queueing model over ``runtime.perf`` step times, made public for the autoscaler.

``runtime.optimize`` sizes replicas for a traffic profile before anything runs; the autoscaler's
SLO policy asks the same questions of a spec that is running: how many requests per second one
replica (or one prefill or decode pool member) carries within TTFT/ITL targets, what TTFT and ITL
the model predicts at a given rate (so observed figures can correct it), and how many prompt
tokens per second one replica prefills (so a queue of prompt tokens becomes seconds of wait).
One physics: this module builds the optimizer's engine shape for the spec and calls its model;
it computes no step time of its own. Framework-free, like the rest of ``runtime``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

from runtime.catalog import get_gpu
from runtime.memory import memory_fit
from runtime.optimize.queueing import PREFILL_TTFT_SHARE, EngineLoad
from runtime.optimize.shapes import ShapeKnobs, build_shape, default_ep, shape_context
from runtime.optimize.types import OptimizeError, OptimizeRequest, Slo, Traffic, resolve_model
from runtime.spec import RuntimeSpec
from runtime.topology import engine_groups

Role = Literal["engine", "prefill", "decode"]


@dataclass(frozen=True)
class Workload:
    """The mean request an endpoint serves (observed, or the optimizer's default profile)."""

    input_tokens: int = 1024
    output_tokens: int = 256
    cached_share: float = 0.0  # share of each prompt found in the prefix cache

    def rounded(self) -> Workload:
        """Close workloads share one model: prompt and output lengths to two significant
        figures, the cached share to a tenth (the model is built once per distinct workload)."""
        return Workload(
            input_tokens=_two_figures(self.input_tokens),
            output_tokens=_two_figures(self.output_tokens),
            cached_share=round(min(0.9, max(0.0, self.cached_share)), 1),
        )


@dataclass(frozen=True)
class Predicted:
    ttft_s: float
    itl_s: float
    running: float  # sequences decoding at once


class ReplicaModel:
    """The performance model of one replica playing ``role`` under ``workload``."""

    def __init__(self, engine: EngineLoad, role: Role, workload: Workload) -> None:
        self._engine, self.role, self.workload = engine, role, workload
        self._prefill = role in ("engine", "prefill")
        self._decode = role in ("engine", "decode")

    @property
    def prefill_tokens_per_s(self) -> float:
        """New (uncached) prompt tokens one replica prefills per second, doing nothing else."""
        new = max(1.0, self.workload.input_tokens * (1 - self.workload.cached_share))
        return new / self._engine.prefill_s

    @property
    def kv_tokens(self) -> int:
        """Tokens one replica's KV cache holds."""
        return int(self._engine.shape.kv_tokens)

    def capacity_rps(self, ttft_s: float | None, itl_s: float | None) -> float:
        """The most requests/s one replica carries with TTFT and ITL p90 within the targets
        (None: no target); 0 when even a lone request misses them."""
        slo = Slo(ttft_p90_s=ttft_s or math.inf, itl_p90_s=itl_s or math.inf)
        if self.role == "prefill":
            slo = replace(slo, ttft_p90_s=slo.ttft_p90_s * PREFILL_TTFT_SHARE)
        return self._engine.capacity(slo, prefill=self._prefill, decode=self._decode)

    def predict(self, rate_rps: float) -> Predicted:
        """TTFT and ITL p90 at ``rate_rps`` on one replica (inf past a stable queue)."""
        free = Slo(ttft_p90_s=math.inf, itl_p90_s=math.inf)
        load = self._engine.load(
            max(1e-6, rate_rps), free, prefill=self._prefill, decode=self._decode
        )
        return Predicted(ttft_s=load.ttft, itl_s=load.itl, running=load.running)

    def running_at(self, rate_rps: float) -> float:
        """Sequences one replica decodes at once at ``rate_rps`` (Little's law in the model)."""
        return self.predict(rate_rps).running if self._decode else 0.0


def replica_model(spec: RuntimeSpec, role: Role, workload: Workload) -> ReplicaModel | None:
    """The model of one ``role`` replica of ``spec``; None when the model or GPU is one the
    optimizer cannot size, or the replica's shape does not fit (the SLO policy then falls back
    to observed latencies alone)."""
    tp = spec.parallelism.tp
    if role != "engine":
        pool = spec.disaggregation.prefill if role == "prefill" else spec.disaggregation.decode
        tp = pool.tp or spec.parallelism.tp
    return _cached_model(spec.canonical_json(), role, tp, workload.rounded())


@lru_cache(maxsize=256)
def _cached_model(spec_json: str, role: Role, tp: int, workload: Workload) -> ReplicaModel | None:
    spec = RuntimeSpec.model_validate_json(spec_json)
    request = OptimizeRequest(
        model=spec.model.source,
        architecture=spec.model.architecture,
        traffic=Traffic(input_tokens=workload.input_tokens, output_tokens=workload.output_tokens),
        lora=spec.lora,
    )
    try:
        arch = resolve_model(request)
        gpu = get_gpu(spec.hardware.gpu)
        knobs = ShapeKnobs(
            gpu=gpu,
            tp=tp,
            quantization=spec.quantization.method,
            kv_dtype=spec.quantization.kv_cache_dtype,
            ep=default_ep(arch, tp),
            speculator=spec.speculator.algorithm,
            draft=spec.speculator.draft_model,
            hicache_ratio=host_tier_ratio(spec),
        )
        shape = build_shape(request, shape_context(request, arch, gpu), knobs)
    except (OptimizeError, KeyError, ValueError):
        return None
    if shape is None:
        return None
    traffic = Traffic(input_tokens=workload.input_tokens, output_tokens=workload.output_tokens)
    return ReplicaModel(EngineLoad(shape, traffic, workload.cached_share), role, workload)


def host_tier_ratio(spec: RuntimeSpec) -> float | None:
    """The spec's HiCache host tier as a multiple of its GPU KV pool (what the optimizer's shapes
    take), a size in GB converted by the memory fit; None without a host tier. A replica whose
    GPU evicts histories its host tier keeps loads them back instead of recomputing them, which
    is capacity the autoscaler must count."""
    host = spec.kv_cache.tiers.host
    if host is None:
        return None
    if host.size_gb is None:
        return host.resolved_ratio
    arch = spec.model.arch()
    if arch is None:
        return None
    fit = memory_fit(spec, get_gpu(spec.hardware.gpu), arch, engine_groups(spec)[0])
    return fit.host_tier / fit.kv_cache if fit.kv_cache > 0 else None


def _two_figures(value: int) -> int:
    if value < 100:
        return max(1, value)
    scale = 10 ** (len(str(value)) - 2)
    return int(round(value / scale) * scale)
