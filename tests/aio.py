"""Running a coroutine from a sync test, whatever ran before it."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_async(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` in a thread of its own: pytest-playwright's sync API keeps an event loop
    running in the main thread once a browser test has run, and asyncio.run refuses to nest, so a
    test that calls asyncio.run directly passes alone and fails after a browser test (the suite
    runs in random order). ``tests/test_conventions.py`` keeps it the only way."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
