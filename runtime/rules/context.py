"""What every rule reads: the spec and the catalogue facts resolved once."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.catalog import GpuType, ModelArch, get_gpu
from runtime.memory import draft_arch
from runtime.spec import RuntimeSpec
from runtime.topology import EngineGroup, engine_groups


@dataclass(frozen=True)
class RuleContext:
    spec: RuntimeSpec
    gpu: GpuType
    arch: ModelArch | None  # None: not catalogued and not described inline
    draft: ModelArch | None
    groups: list[EngineGroup] = field(default_factory=list)

    @classmethod
    def of(cls, spec: RuntimeSpec) -> RuleContext:
        return cls(
            spec=spec,
            gpu=get_gpu(spec.hardware.gpu),
            arch=spec.model.arch(),
            draft=draft_arch(spec),
            groups=engine_groups(spec),
        )
