"""Fault injection for tests: crash after N requests, a random error rate, a stall mid-stream.
(A slowed engine, ``--sim-slowdown``, is the engine loop's: it stretches every step.)

All decisions are deterministic (a seeded generator over the order of arrival), so a test that sets
an error rate sees the same failures on every run.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys

from runtime.sim.args import SimOptions

CRASH_EXIT_CODE = 1


class FaultInjector:
    def __init__(self, options: SimOptions) -> None:
        self.options = options
        self._rng = random.Random(0xFA17)
        self.arrived = 0
        self.finished = 0

    def on_arrival(self) -> bool:
        """Count a generation request; True when it should fail with an injected error."""
        self.arrived += 1
        rate = self.options.error_rate
        return rate > 0 and self._rng.random() < rate

    def on_finished(self) -> None:
        """Count a served request; crash the process once the configured number is reached."""
        self.finished += 1
        limit = self.options.crash_after_requests
        if limit and self.finished >= limit:
            # Let the response that just finished reach the client first, as a real crash between
            # requests would.
            asyncio.get_running_loop().call_later(0.05, self._crash)

    async def maybe_stall(self, tokens_sent_before: int, tokens_sent_after: int) -> None:
        """Stall a stream once, when it crosses ``--sim-stall-after-tokens``."""
        threshold = self.options.stall_after_tokens
        if threshold and tokens_sent_before < threshold <= tokens_sent_after:
            await asyncio.sleep(self.options.stall_seconds)

    def _crash(self) -> None:
        print(
            f"runtime.sim: injected crash after {self.finished} requests",
            file=sys.stderr,
            flush=True,
        )
        os._exit(CRASH_EXIT_CODE)
