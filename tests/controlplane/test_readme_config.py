"""The README's configuration table lists every environment variable the code reads, and no other.

The table was written by hand and fell 20 variables behind the code. The code is the source:
this test collects every variable name read through ``controlplane.env``'s readers (and the
gateway's own ``_env_*`` wrappers of them), ``os.environ`` and ``os.getenv`` in the control
plane, the engine, the gateway and ``scripts/run.py``, and compares it with the table's first
column. A row may name a family with a trailing ``*`` (``PLINTH_SIM_*``).
"""

from __future__ import annotations

import ast
import re

from tests.controlplane.source_tree import ROOT, call_name, sources, string_arg

SCANNED = ("controlplane", "deployments", "gateway", "scripts/run.py")
# Set by each entry point for Django itself (documented by Django), not an operator's setting.
NOT_CONFIGURATION = {"DJANGO_SETTINGS_MODULE"}
ENVIRON_CALLS = {"get", "pop", "setdefault"}
NAME = re.compile(r"`([A-Z][A-Z0-9_]*\*?)`")


def _is_environ(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _literal(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _read_name(node: ast.AST) -> str | None:
    """The variable a node reads, when it is a read of one by a literal name."""
    if isinstance(node, ast.Call):
        name = call_name(node)
        last = name.rsplit(".", 1)[-1]
        on_environ = isinstance(node.func, ast.Attribute) and _is_environ(node.func.value)
        if last.startswith(("env_", "_env_")) or name == "os.getenv":
            return string_arg(node)
        if on_environ and last in ENVIRON_CALLS:
            return string_arg(node)
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return _literal(node.slice) if _is_environ(node.value) else None
    if isinstance(node, ast.Compare) and any(_is_environ(side) for side in node.comparators):
        return _literal(node.left)  # "NAME" in os.environ
    return None


def variables_read() -> dict[str, list[str]]:
    reads: dict[str, list[str]] = {}
    for source in sources(*SCANNED):
        for node in ast.walk(source.tree):
            name = _read_name(node)
            if name and name not in NOT_CONFIGURATION:
                reads.setdefault(name, []).append(f"{source.name}:{getattr(node, 'lineno', 0)}")
    return reads


def documented() -> set[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in NAME.findall(row.split("|")[1])}


def _covered(name: str, table: set[str]) -> bool:
    return name in table or any(
        entry.endswith("*") and name.startswith(entry[:-1]) for entry in table
    )


def test_the_scan_sees_every_kind_of_read() -> None:
    reads = variables_read()
    assert "PLINTH_SWEEP_INTERVAL_S" in reads  # settings.py, through env_int
    assert "GATEWAY_HOLD_SECONDS" in reads  # the gateway's _env_float wrapper
    assert "PLINTH_WEB_PORT" in reads  # scripts/run.py, os.environ.get
    assert "HF_HUB_OFFLINE" in reads  # os.environ.setdefault: the operator's value wins


def test_every_variable_the_code_reads_is_in_the_readme() -> None:
    table = documented()
    missing = {name: where for name, where in variables_read().items() if not _covered(name, table)}
    assert missing == {}, "add a row to README.md's Configuration table for each"


def test_every_variable_in_the_readme_is_read_by_the_code() -> None:
    reads = variables_read()
    stale = sorted(name for name in documented() if not name.endswith("*") and name not in reads)
    assert stale == [], "README.md documents variables nothing reads"
