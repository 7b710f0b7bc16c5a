"""Turning untrusted endpoint settings into a checked RuntimeSpec, or a refusal naming fields.

``runtime.validate.check`` does the work; this module adapts its Issues to the domain: errors
become a :class:`SpecInvalid` (field paths prefixed with ``spec.``, as the API shows them) and
warnings are kept in the form a Revision stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.services import ServiceError
from runtime.issues import Issue
from runtime.spec import RuntimeSpec
from runtime.validate import check

SPEC_FIELD = "spec"


def issue_dict(issue: Issue, prefix: str = SPEC_FIELD) -> dict[str, Any]:
    """An Issue as the API and stored warnings show it: field path from the request root."""
    field = prefix if issue.field in ("", SPEC_FIELD) else f"{prefix}.{issue.field}"
    return {
        "field": field,
        "code": issue.code,
        "message": issue.message,
        "fix": issue.fix,
    }


class SpecInvalid(ServiceError):
    """The settings break at least one rule; ``issues`` lists every error, field by field."""

    code = "invalid_spec"

    def __init__(self, issues: list[Issue]) -> None:
        errors = [issue for issue in issues if issue.is_error]
        first = _located(errors[0]) if errors else "invalid settings"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(f"the settings are invalid: {first}{more}", field=SPEC_FIELD)
        self.issues = [issue_dict(issue) for issue in errors]


def _located(issue: Issue) -> str:
    """The issue's message led by its path (issue messages leave the path to ``field``)."""
    return issue.message if issue.field in ("", SPEC_FIELD) else f"{issue.field}: {issue.message}"


def checked_spec(data: Mapping[str, Any] | Any) -> tuple[RuntimeSpec, list[dict[str, Any]]]:
    """The parsed spec and its warnings; :class:`SpecInvalid` when any rule reports an error."""
    if isinstance(data, RuntimeSpec):
        data = data.model_dump(mode="json")
    spec, issues = check(data)
    if spec is None or any(issue.is_error for issue in issues):
        raise SpecInvalid(issues)
    return spec, [issue_dict(issue) for issue in issues]
