"""Waiting in a test for what another process does: poll a check until it holds, or fail saying
what never happened (and, for a process the test started, what it printed meanwhile)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    check: Callable[[], T],
    what: str,
    timeout: float = 60.0,
    *,
    interval: float = 0.1,
    output: Callable[[], str] | None = None,
) -> T:
    """``check()``'s first truthy value, asked every ``interval`` seconds; after ``timeout``
    seconds an AssertionError naming ``what``, with ``output()`` appended when given."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{output()}" if output is not None else ""
            raise AssertionError(f"{what}: not reached within {timeout:g} s{detail}")
        time.sleep(interval)
