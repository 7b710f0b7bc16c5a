"""Real Celery worker and beat processes for end-to-end tests, pointed at the test database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from django.conf import settings

from tests.fixtures.endpoints import FAST_SIM_ENV

REPO_ROOT = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).with_name("celery"))


def engine_env(run_dir: Path, queue: str, **extra: str) -> dict[str, str]:
    """The environment of worker and beat: the test database, a queue of their own (so no other
    worker on the same Redis takes these tasks), fast engines and passes."""
    db = settings.DATABASES["default"]
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env = {
        **os.environ,
        **FAST_SIM_ENV,
        "DATABASE_URL": url,
        "CELERY_QUEUE": queue,
        "PLINTH_LOCAL_RUN_DIR": str(run_dir),
        "PLINTH_LOCAL_STOP_GRACE_S": "3",
        "PLINTH_LOCAL_ROUTER_HEALTH_CHECK_S": "1",
        "PLINTH_RECONCILE_INTERVAL_S": "1",
        "PLINTH_SETTLED_RECONCILE_S": "2",
        "PLINTH_SWEEP_INTERVAL_S": "1",
        "PLINTH_SWEEP_LEASE_S": "5",
        "PLINTH_RECONCILE_LOCK_S": "10",
        "PLINTH_PROBE_INTERVAL_S": "2",
        "PLINTH_DATA_DIR": str(run_dir.parent),
        "PYTHONPATH": str(REPO_ROOT),
    }
    env.update(extra)
    return env


def start(
    kind: str, env: Mapping[str, str], log: Path, *, pool: str = "solo"
) -> subprocess.Popen[bytes]:
    """``kind`` is ``worker`` (by default one solo process: killing it kills the worker; the
    ``prefork`` pool, with one child, enforces tasks' time limits) or ``beat``."""
    argv = [CELERY, "-A", "controlplane", kind, "-l", "info"]
    if kind == "worker":
        queue = env["CELERY_QUEUE"]
        argv += ["-Q", queue, "--pool", pool, "-n", f"{queue}@%h"]
        argv += ["--concurrency", "1"] if pool == "prefork" else []
    else:
        argv += ["-s", str(log.with_suffix(".schedule"))]
    with log.open("ab") as out:
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=dict(env), cwd=REPO_ROOT
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def processes_of(run_dir: Path) -> list[int]:
    """Pids of live processes working in ``run_dir``: the local driver starts every process of
    an endpoint there (see ``ProcessTable.spawn``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = (entry / "cwd").resolve(strict=True)
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cwd == run_dir.resolve() and state != "Z":
            found.append(int(entry.name))
    return found
