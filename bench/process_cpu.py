"""CPU time of a process tree, read from /proc: the benches' CPU-per-request and idle figures."""

from __future__ import annotations

import os
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int | None, only: str = "") -> float:
    """User + system CPU of ``pid`` and its descendants (a proxy or Celery may run workers),
    counting only processes whose command line contains ``only`` when it is given."""
    if pid is None:
        return 0.0
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry.name)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, []))
        if current not in stats or (only and only not in _cmdline(current)):
            continue
        total += (int(stats[current][11]) + int(stats[current][12])) / CLOCK_TICKS
    return total


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
