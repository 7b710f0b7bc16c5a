"""Keeping `make run`'s processes up, and stopping them once, whatever signals arrive.

``Supervisor`` starts named children and, polled by ``run``, restarts one that exits: after
1 s, then 2, 4 ... up to 30 s while it keeps exiting, and it gives up (``GaveUp``, which stops
the stack) when one exits more than 5 times in 5 minutes. It says each exit and restart.

``StopSignals`` turns SIGINT, SIGTERM and SIGHUP into one request to stop. A terminal's Ctrl-C
or a service manager's SIGTERM reaches the whole process group, often twice; only the first
signal counts, and only while start-up is waiting on something (``interruptible``) does it
raise ``KeyboardInterrupt``. Later signals are counted and ignored, so the cleanup that follows
(stopping the children, the local engines, Redis, PostgreSQL) always runs to its end.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

Say = Callable[[str], None]
Launch = Callable[[], "subprocess.Popen[bytes]"]


class GaveUp(Exception):
    """A child kept exiting: stop everything rather than restart it forever."""


@dataclass(frozen=True)
class RestartPolicy:
    first_delay_s: float = 1.0
    max_delay_s: float = 30.0
    max_exits: int = 5  # more exits than this within window_s: give up
    window_s: float = 300.0

    def delay(self, recent_exits: int) -> float:
        return float(min(self.max_delay_s, self.first_delay_s * 2 ** (recent_exits - 1)))


@dataclass
class Child:
    name: str
    launch: Launch
    proc: subprocess.Popen[bytes] | None = None
    exits: deque[float] = field(default_factory=deque)  # when it exited, recent ones only
    restart_at: float | None = None


class Supervisor:
    def __init__(
        self,
        say: Say,
        policy: RestartPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._say = say
        self._policy = policy or RestartPolicy()
        self._clock = clock
        self.children: list[Child] = []

    def start(self, name: str, launch: Launch) -> Child:
        """Launch a child now (its start-up errors propagate) and keep it running from then on."""
        child = Child(name, launch)
        child.proc = launch()
        self.children.append(child)
        return child

    def run(self, stopping: Callable[[], bool], interval_s: float = 0.5) -> None:
        """Watch the children until ``stopping()``; raises ``GaveUp``."""
        while not stopping():
            self.check(stopping)
            time.sleep(interval_s)

    def check(self, stopping: Callable[[], bool] = lambda: False) -> None:
        """One pass: note children that exited, restart those whose delay has passed."""
        for child in self.children:
            if stopping():
                return  # an exit now is the stop itself (the group got the signal too)
            if child.restart_at is not None:
                if self._clock() >= child.restart_at:
                    self._relaunch(child)
                continue
            code = child.proc.poll() if child.proc is not None else None
            if code is not None:
                self._exited(child, f"exited with status {code}")

    def _exited(self, child: Child, what: str) -> None:
        now = self._clock()
        child.exits.append(now)
        while now - child.exits[0] > self._policy.window_s:
            child.exits.popleft()
        recent = len(child.exits)
        if recent > self._policy.max_exits:
            raise GaveUp(
                f"{child.name} {what}, {recent} times in {self._policy.window_s:g} s; "
                "stopping everything"
            )
        delay = self._policy.delay(recent)
        child.restart_at = now + delay
        self._say(f"{child.name} {what}; restarting it in {delay:g} s")

    def _relaunch(self, child: Child) -> None:
        child.restart_at = None
        try:
            child.proc = child.launch()
        except Exception as exc:  # any start-up failure counts as an exit
            child.proc = None
            self._exited(child, f"failed to start ({exc})")
            return
        self._say(f"{child.name} restarted (pid {child.proc.pid})")

    def stop(self, names: set[str] | None = None, timeout_s: float = 10.0) -> None:
        """SIGTERM the named children (all when None), then SIGKILL what is left at the timeout."""
        chosen = [c for c in self.children if names is None or c.name in names]
        running = [(c, c.proc) for c in chosen if c.proc is not None and c.proc.poll() is None]
        for child, proc in running:
            child.restart_at = None
            proc.terminate()
        deadline = time.monotonic() + timeout_s
        for child, proc in running:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._say(f"{child.name} did not stop in time; killing it")
                proc.kill()
                proc.wait()


class StopSignals:
    """The first SIGINT/SIGTERM/SIGHUP asks to stop; the rest are ignored (see module doc)."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.requested = False
        self.ignored = 0
        self._interruptible = False

    def install(self) -> None:
        for signum in self.SIGNALS:
            signal.signal(signum, self._handle)

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """Within this block a first signal raises KeyboardInterrupt (start-up waits on servers
        and commands); elsewhere it only sets ``requested``, which the supervisor loop polls."""
        if self.requested:
            raise KeyboardInterrupt
        self._interruptible = True
        try:
            yield
        finally:
            self._interruptible = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # No printing here: a handler that writes while the interrupted code is writing to the
        # same stream raises "reentrant call", which would abort the cleanup.
        if self.requested:
            self.ignored += 1
            return
        self.requested = True
        if self._interruptible:
            self._interruptible = False
            raise KeyboardInterrupt
