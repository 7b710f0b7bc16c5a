"""`make run`'s supervisor (scripts/supervise.py) with real child processes and real signals:
a child that exits is restarted after a growing delay and said so, one that keeps exiting stops
the stack, and cleanup survives any number of further SIGINT/SIGTERM.

The clock is the one seam: the restart delays are read from a clock the test moves, so no test
waits through a backoff (and none asserts on how long anything took)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.controlplane.scripts import SCRIPTS, load

supervise = load("supervise")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def exits_with(code: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def check_until(supervisor, said: list[str], text: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 30
    while not any(text in line for line in said):
        assert time.monotonic() < deadline, said
        supervisor.check()
        time.sleep(0.05)


@pytest.fixture
def said() -> list[str]:
    return []


def test_a_child_that_exits_is_restarted_after_a_delay_that_grows(said: list[str]) -> None:
    clock = Clock()
    supervisor = supervise.Supervisor(said.append, clock=clock)
    child = supervisor.start("worker", lambda: exits_with(3))
    first = child.proc

    check_until(supervisor, said, "worker exited with status 3; restarting it in 1 s")
    supervisor.check()
    assert child.proc is first, "restarted before its delay"
    clock.now += 1
    supervisor.check()
    assert child.proc is not first
    assert said[-1].startswith("worker restarted (pid ")

    check_until(supervisor, said, "worker exited with status 3; restarting it in 2 s")
    clock.now += 2
    check_until(supervisor, said, "worker exited with status 3; restarting it in 4 s")
    supervisor.stop()


def test_exits_far_apart_do_not_add_up(said: list[str]) -> None:
    clock = Clock()
    policy = supervise.RestartPolicy(window_s=60)
    supervisor = supervise.Supervisor(said.append, policy=policy, clock=clock)
    supervisor.start("beat", lambda: exits_with(1))
    check_until(supervisor, said, "restarting it in 1 s")
    clock.now += 61
    supervisor.check()  # restarted
    said.clear()
    check_until(supervisor, said, "beat exited with status 1; restarting it in 1 s")
    supervisor.stop()


def test_a_child_that_keeps_exiting_stops_everything(said: list[str]) -> None:
    clock = Clock()
    policy = supervise.RestartPolicy(max_exits=2, window_s=300)
    supervisor = supervise.Supervisor(said.append, policy=policy, clock=clock)
    healthy = supervisor.start("web", sleeper)
    supervisor.start("gateway", lambda: exits_with(2))
    with pytest.raises(supervise.GaveUp, match="gateway exited with status 2, 3 times"):
        for _ in range(600):
            supervisor.check()
            clock.now += 10
            time.sleep(0.05)
    assert healthy.proc.poll() is None, "a healthy child was touched before the stop"
    supervisor.stop()
    assert healthy.proc.poll() is not None


def test_a_child_that_cannot_start_counts_as_an_exit(said: list[str]) -> None:
    clock = Clock()
    launches = iter([exits_with(0)])

    def launch() -> subprocess.Popen[bytes]:
        try:
            return next(launches)
        except StopIteration:
            raise RuntimeError("Redis did not start listening on port 1") from None

    supervisor = supervise.Supervisor(said.append, clock=clock)
    supervisor.start("redis", launch)
    check_until(supervisor, said, "redis exited with status 0; restarting it in 1 s")
    clock.now += 1
    supervisor.check()
    assert said[-1] == (
        "redis failed to start (Redis did not start listening on port 1); restarting it in 2 s"
    )


def test_a_stopping_stack_restarts_nothing(said: list[str]) -> None:
    supervisor = supervise.Supervisor(said.append, clock=Clock())
    child = supervisor.start("worker", lambda: exits_with(1))
    child.proc.wait()
    supervisor.check(stopping=lambda: True)
    assert said == []


CLEANUP_SCRIPT = """
import sys, time
sys.path.insert(0, {scripts!r})
from supervise import StopSignals

signals = StopSignals()
signals.install()
try:
    with signals.interruptible():
        print("started", flush=True)
        time.sleep(600)
except KeyboardInterrupt:
    pass
finally:
    print("cleaning", flush=True)
    for step in range(5):
        time.sleep(0.4)
        print("step", step, flush=True)
    print("cleaned, ignored", signals.ignored, flush=True)
"""


@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM])
def test_cleanup_survives_repeated_signals(first: signal.Signals) -> None:
    script = textwrap.dedent(CLEANUP_SCRIPT).format(scripts=str(SCRIPTS))
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "started\n"
    proc.send_signal(first)
    assert proc.stdout.readline() == "cleaning\n"
    # One signal per cleanup step (signals of one kind sent at once would merge into one).
    for step, signum in enumerate((signal.SIGTERM, signal.SIGINT, signal.SIGTERM, signal.SIGHUP)):
        assert proc.stdout.readline() == f"step {step}\n"
        proc.send_signal(signum)
    output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert output.splitlines()[-1] == "cleaned, ignored 4"
