"""Checking a RuntimeSpec before anything is deployed.

`check(data)` is the entry point for untrusted input (REST body, YAML file, form): it parses, turns
pydantic's field errors into Issues and runs every cross-field rule, so callers never see a
traceback. `validate(spec)` runs the rules of `runtime.rules` on a parsed spec. `estimate(spec)`
(from `runtime.estimate`) gives the memory and cost figures the rules are based on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from runtime.estimate import Estimate, GroupEstimate, estimate
from runtime.issues import Issue, error
from runtime.rules import ALL_RULES, RuleContext
from runtime.spec import RuntimeSpec

__all__ = ["Estimate", "GroupEstimate", "Issue", "check", "estimate", "has_errors", "validate"]

# pydantic error types -> Issue codes; custom errors raised in runtime.spec keep their own type.
_CODES = {
    "extra_forbidden": "unknown_field",
    "missing": "missing_field",
    "literal_error": "invalid_choice",
    "greater_than": "out_of_range",
    "greater_than_equal": "out_of_range",
    "less_than": "out_of_range",
    "less_than_equal": "out_of_range",
    "string_too_short": "too_short",
    "string_too_long": "too_long",
}
_BOUNDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}
_TYPE_FIXES = {
    "int": "use a whole number, without quotes",
    "float": "use a number, without quotes",
    "bool": "use true or false",
    "string": "use a text value",
    "dict": "use a mapping of names to values",
    "model": "use a mapping of field names to values",
    "list": "use a list",
}


def validate(spec: RuntimeSpec) -> list[Issue]:
    """Every rule's findings; errors first, each group in rule order."""
    ctx = RuleContext.of(spec)
    issues = [issue for rule in ALL_RULES for issue in rule(ctx)]
    return sorted(issues, key=lambda issue: not issue.is_error)


def has_errors(issues: list[Issue]) -> bool:
    return any(issue.is_error for issue in issues)


def check(data: Mapping[str, Any] | Any) -> tuple[RuntimeSpec | None, list[Issue]]:
    """Parse and validate untrusted input: (spec or None, issues). Never raises for bad input."""
    try:
        spec = RuntimeSpec.model_validate(data)
    except ValidationError as exc:
        return None, _dedupe([issue_from_error(err) for err in exc.errors()])
    return spec, validate(spec)


def _dedupe(issues: list[Issue]) -> list[Issue]:
    seen: set[str] = set()
    kept = []
    for issue in issues:
        if issue.field not in seen:
            seen.add(issue.field)
            kept.append(issue)
    return kept


def _field_path(loc: tuple[int | str, ...]) -> str:
    # A union of value types (extra_flags values) adds the tried type's name to the location.
    if loc[:2] == ("runtime", "extra_flags"):
        loc = loc[:3]
    return ".".join(str(part) for part in loc) or "spec"


def _known_fields(loc: tuple[int | str, ...]) -> list[str]:
    model: type[BaseModel] = RuntimeSpec
    for part in loc[:-1]:
        info = model.model_fields.get(str(part))
        annotation = info.annotation if info else None
        candidates = getattr(annotation, "__args__", (annotation,))
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return []
        model = nested[0]
    return list(model.model_fields)


def _fix(err: ErrorDetails, code: str) -> str | None:
    ctx = err.get("ctx") or {}
    if "fix" in ctx:
        return str(ctx["fix"])
    if code == "unknown_field":
        known = _known_fields(err["loc"])
        return "remove it" + (f"; fields here: {', '.join(known)}" if known else "")
    if code == "out_of_range":
        bounds = [f"{_BOUNDS[k]} {v}" for k, v in ctx.items() if k in _BOUNDS]
        return f"use a value {' and '.join(bounds)}" if bounds else None
    if code == "invalid_choice" and "expected" in ctx:
        return f"use one of {ctx['expected']}"
    if code == "missing_field":
        return "add it"
    if code == "invalid_type":
        return _TYPE_FIXES.get(err["type"].split("_")[0], "check the value's type")
    return None


def _code(err: ErrorDetails) -> str:
    kind = err["type"]
    if kind.endswith("_type") or kind.endswith("_parsing") or kind == "model_type":
        return "invalid_type"
    if kind == "string_too_short" and (err.get("ctx") or {}).get("min_length") == 1:
        return "missing_field"  # an empty string where a value is required
    return _CODES.get(kind, kind)


def issue_from_error(err: ErrorDetails) -> Issue:
    """One pydantic field error as an Issue with a stable code and a plain message.

    The message does not repeat the field's path: the Issue's ``field`` carries it, and every
    reader (the API's ``fields``, the console, the CLI) shows the two together.
    """
    code = _code(err)
    field = _field_path(err["loc"])
    message = err["msg"]
    if field.startswith("runtime.extra_flags.") and code == "invalid_type":
        message = "an extra flag takes one value: true/false, a number or a string, never a list"
        return error(field, code, message, "give the flag one value")
    elif code == "unknown_field":
        message = f"unknown field '{err['loc'][-1] if err['loc'] else field}'"
    return error(field, code, message, _fix(err, code))
