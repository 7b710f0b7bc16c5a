"""`estimate(spec)`: memory per GPU, KV capacity, GPU count and cost of a RuntimeSpec."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from runtime.catalog import get_gpu
from runtime.memory import default_max_running, gib, memory_fit
from runtime.spec import RuntimeSpec
from runtime.topology import EngineGroup, engine_groups


class GroupEstimate(BaseModel):
    """One engine group (engine, prefill or decode): memory of one of its GPUs, in GiB."""

    model_config = ConfigDict(frozen=True)

    role: str
    gpus_per_replica: int
    nodes_per_replica: int
    replicas_min: int
    replicas_max: int
    weights_gib: float | None = None
    kv_cache_gib: float | None = None
    reserve_gib: float | None = None  # activations, CUDA graphs, communication buffers
    adapters_gib: float | None = None  # the LoRA adapter pool (0 without LoRA)
    total_gib: float | None = None
    capacity_gib: float
    mem_fraction_static: float | None = None
    kv_bytes_per_token: float | None = None
    max_kv_tokens: int | None = None  # one attention-DP rank's pool
    max_concurrent_tokens: int | None = None  # the whole replica
    # Requests of the full context length the replica holds at once (the headroom).
    concurrent_requests: int | None = None
    fits: bool


class Estimate(BaseModel):
    """The figures the create form shows as a person types.

    Memory fields describe one GPU of the serving group (`engine`, or `decode` when prefill and
    decode are split); None when the model's architecture is unknown.
    """

    model_config = ConfigDict(frozen=True)

    gpu: str
    model_known: bool
    context_length: int | None
    weights_gib: float | None
    kv_cache_gib: float | None
    reserve_gib: float | None
    total_gib: float | None
    capacity_gib: float
    mem_fraction_static: float | None
    adapters_gib: float | None = Field(
        default=None, description="the LoRA adapter pool per GPU, taken from the KV cache"
    )
    max_concurrent_tokens: int | None
    concurrent_requests: int | None = Field(
        default=None,
        description="requests of the full context length one replica's KV cache holds at once",
    )
    max_running_requests: int | None = Field(
        default=None, description="the cap on running requests, when one is set or forced"
    )
    gpus_per_replica: int
    total_gpus_min: int
    total_gpus_max: int
    price_per_gpu_hour: float
    cost_per_replica_hour: float
    cost_per_hour_min: float
    cost_per_hour_max: float
    fits: bool
    groups: list[GroupEstimate]


def gpu_hour_price(spec: RuntimeSpec) -> float:
    """The spec's price override, else the catalogue default (USD per GPU-hour)."""
    if spec.hardware.price_per_gpu_hour is not None:
        return spec.hardware.price_per_gpu_hour
    return get_gpu(spec.hardware.gpu).price_per_gpu_hour


def _group_estimate(spec: RuntimeSpec, group: EngineGroup) -> GroupEstimate:
    gpu = get_gpu(spec.hardware.gpu)
    arch = spec.model.arch()
    shape = GroupEstimate(
        role=group.role,
        gpus_per_replica=group.gpus,
        nodes_per_replica=group.nodes,
        replicas_min=group.replicas_min,
        replicas_max=group.replicas_max,
        capacity_gib=gib(gpu.memory_bytes),
        fits=True,  # an unknown architecture cannot be refused on memory
    )
    if arch is None:
        return shape
    fit = memory_fit(spec, gpu, arch, group)
    return shape.model_copy(
        update={
            "weights_gib": gib(fit.weights),
            "kv_cache_gib": gib(fit.kv_cache),
            "reserve_gib": gib(fit.reserve),
            "adapters_gib": gib(fit.adapters),
            "total_gib": gib(fit.total),
            "mem_fraction_static": round(fit.mem_fraction_static, 3),
            "kv_bytes_per_token": round(fit.kv_bytes_per_token, 1),
            "max_kv_tokens": fit.max_kv_tokens,
            "max_concurrent_tokens": fit.max_concurrent_tokens,
            "concurrent_requests": fit.concurrent_requests,
            "fits": fit.fits,
        }
    )


def estimate(spec: RuntimeSpec) -> Estimate:
    """Memory fit, KV capacity, GPUs and cost of `spec` (the router needs no GPU)."""
    groups = [_group_estimate(spec, group) for group in engine_groups(spec)]
    serving = groups[-1]
    arch = spec.model.arch()
    price = gpu_hour_price(spec)
    gpus_min = sum(g.gpus_per_replica * g.replicas_min for g in groups)
    gpus_max = sum(g.gpus_per_replica * g.replicas_max for g in groups)
    # A "replica" of a disaggregated endpoint is its whole set of pools.
    per_replica = gpus_max if spec.disaggregation.enabled else serving.gpus_per_replica
    return Estimate(
        gpu=spec.hardware.gpu,
        model_known=arch is not None,
        context_length=(spec.model.context_length or arch.max_context) if arch else None,
        weights_gib=serving.weights_gib,
        kv_cache_gib=serving.kv_cache_gib,
        reserve_gib=serving.reserve_gib,
        adapters_gib=serving.adapters_gib,
        total_gib=serving.total_gib,
        capacity_gib=serving.capacity_gib,
        mem_fraction_static=serving.mem_fraction_static,
        max_concurrent_tokens=serving.max_concurrent_tokens,
        concurrent_requests=serving.concurrent_requests,
        max_running_requests=default_max_running(spec),
        gpus_per_replica=per_replica,
        total_gpus_min=gpus_min,
        total_gpus_max=gpus_max,
        price_per_gpu_hour=price,
        cost_per_replica_hour=round(per_replica * price, 2),
        cost_per_hour_min=round(gpus_min * price, 2),
        cost_per_hour_max=round(gpus_max * price, 2),
        fits=all(g.fits for g in groups),
        groups=groups,
    )
