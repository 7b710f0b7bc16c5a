"""The engine groups a RuntimeSpec asks for: one `engine` role, or `prefill` + `decode` pools.

Validation, the memory estimate and the launch plan all need the same answers (TP width, GPUs and
nodes per replica, how many replicas), so they are derived here once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from runtime.catalog import GpuType, get_gpu
from runtime.spec import PoolSettings, RuntimeSpec

EngineRoleName = Literal["engine", "prefill", "decode"]


@dataclass(frozen=True)
class EngineGroup:
    """One kind of SGLang server in the endpoint and the shape of each of its replicas."""

    role: EngineRoleName
    tp: int
    pp: int
    attn_dp: int
    ep: int
    gpus: int  # per replica, all nodes together
    nodes: int  # per replica
    replicas_min: int
    replicas_max: int
    tp_field: str  # the spec field a person edits to change `tp`
    moe_a2a: str = "none"  # SGLang's --moe-a2a-backend (parallelism.moe_a2a)

    @property
    def gpus_per_node(self) -> int:
        """GPUs each node of a replica holds (rounded up when the split is uneven)."""
        return math.ceil(self.gpus / self.nodes)

    @property
    def replicas_initial(self) -> int:
        # A scale-to-zero endpoint still starts with one replica so its first revision is proven.
        return max(self.replicas_min, 1)


def _nodes_for(gpus: int, gpu: GpuType, requested: int | None) -> int:
    return requested if requested is not None else max(1, math.ceil(gpus / gpu.gpus_per_node))


def engine_groups(spec: RuntimeSpec) -> list[EngineGroup]:
    """The engine groups in launch order (prefill before decode)."""
    gpu = get_gpu(spec.hardware.gpu)
    par = spec.parallelism
    if not spec.disaggregation.enabled:
        gpus = spec.hardware.gpus_per_replica or par.tp * par.pp
        scale = spec.autoscaling
        return [
            EngineGroup(
                role="engine", tp=par.tp, pp=par.pp, attn_dp=par.attn_dp, ep=par.ep, gpus=gpus,
                nodes=_nodes_for(gpus, gpu, spec.hardware.nodes_per_replica),
                replicas_min=scale.min_replicas, replicas_max=scale.max_replicas,
                tp_field="parallelism.tp", moe_a2a=par.moe_a2a,
            )
        ]  # fmt: skip
    groups = []
    pools: tuple[tuple[EngineRoleName, PoolSettings], ...] = (
        ("prefill", spec.disaggregation.prefill),
        ("decode", spec.disaggregation.decode),
    )
    for role, pool in pools:
        tp = pool.tp or par.tp
        gpus = tp * par.pp
        groups.append(
            EngineGroup(
                role=role, tp=tp, pp=par.pp, attn_dp=par.attn_dp, ep=par.ep, gpus=gpus,
                nodes=_nodes_for(gpus, gpu, None),
                replicas_min=pool.replicas, replicas_max=pool.replicas,
                tp_field=f"disaggregation.{role}.tp" if pool.tp else "parallelism.tp",
                moe_a2a=par.moe_a2a,
            )
        )  # fmt: skip
    return groups
