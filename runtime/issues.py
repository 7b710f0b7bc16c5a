"""`Issue`: one finding about a RuntimeSpec, as a person and the REST API will see it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Issue:
    """A problem with one field: errors block a deploy, warnings inform.

    `field` is the dotted path of the spec field to change ("parallelism.tp"); `code` is stable
    and machine-readable; `message` says what is wrong and `fix` what to do about it.
    """

    severity: Severity
    field: str
    code: str
    message: str
    fix: str | None = None

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def as_dict(self) -> dict[str, str | None]:
        return asdict(self)


def error(field: str, code: str, message: str, fix: str | None = None) -> Issue:
    return Issue("error", field, code, message, fix)


def warning(field: str, code: str, message: str, fix: str | None = None) -> Issue:
    return Issue("warning", field, code, message, fix)


def choices_text(values: list[int] | list[str]) -> str:
    """'2, 4 or 8' for a fix message."""
    words = [str(v) for v in values]
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " or " + words[-1]
