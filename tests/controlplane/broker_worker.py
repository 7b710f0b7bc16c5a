"""The Celery app of the broker-restart test's worker: Plinth's own, plus one task to hold.

``tests.hold`` writes ``start <name>`` to a log file, waits until a release file exists (the test
decides when the task ends, so Redis restarts while it runs), then writes ``done <name>``.
"""

from __future__ import annotations

import time
from pathlib import Path

from controlplane.celery import app


@app.task(name="tests.hold", ignore_result=True)
def hold(log: str, release: str, name: str) -> None:
    with open(log, "a") as out:
        out.write(f"start {name}\n")
    while not Path(release).exists():
        time.sleep(0.05)
    with open(log, "a") as out:
        out.write(f"done {name}\n")


__all__ = ["app", "hold"]
