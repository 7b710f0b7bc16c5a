"""What one input of the settings form is: a FormField named by its RuntimeSpec path, the
Section it sits in, and what RuntimeSpec declares for that path (the field's kind, its options,
whether it may be empty), read from the spec's own annotations.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel

from runtime.spec import RuntimeSpec

# SGLang's documentation of the flags a field sets: each link opens the page at the flag's name
# (a text fragment: the pages have anchors per section, not per flag).
ENGINE_DOCS = "https://docs.sglang.io/advanced_features/server_arguments.html"
ROUTER_DOCS = "https://docs.sglang.io/advanced_features/sgl_model_gateway.html"


# Optional groups the form shows only some fields of: left with no value set, the group is
# dropped (an empty ``autoscaling.slo`` would be an SLO policy without a target; empty HiCache
# tiers are no tiers).
OPTIONAL_GROUPS = ("autoscaling.slo", "kv_cache.tiers.host", "kv_cache.tiers.storage")


@dataclass(frozen=True)
class FormField:
    """One input of the settings form, named by its RuntimeSpec path.

    ``flag`` is the SGLang (or router) flag the field sets, for the help link; ``names`` gives
    choices their everyday names, shown beside SGLang's value.
    """

    path: str
    label: str
    help: str = ""
    choices: tuple[str, ...] = ()
    placeholder: str = ""
    flag: str = ""
    router: bool = False
    names: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def dom_id(self) -> str:
        return "f-" + self.path.replace(".", "-").replace("_", "-")

    @property
    def kind(self) -> str:
        """``checkbox``, ``select``, ``number`` or ``text`` (from the spec's declared type)."""
        base = base_type(spec_annotation(self.path))
        if base is bool:
            return "checkbox"
        if self.choices or typing.get_origin(base) is Literal:
            return "select"
        return "number" if base in (int, float) else "text"

    @property
    def options(self) -> tuple[str, ...]:
        if self.choices:
            return self.choices
        base = base_type(spec_annotation(self.path))
        return tuple(str(v) for v in typing.get_args(base))

    @property
    def optional(self) -> bool:
        """It may be left unset: its setting is optional, or so is the group it belongs to (a
        HiCache storage tier needs a backend, yet a form without a storage tier is the default)."""
        in_optional_group = any(self.path.startswith(f"{g}.") for g in OPTIONAL_GROUPS)
        return in_optional_group or is_optional(spec_annotation(self.path))

    @property
    def docs_url(self) -> str:
        """SGLang's documentation of the flag, opened at its name; "" for a Plinth setting."""
        if not self.flag:
            return ""
        page = ROUTER_DOCS if self.router else ENGINE_DOCS
        # "-" is a text fragment's own syntax: a flag's dashes are escaped.
        return f"{page}#:~:text={quote(self.flag, safe='').replace('-', '%2D')}"


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    fields: tuple[FormField, ...]
    advanced: bool = False


def spec_annotation(path: str) -> Any:
    """The annotation RuntimeSpec declares for a dotted field path."""
    model: type[BaseModel] = RuntimeSpec
    annotation: Any = None
    for part in path.split("."):
        annotation = model.model_fields[part].annotation
        nested = [
            t for t in union_args(annotation) if isinstance(t, type) and issubclass(t, BaseModel)
        ]
        if nested:
            model = nested[0]
    return annotation


def union_args(annotation: Any) -> tuple[Any, ...]:
    """The members of a union annotation (``int | None`` -> int, None); others as one."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def is_optional(annotation: Any) -> bool:
    """Whether the spec accepts None for the field (an empty input clears it)."""
    return type(None) in union_args(annotation)


def base_type(annotation: Any) -> Any:
    """The type a value is coerced to: the annotation without None and Annotated's metadata."""
    args = [a for a in union_args(annotation) if a is not type(None)]
    base = args[0] if args else annotation
    # Annotated[int, Field(...)] -> int
    if typing.get_origin(base) is typing.Annotated:
        base = typing.get_args(base)[0]
    return base
