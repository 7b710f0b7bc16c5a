"""The settings form as the page shows it: each field bound to its value and its issues, in
sections with a one-line summary, and the choices that depend on other values (TP on the heads).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import QueryDict

from deployments.endpoints.forms.fields import (
    ALL_FIELDS,
    ARCH_PREFIX,
    CUSTOM_ARCH_TOGGLE,
    DEFAULT_SPEC,
    SECTIONS,
    TP_WIDTHS,
)
from deployments.endpoints.forms.parse import (
    ParsedForm,
    custom_posted,
    flatten,
    issues_by_field,
    last_posted,
    uses_custom_architecture,
)
from deployments.endpoints.forms.schema import FormField, Section
from runtime.catalog import get_model
from runtime.issues import Issue, field_words
from runtime.rules.parallel import working_tps
from runtime.spec import RuntimeSpec


@dataclass(frozen=True)
class BoundField:
    field: FormField
    value: Any
    issues: list[Issue]
    # (value, text) of each choice, where they depend on other values (TP on the model's heads).
    bound_options: tuple[tuple[str, str], ...] = ()

    @property
    def shown(self) -> str:
        """The value as an input shows it (None -> empty)."""
        return "" if self.value is None else str(self.value)

    @property
    def has_error(self) -> bool:
        return any(issue.is_error for issue in self.issues)

    @property
    def kind(self) -> str:
        return "select" if self.bound_options else self.field.kind

    @property
    def choices(self) -> tuple[tuple[str, str], ...]:
        """(value, text) of each option: SGLang's value, with the everyday name beside it."""
        if self.bound_options:
            return self.bound_options
        names = self.field.names
        return tuple(
            (opt, f"{names[opt]} ({opt})" if opt in names else opt) for opt in self.field.options
        )


@dataclass(frozen=True)
class BoundSection:
    section: Section
    fields: list[BoundField]

    @property
    def has_error(self) -> bool:
        return any(bf.has_error for bf in self.fields)

    @property
    def summary(self) -> str:
        """One line of the section's current values, for its collapsed heading."""
        first = self.fields[0] if self.fields else None
        if first is not None and first.field.path.endswith(".enabled") and first.value is not True:
            return "off"  # a switched-off feature: its other values do nothing
        parts = []
        for bf in self.fields:
            if bf.field.kind == "checkbox":
                parts.append(f"{bf.field.label}: {'on' if bf.value is True else 'off'}")
            elif bf.value in (None, "") and bf.field.path == "quantization.method":
                parts.append("Weights as shipped")
            elif bf.value not in (None, "", "none"):
                parts.append(f"{bf.field.label} {bf.field.names.get(bf.shown, bf.shown)}")
        return " · ".join(parts) or "defaults"


@dataclass(frozen=True)
class ShownIssue:
    """An issue as the form shows it away from its input: led by the field's label, not path."""

    issue: Issue

    def __getattr__(self, name: str) -> Any:
        return getattr(self.issue, name)

    @property
    def label(self) -> str:
        return field_label(self.issue.field)


def field_label(path: str) -> str:
    """The form's label for a spec path ("spec." or not); the plain words for one not shown."""
    key = path.removeprefix("spec.")
    found = next((f.label for f in ALL_FIELDS if f.path == key), None)
    return found or field_words(key)


def _heads(values: dict[str, Any]) -> tuple[int, int] | None:
    """(attention heads, KV heads) of the form's model: described, else the catalogue's."""
    if uses_custom_architecture(values):
        try:
            heads = int(values.get(ARCH_PREFIX + "num_attention_heads") or 0)
            kv = int(values.get(ARCH_PREFIX + "num_kv_heads") or heads)
        except (TypeError, ValueError):
            return None
        return (heads, kv) if heads > 0 and kv > 0 else None
    model = values.get("model.source")
    arch = get_model(model) if isinstance(model, str) and model else None
    return (arch.num_attention_heads, arch.num_kv_heads) if arch else None


def tp_key(values: dict[str, Any]) -> str:
    """What the TP choices depend on, as text: the page re-sends them when it changes."""
    heads = _heads(values)
    return f"{heads[0]}/{heads[1]}" if heads else "any"


def tp_choices(values: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The TP widths up to 16 that the model's attention and KV heads divide (SGLang's rule).

    All widths that are powers of two for a model whose heads are unknown. The value set is kept
    among them even when it does not divide, so the select shows it and its error says why.
    """
    heads = _heads(values)
    if heads is None:
        widths = list(TP_WIDTHS)
    else:
        attention, kv = heads
        widths = working_tps(attention, kv, range(1, 17))
    try:
        now: int | None = int(values.get("parallelism.tp"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        now = None
    if now is not None and now not in widths:
        widths = sorted({*widths, now})
    return tuple((str(t), f"{t} GPU{'s' if t != 1 else ''}") for t in widths)


def initial_values(spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """Flat values for the form: the spec's (or the defaults'), every default filled in."""
    source = spec or DEFAULT_SPEC
    try:
        full = RuntimeSpec.model_validate(source).model_dump(mode="json")
    except ValueError:
        full = source
    values = flatten(full)
    values[CUSTOM_ARCH_TOGGLE] = isinstance(full.get("model", {}).get("architecture"), dict)
    return values


def bind(values: dict[str, Any], issues: list[Issue]) -> list[BoundSection]:
    grouped = issues_by_field(issues)

    def bound(f: FormField) -> BoundField:
        value = values.get(f.path)
        options: tuple[tuple[str, str], ...] = ()
        if f.path == "parallelism.tp":
            options = tp_choices(values)
        return BoundField(f, value, grouped.get(f.path, []), options)

    return [BoundSection(section, [bound(f) for f in section.fields]) for section in SECTIONS]


def posted_values(post: QueryDict, parsed: ParsedForm) -> dict[str, Any]:
    """What the person typed, as typed (so a bad number stays in its input to be fixed)."""
    values = flatten(parsed.data)
    for field_ in ALL_FIELDS:
        raw = last_posted(post, field_.path)
        if raw is not None and field_.kind != "checkbox":
            values[field_.path] = raw
    values[CUSTOM_ARCH_TOGGLE] = custom_posted(post)
    return values
