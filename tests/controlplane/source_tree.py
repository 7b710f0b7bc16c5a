"""The project's own Python sources, parsed: for tests that check a rule across every module.

Checks over the source (rather than over a handful of call sites) are what keep a class of
mistake from coming back in a module nobody thought to test.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("controlplane", "deployments", "gateway", "runtime")


@dataclass(frozen=True)
class Source:
    path: Path
    tree: ast.Module

    @property
    def name(self) -> str:
        return str(self.path.relative_to(ROOT))


def sources(*roots: str) -> Iterator[Source]:
    """Every module under the given folders (or files), migrations left out (generated), and
    hidden folders too (the benches' reference venvs under ``bench/.venvs`` are not ours)."""
    for root in roots or PACKAGES:
        base = ROOT / root
        paths = [base] if base.is_file() else sorted(base.rglob("*.py"))
        for path in paths:
            inner = path.relative_to(base).parts if path != base else ()
            if "migrations" in path.parts or any(part.startswith(".") for part in inner):
                continue
            yield Source(path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))


def imports_django_settings(tree: ast.Module) -> bool:
    """True when the module binds ``settings`` to ``django.conf.settings``."""
    return any(
        isinstance(node, ast.ImportFrom)
        and node.module == "django.conf"
        and any(alias.name == "settings" and alias.asname is None for alias in node.names)
        for node in ast.walk(tree)
    )


def call_name(node: ast.Call) -> str:
    """``a.b.c(...)`` -> ``"a.b.c"``; ``""`` for calls on anything but plain names."""
    parts: list[str] = []
    func: ast.expr = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return ""
    parts.append(func.id)
    return ".".join(reversed(parts))


def string_arg(node: ast.Call, index: int = 0) -> str | None:
    """The call's positional argument at ``index`` when it is a string literal."""
    if len(node.args) <= index:
        return None
    arg = node.args[index]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None
