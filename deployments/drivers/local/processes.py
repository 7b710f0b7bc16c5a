"""Supervised processes of the local cluster, remembered in files so any worker can adopt them.

Each process has ``<name>.json`` (pid, port, role, revision, argv hash, start time) and
``<name>.log`` under the endpoint's run directory. A worker that restarts reads the records back
and finds its processes still running (they live in their own session, so a worker's death does
not take them down). A pid is trusted only while ``/proc/<pid>/stat`` shows the start time that was
recorded, so a recycled pid is never mistaken for an engine, and never signalled.

Only a process' parent can reap it, and any Celery pool process may be the one that stops it,
so the process that starts one also starts a thread that waits for its exit: whoever signals
it, no ``<defunct>`` entry is left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from deployments.drivers.base import redact_argv

# Popen objects of processes this worker started: their exit codes, once reaped.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
# Exited children kept for their exit codes before the oldest are forgotten.
_KEEP_EXITED = 256


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _processes_in(root: Path) -> list[tuple[int, int]]:
    """(pid, parent pid) of the live processes whose working directory is ``root``."""
    found = []
    target = root.resolve()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "cwd").resolve(strict=True) != target:
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            found.append((int(entry.name), int(fields[1])))
    return found


def _start_ticks(pid: int) -> int | None:
    """The process' start time in clock ticks since boot; None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in {"Z", "X"}:  # exited, waiting to be reaped
        return None
    return int(fields[19])


@dataclass
class ProcessRecord:
    name: str
    role: str
    revision: int
    pid: int
    port: int
    start_ticks: int
    config: str  # hash of argv + env: a changed config means restart
    started_at: float
    extra_port: int = 0  # the router's metrics port; a prefill engine's KV bootstrap port
    restarts: int = 0
    stopping_since: float | None = None
    exit_code: int | None = None
    argv: list[str] = field(default_factory=list)
    # A warm pool's replica: when its GPU memory was released (None: it holds it), and when it
    # was last resumed from that; both stay for the timeline's lines.
    released_at: float | None = None
    resumed_at: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        child = _CHILDREN.get(self.pid)
        if child is not None and child.returncode is not None:  # reaped by its waiter thread
            self.exit_code = child.returncode
            _CHILDREN.pop(self.pid, None)
            return False
        return _start_ticks(self.pid) == self.start_ticks

    def signal(self, sig: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


class ProcessTable:
    """The records of one endpoint's run directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def records(self) -> list[ProcessRecord]:
        if not self.root.is_dir():
            return []
        found = []
        for path in sorted(self.root.glob("*.json")):
            with contextlib.suppress(OSError, ValueError, TypeError):
                found.append(ProcessRecord(**json.loads(path.read_text())))
        return found

    def save(self, record: ProcessRecord) -> None:
        path = self.root / f"{record.name}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(record)))
        tmp.replace(path)  # atomic: a worker killed mid-write leaves the old record

    def forget(self, record: ProcessRecord) -> None:
        (self.root / f"{record.name}.json").unlink(missing_ok=True)

    def log_path(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def log_names(self) -> list[str]:
        """Names of the processes that left a log here, sorted; links are not followed."""
        if not self.root.is_dir():
            return []
        logs = self.root.glob("*.log")
        return sorted(p.stem for p in logs if p.is_file() and not p.is_symlink())

    def spawn(
        self,
        record: ProcessRecord,
        argv: list[str],
        env: Mapping[str, str],
        cwd: Path,
    ) -> ProcessRecord:
        """Start ``argv`` for ``record`` (pid and start time filled in) and save the record.

        ``cwd`` is the endpoint's run directory: a process' working directory says whose it is,
        even for programs that rewrite their command line and environment (setproctitle).
        """
        self.root.mkdir(parents=True, exist_ok=True)
        with self._spawn_lock(), self.log_path(record.name).open("ab") as log:
            # A worker killed between starting a process and saving its record left it running
            # with no record: it would run beside the one started now (a duplicate engine).
            self._kill_orphans()
            # No API key in the log the console shows, nor in the record.
            shown = redact_argv(argv)
            # Stamped (UTC, ISO 8601) so a reader knows when each run began.
            now = datetime.now(UTC).isoformat(timespec="seconds")
            log.write(f"{now} --- starting {record.name}: {' '.join(shown)}\n".encode())
            log.flush()
            popen = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env),
                cwd=cwd,
                start_new_session=True,  # survives the worker; signalled by pid only
            )
            _reap_when_it_exits(popen)
            record.pid = popen.pid
            record.start_ticks = _start_ticks(popen.pid) or 0
            record.started_at = time.time()
            record.argv = shown
            self.save(record)
        return record

    @contextlib.contextmanager
    def _spawn_lock(self) -> Iterator[None]:
        """One spawner at a time in this run directory, across worker processes: while it is
        held, every process here not in a record is an orphan (the lock dies with its holder)."""
        with (self.root / ".spawn.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def kill_orphans(self) -> int:
        """``_kill_orphans`` while no spawner runs here (it holds the spawn lock); how many."""
        if not self.root.is_dir():
            return 0
        with self._spawn_lock():
            return self._kill_orphans()

    def _kill_orphans(self) -> int:
        """SIGKILL the processes working in this run directory that no record names and whose
        parent no record names either (a recorded process' own children are its business)."""
        recorded = {r.pid for r in self.records() if r.pid}
        killed = 0
        for pid, parent in _processes_in(self.root):
            if pid != os.getpid() and pid not in recorded and parent not in recorded:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
        return killed

    def terminate(self, record: ProcessRecord, grace_s: float) -> bool:
        """SIGTERM once, SIGKILL after ``grace_s``; True once the process is gone (record too)."""
        if not record.alive():
            self.forget(record)
            return True
        now = time.time()
        if record.stopping_since is None:
            record.signal(signal.SIGTERM)
            record.stopping_since = now
            self.save(record)
        elif now - record.stopping_since >= grace_s:
            record.signal(signal.SIGKILL)
        # A well-behaved process exits quickly; wait briefly so most stops finish in one call.
        if not _wait_gone(record, min(grace_s, 2.0)):
            return False
        self.forget(record)
        return True

    def kill(self, record: ProcessRecord) -> None:
        """SIGKILL now (it cannot be ignored, even by a stopped process), then forget it."""
        record.signal(signal.SIGKILL)
        _wait_gone(record, 2.0)
        self.forget(record)


def _wait_gone(record: ProcessRecord, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and record.alive():
        time.sleep(0.05)
    return not record.alive()


def _reap_when_it_exits(popen: subprocess.Popen[bytes]) -> None:
    """Wait for the child in a daemon thread of this (its parent) process, so its exit is
    collected even when another process stops it and this one never looks at it again."""
    exited = [pid for pid, child in _CHILDREN.items() if child.returncode is not None]
    for pid in exited[: max(0, len(exited) - _KEEP_EXITED)]:
        _CHILDREN.pop(pid, None)
    _CHILDREN[popen.pid] = popen
    waiter = threading.Thread(target=popen.wait, name=f"reap-{popen.pid}", daemon=True)
    waiter.start()


def stop_all(run_dir: Path, grace_s: float) -> int:
    """Stop every process of every endpoint under ``run_dir``; the number stopped.

    For shutting the local cluster down with the control plane (``make run``'s Ctrl-C). The
    endpoints' desired state is untouched, so the next start's reconcile brings them back.
    """
    tables = (
        [ProcessTable(d) for d in sorted(run_dir.glob("*")) if d.is_dir()]
        if run_dir.is_dir()
        else []
    )
    live = [(t, r) for t in tables for r in t.records() if r.alive()]
    for _, record in live:
        record.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(r.alive() for _, r in live):
        time.sleep(0.1)
    for table, record in live:
        record.signal(signal.SIGKILL)
        table.forget(record)
    # A worker killed between starting a process and saving its record left one that no
    # record names; the next spawn would kill it, but after a stop there may be none.
    orphans = sum(table.kill_orphans() for table in tables)
    return len(live) + orphans
