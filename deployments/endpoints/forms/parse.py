"""A posted settings form -> the nested RuntimeSpec dict, laid over what the endpoint had.

Values are coerced by the type the spec declares for each path, because RuntimeSpec parses
strictly (no "4" for 4); a value that is not a number where one is wanted becomes a field issue.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

from django.http import QueryDict

from deployments.endpoints.forms.fields import (
    ALL_FIELDS,
    ARCH_PREFIX,
    CUSTOM_ARCH_TOGGLE,
)
from deployments.endpoints.forms.schema import (
    OPTIONAL_GROUPS,
    FormField,
    base_type,
    spec_annotation,
)
from runtime.issues import Issue, error


@dataclass
class ParsedForm:
    data: dict[str, Any]
    issues: list[Issue] = field(default_factory=list)


def _coerce(field_: FormField, raw: str) -> Any:
    base = base_type(spec_annotation(field_.path))
    if base is bool:
        return raw in ("true", "on", "1")
    if base is int:
        return int(raw)
    if base is float:
        number = float(raw)
        if not math.isfinite(number):
            # JSON (and so a stored revision) has no NaN or infinity.
            raise ValueError(raw)
        return number
    return raw


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = value


def _drop_path(data: dict[str, Any], path: str) -> None:
    *parents, leaf = path.split(".")
    node: Any = data
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(leaf, None)


def last_posted(post: QueryDict, name: str) -> str | None:
    """The value posted for ``name``, stripped; None when the form did not send it."""
    # Checkboxes post a hidden "false" then, when ticked, "true": the last value wins.
    values = post.getlist(name)
    return values[-1].strip() if values else None


def parse_spec(post: QueryDict, base: dict[str, Any] | None = None) -> ParsedForm:
    """The nested spec dict a form posts, laid over ``base`` (an edit keeps unshown fields).

    Values that are not numbers where the spec wants numbers become field issues here, so
    the person sees "parallelism.tp: enter a whole number" rather than a type error.
    """
    data = copy.deepcopy(base or {})
    parsed = ParsedForm(data=data)
    custom = custom_posted(post)
    if not custom:
        _drop_path(data, "model.architecture")
    elif not isinstance(data.get("model", {}).get("architecture"), dict):
        # Ticked but left empty: an empty description, so each missing number is reported.
        _set_path(data, "model.architecture", {})
    for field_ in ALL_FIELDS:
        if field_.path.startswith(ARCH_PREFIX) and not custom:
            continue
        raw = last_posted(post, field_.path)
        if raw is None:
            continue
        if raw == "":
            if field_.optional:
                _set_path(data, field_.path, None)
            else:
                _drop_path(data, field_.path)
            continue
        try:
            _set_path(data, field_.path, _coerce(field_, raw))
        except ValueError:
            kind = (
                "a whole number" if base_type(spec_annotation(field_.path)) is int else "a number"
            )
            parsed.issues.append(
                error(
                    field_.path,
                    "invalid_type",
                    f"{field_.label}: enter {kind}",
                    f"e.g. {_example(field_)}",
                )
            )
    for group in OPTIONAL_GROUPS:
        _drop_if_empty(data, group)
    return parsed


def _drop_if_empty(data: dict[str, Any], group: str) -> None:
    """Set optional group ``group`` (a dotted path) to None when none of its values is set."""
    *parents, name = group.split(".")
    node: Any = data
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    group_values = node.get(name) if isinstance(node, dict) else None
    if isinstance(group_values, dict) and all(v is None for v in group_values.values()):
        node[name] = None


def custom_posted(post: QueryDict) -> bool:
    """Whether the posted form ticked "describe my own architecture"."""
    return last_posted(post, CUSTOM_ARCH_TOGGLE) in ("true", "on")


def uses_custom_architecture(values: dict[str, Any]) -> bool:
    """Whether the form describes its own architecture: the toggle says so, never the inputs.

    The architecture inputs are always in the page (hidden while unticked), so they are always
    posted, empty or not; reading their presence as "custom" ticked the box on every refused
    save and then demanded all eight numbers.
    """
    return values.get(CUSTOM_ARCH_TOGGLE) is True


def _example(field_: FormField) -> str:
    return "1" if base_type(spec_annotation(field_.path)) is int else "0.5"


def flatten(spec: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"parallelism": {"tp": 2}}`` -> ``{"parallelism.tp": 2}`` (the form's initial values)."""
    flat: dict[str, Any] = {}
    for key, value in spec.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and path != "runtime.extra_flags" and path != "runtime.env":
            flat.update(flatten(value, path + "."))
        else:
            flat[path] = value
    return flat


def issues_by_field(issues: list[Issue]) -> dict[str, list[Issue]]:
    """Issues keyed by the form field they belong to; others under ``""`` (shown on top)."""
    known = {f.path for f in ALL_FIELDS}
    grouped: dict[str, list[Issue]] = {}
    for issue in issues:
        key = issue.field.removeprefix("spec.")
        grouped.setdefault(key if key in known else "", []).append(issue)
    return grouped
