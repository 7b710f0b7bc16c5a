"""What every RuntimeSpec group shares: strict, frozen parsing with argv-safe text, and the
small value checks more than one group's module uses (``runtime.spec``, ``runtime.kv_tiers``)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, field_validator
from pydantic_core import PydanticCustomError

from runtime.argv import text_problem

# RDMA device names, comma-separated (`mlx5_0,mlx5_1`).
_IB_DEVICES = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]*(?:,[A-Za-z0-9_][A-Za-z0-9_.:-]*)*")


def ib_devices(value: str) -> str:
    if _IB_DEVICES.fullmatch(value):
        return value
    raise PydanticCustomError(
        "invalid_value",
        "an InfiniBand device list is device names separated by commas",
        {"fix": "e.g. 'mlx5_0' or 'mlx5_0,mlx5_1'"},
    )


IbDevices = Annotated[str, AfterValidator(ib_devices)]


class SpecGroup(BaseModel):
    # NaN and infinities are not settings anyone means, and PostgreSQL JSON refuses them.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    @field_validator("*")
    @classmethod
    def _argv_safe_text(cls, value: Any) -> Any:
        """Every text field of every group: any of them may end up as a launcher argument, and
        none has a reason to start with '-' or to hold a control character."""
        problem = text_problem(value) if isinstance(value, str) else None
        if problem is not None:
            raise PydanticCustomError(
                "unsafe_value",
                "{problem}",
                {"problem": problem, "fix": "remove control characters and any leading '-'"},
            )
        return value
