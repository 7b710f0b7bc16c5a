"""The quantization job's plain data: recipes, the job file and the formats a job can make.

The formats themselves (the library's scheme, SGLang's name for the checkpoint, how it is
priced) are the quantization catalogue's ``tool_formats``. The tool
(``tools/quantize/plinth_quantize``, run in its own virtualenv) validates its JOB.json
with ``Job``; the platform writes that file from the same models, so both sides agree on one
schema. Module patterns are shell-style globs over the model's module names (``fnmatch``:
``model.layers.3.*``, ``*.mlp.*``, ``lm_head``), matched against the full dotted name.
"""

from __future__ import annotations

import fnmatch
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from runtime.catalog.quantization import tool_format, tool_formats

LM_HEAD = "lm_head"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"  # a candidate's name is its checkpoint's folder


def known_format(name: str) -> str:
    """`name` when the quantization catalogue's tool_formats has it, else a ValueError."""
    if tool_format(name) is None:
        raise ValueError(f"unknown format {name!r}: one of {', '.join(tool_formats())}")
    return name


FormatName = Annotated[str, AfterValidator(known_format)]


def matches(name: str, patterns: list[str] | tuple[str, ...]) -> bool:
    """Whether module `name` matches any of the recipe's glob `patterns`."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


class Recipe(BaseModel):
    """Which modules a candidate quantizes and how.

    Every Linear module is quantized at the job's format except those matching ``keep_bf16``
    (kept in BF16) and those matching a ``formats`` pattern (quantized at that format instead;
    the first pattern in order wins). ``lm_head`` is kept unless a ``formats`` pattern names it.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=80, pattern=NAME_PATTERN)
    keep_bf16: list[str] = Field(default_factory=list)
    formats: dict[str, FormatName] = Field(default_factory=dict)

    @field_validator("keep_bf16")
    @classmethod
    def _patterns_not_empty(cls, value: list[str]) -> list[str]:
        if any(not pattern.strip() for pattern in value):
            raise ValueError("a keep_bf16 pattern is empty")
        return value

    def format_of(self, module: str, default: str) -> str | None:
        """The format `module` (a Linear's dotted name) is quantized at; None: kept in BF16."""
        if matches(module, self.keep_bf16):
            return None
        for pattern, form in self.formats.items():
            if fnmatch.fnmatchcase(module, pattern):
                return form
        if module == LM_HEAD or module.endswith("." + LM_HEAD):
            return None
        return default


class Calibration(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = None  # JSONL of {"text": ...}; None: the built-in generic set
    samples: int = Field(default=64, ge=1, le=4096)
    max_seq_len: int = Field(default=512, ge=8, le=32768)


class Evaluation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = None  # JSONL of {"text": ...}; None: the built-in generic set
    samples: int = Field(default=32, ge=1, le=4096)


class Job(BaseModel):
    """JOB.json: one quantization run over one source checkpoint and one target format."""

    model_config = ConfigDict(extra="forbid")

    source_path: str = Field(min_length=1)
    format: FormatName
    candidates: list[Recipe] = Field(default_factory=list)
    propose: bool = False
    calibration: Calibration = Field(default_factory=Calibration)
    eval: Evaluation = Field(default_factory=Evaluation)
    output_dir: str = Field(min_length=1)

    @model_validator(mode="after")
    def _candidates_or_propose(self) -> Job:
        if not self.candidates and not self.propose:
            raise ValueError("give candidates, or set propose to true")
        names = [recipe.name for recipe in self.candidates]
        if len(set(names)) != len(names):
            raise ValueError("candidate names must be unique")
        return self
