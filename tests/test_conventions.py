"""Conventions every test keeps so that the suite passes in any order (pytest-randomly)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent

# asyncio.run directly is fine only where no browser test's event loop can be running: inside a
# thread of its own, or in a script run as a separate process.
ASYNCIO_RUN_ALLOWED = {
    "aio.py",  # run_async itself
    "test_conventions.py",  # this check
    "sdk/journey.py",  # runs in the SDK's own venv, a separate process
    "controlplane/test_redis_durability.py",  # inside the counting thread
}


def test_coroutines_are_run_through_run_async() -> None:
    offenders = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("*.py")
        if "asyncio.run(" in path.read_text()
        and str(path.relative_to(TESTS)) not in ASYNCIO_RUN_ALLOWED
    ]
    assert not offenders, f"use tests.aio.run_async instead of asyncio.run in {offenders}"
