"""The engine's own simulated clock, so figures do not depend on how busy the host is.

Simulated time advances by exactly the roofline duration of each step, whatever the host does; a
late wake-up on a loaded machine delays when a step's result is seen, never how long the step took
in simulated seconds. Two modes:

- ``realtime``: the engine paces itself so that simulated time tracks real time times
  ``--time-scale``. When the host wakes the loop late, the engine owes that time and catches it up
  by running the next steps without sleeping (it yields to the event loop between them, so requests
  keep being served). The debt is bounded (``MAX_DEBT_S`` real seconds): beyond it, the clock
  re-anchors and the engine simply runs slower than real time, instead of bursting through a long
  backlog. Either way no simulated time is lost or invented.
- ``fast``: busy periods run as fast as the host allows (no sleeping at all), for benchmarks;
  idle periods still pass at ``--time-scale`` so timers and windows behave. A request arriving
  while busy arrives at the end of the step it came in during, whatever the host's timing. The
  engine adds an arrival barrier (``runtime.sim.engine``): after a step that finished requests,
  simulated time holds until as many requests have arrived (closed-loop clients coming back) or
  none has arrived for ``ARRIVAL_WAIT_S`` real seconds; after an idle spell it holds until
  arrivals stop, so requests sent together start together. Without it, how many steps run before a
  client's next request lands depends on when the host schedules the client, so batches (and
  closed-loop latencies) would differ between an idle and a loaded host.

Between steps (idle) the clock follows real time, so a request's arrival, its queueing and the gap
between requests read naturally.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

CLOCK_MODES = ("realtime", "fast")
MAX_DEBT_S = 0.25  # real seconds the loop may fall behind and still catch up
# Fast mode's arrival barrier: real seconds without an arrival after which the engine stops waiting
# for clients whose requests just finished. Generous, because a loaded host can take this long to
# run a client; it costs wall time only when a client does not come back while others are served.
ARRIVAL_WAIT_S = 0.5


class SimClock:
    """Simulated seconds since the engine started; see the module docstring."""

    def __init__(
        self,
        time_scale: float,
        mode: str = "realtime",
        real: Callable[[], float] = time.monotonic,
        max_debt_s: float = MAX_DEBT_S,
    ) -> None:
        if mode not in CLOCK_MODES:
            raise ValueError(f"clock mode must be one of {CLOCK_MODES}, got {mode!r}")
        self.time_scale, self.mode, self.max_debt_s = time_scale, mode, max_debt_s
        self._real = real
        self._anchor = real()  # the real instant that maps to simulated time 0
        self.sim = 0.0  # simulated time at the start of the current step, or of the last one's end
        self._step = 0.0  # duration of the step being run (0 between steps)
        self._busy = False
        self.reanchored_s = 0.0  # real seconds of lateness beyond the debt bound (realtime mode)

    @property
    def fast(self) -> bool:
        return self.mode == "fast"

    def _mapped(self) -> float:
        return (self._real() - self._anchor) * self.time_scale

    def now(self) -> float:
        """Simulated now: real-time driven when idle, inside the running step when busy."""
        if not self._busy:
            return max(self.sim, self._mapped())
        if self.fast:
            # Real time says nothing about where inside a step a request lands when steps take
            # no real time: it arrives when the step ends (between steps: now).
            return self.sim + self._step
        # A request that arrives during a step arrives somewhere inside it, never after its end.
        return min(max(self.sim, self._mapped()), self.sim + self._step)

    def debt(self) -> float:
        """Real seconds the engine is behind its schedule (0 when on time or idle)."""
        if not self._busy or self.fast:
            return 0.0
        return max(0.0, self._real() - (self._anchor + self.sim / self.time_scale))

    def start_busy(self, at: float | None = None) -> None:
        """Work arrived (at simulated time ``at``, by default now) after an idle period."""
        if not self._busy:
            self.sim = max(self.sim, self.now() if at is None else at)
            self._busy = True

    def go_idle(self) -> None:
        if self._busy and (self.fast or self._mapped() < self.sim):
            # Fast mode ran ahead of real time: idle time passes from here, at the time scale.
            self._anchor = self._real() - self.sim / self.time_scale
        self._busy = False
        self._step = 0.0

    async def run_step(self, seconds: float) -> float:
        """Let a step of ``seconds`` simulated seconds pass; return the simulated time after it."""
        self._step = seconds
        if self.fast:
            await asyncio.sleep(0)  # serve requests between steps
        else:
            deadline = self._anchor + (self.sim + seconds) / self.time_scale
            late = self._real() - deadline
            if late < 0:
                await asyncio.sleep(-late)
            else:
                if late > self.max_debt_s:
                    excess = late - self.max_debt_s
                    self._anchor += excess
                    self.reanchored_s += excess
                await asyncio.sleep(0)
        self.sim += seconds
        self._step = 0.0
        return self.sim
