"""What every RuntimeSpec group shares: strict, frozen parsing with argv-safe text, and the
small value checks more than one group's module uses (``runtime.spec``, ``runtime.kv_tiers``)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, field_validator
from pydantic_core import PydanticCustomError

from runtime.argv import text_problem

# Where engines find downloaded weights (the Kubernetes driver mounts the model cache here); the
# only local directory a spec may load a model from.
MODEL_CACHE_PATH = "/root/.cache/huggingface"
# A Hugging Face repo id ("name" or "namespace/name"), as huggingface_hub checks it: word
# characters, '-' and '.', not at either end, no '--' or '..', at most 96 per part.
_HF_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?"
_HF_REPO_ID = re.compile(rf"(?:{_HF_PART}/)?{_HF_PART}")
_PATH_PART = r"[A-Za-z0-9_][A-Za-z0-9._-]*"
_CACHE_PATH = re.compile(rf"{re.escape(MODEL_CACHE_PATH)}(?:/{_PATH_PART})+")
# A branch, tag or commit of a model repository (`refs/pr/1` included).
_REVISION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,254}")


def _model_source(value: str) -> str:
    if _HF_REPO_ID.fullmatch(value) and "--" not in value and ".." not in value:
        return value
    if _CACHE_PATH.fullmatch(value):
        return value
    raise PydanticCustomError(
        "invalid_model_source",
        "a model comes from a Hugging Face repository id or the model cache, not from this value",
        {"fix": f"use a repository id such as 'org/name', or a path under {MODEL_CACHE_PATH}/"},
    )


def _repo_revision(value: str) -> str:
    if _REVISION.fullmatch(value) and ".." not in value:
        return value
    raise PydanticCustomError(
        "invalid_revision",
        "a revision is a branch, tag or commit of the model repository",
        {"fix": "use letters, digits, '.', '_', '-' and '/' only, e.g. 'main' or a commit hash"},
    )


ModelSource = Annotated[str, AfterValidator(_model_source)]
RepoRevision = Annotated[str, AfterValidator(_repo_revision)]

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
