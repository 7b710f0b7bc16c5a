"""Log tails of a local-cluster endpoint's processes, read from the files the local driver writes.

The console may not import drivers (import-linter), and the files are plain text under
``PLINTH_LOCAL_RUN_DIR/<deployment id>/``, so reading them needs no driver. A replica is named
by its log file's path relative to that directory; the caller's choice is matched against the
files that exist, never joined into a path, so no input can reach outside the directory.
Kubernetes endpoints' logs come through the driver (not shown here yet).
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

from django.conf import settings

from deployments.models import Deployment

MAX_LINES = 500
# A tail reads at most this many bytes from the end, so a huge log cannot stall a page.
MAX_BYTES = 256 * 1024


def _run_dir(deployment: Deployment) -> Path:
    return Path(settings.PLINTH_LOCAL_RUN_DIR) / str(deployment.pk)


def log_files(deployment: Deployment) -> dict[str, Path]:
    """Replica name -> log file, sorted by name; empty when nothing has run here."""
    root = _run_dir(deployment)
    if not root.is_dir():
        return {}
    found = {}
    for path in sorted(root.rglob("*.log")):
        if path.is_file() and not path.is_symlink():
            found[str(path.relative_to(root).with_suffix(""))] = path
    return found


def tail(path: Path, lines: int = 200) -> list[str]:
    lines = max(1, min(lines, MAX_LINES))
    with path.open("rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(0, size - MAX_BYTES))
        data = handle.read()
    text = data.decode("utf-8", errors="replace")
    return list(deque(text.splitlines(), maxlen=lines))


def read_logs(
    deployment: Deployment, replica: str | None, lines: int = 200
) -> tuple[str, list[str]]:
    """(replica shown, its last ``lines`` lines); the first replica when none or unknown asked."""
    files = log_files(deployment)
    if not files:
        return "", []
    name = replica if replica in files else next(iter(files))
    return name, tail(files[name], lines)
