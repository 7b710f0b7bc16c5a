"""Field-by-field differences between two revisions' settings (a pure function)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_MISSING = object()


@dataclass(frozen=True)
class FieldChange:
    """One setting that differs: its dotted path and the values before and after.

    A value that exists on one side only has ``None`` on the other; ``added``/``removed`` tell
    that apart from a real null.
    """

    path: str
    before: Any
    after: Any
    added: bool = False
    removed: bool = False


def diff_revisions(a: dict[str, Any], b: dict[str, Any]) -> list[FieldChange]:
    """Every leaf that differs between spec ``a`` (before) and spec ``b`` (after), sorted by path.

    Nested objects are walked; lists are compared as whole values, because an element-wise
    diff of argv-like lists (extra flags) reads worse than old/new side by side.
    """
    changes: list[FieldChange] = []
    _walk("", a, b, changes)
    return sorted(changes, key=lambda change: change.path)


def _walk(prefix: str, before: Any, after: Any, out: list[FieldChange]) -> None:
    if isinstance(before, dict) and isinstance(after, dict):
        for name in before.keys() | after.keys():
            path = f"{prefix}.{name}" if prefix else str(name)
            _walk(path, before.get(name, _MISSING), after.get(name, _MISSING), out)
        return
    if before is _MISSING:
        out.append(FieldChange(prefix, None, after, added=True))
    elif after is _MISSING:
        out.append(FieldChange(prefix, before, None, removed=True))
    elif before != after or type(before) is not type(after):
        out.append(FieldChange(prefix, before, after))
