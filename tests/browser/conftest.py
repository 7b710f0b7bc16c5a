"""A live console for browser tests: uvicorn (ASGI, so streaming works) and a Celery worker as
real subprocesses against the test database, and Debian's Chromium driven by Playwright.

The subprocesses bind free loopback ports and are stopped in teardown. Tests that use them
need committed data: mark them ``django_db(transaction=True)``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = REPO / "artifacts" / "screenshots"


@pytest.fixture(scope="session")
def browser_type_launch_args(_orm_beside_playwright: None) -> dict[str, Any]:
    """pytest-playwright launches Debian's Chromium (Playwright cannot download one here)."""
    return {
        "executable_path": CHROMIUM,
        "args": ["--disable-gpu", "--disable-quic", "--no-sandbox"],
    }


@pytest.fixture(scope="session", autouse=True)
def _orm_beside_playwright() -> Iterator[None]:
    # Playwright's sync API runs an event loop in this thread; Django would then refuse ORM
    # calls (and test-database set-up) as "async unsafe". They are plain sequential code here.
    before = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    yield
    if before is None:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    else:
        os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = before


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class LiveConsole:
    url: str
    run_dir: Path
    logs: Path

    def diagnostics(self, lines: int = 40) -> str:
        """The tails of the server's, the worker's and every engine's log, for a failure."""
        paths = sorted(self.logs.glob("*.log")) + sorted(self.run_dir.rglob("*.log"))
        parts = []
        for path in paths:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(parts)


def at_rest(deployment_id: object, timeout: float = 60.0) -> None:
    """Wait until the live worker has acted on an endpoint's last change and left it at rest
    (stopped or scaled to zero, nothing running, no pass due).

    A test that writes into the endpoint's run directory waits for this first: otherwise the
    worker may still be acting on the create, starting an engine that writes the very log file
    the test wrote, or stopping one after the test looked.
    """
    from django.db.models import F

    from deployments.models import Deployment
    from tests.waiting import wait_until

    rest = Deployment.objects.filter(
        pk=deployment_id, observed_generation=F("generation"), next_reconcile_at__isnull=True
    )
    wait_until(rest.exists, f"endpoint {deployment_id} at rest", timeout)


def _environment(db_name: str, tmp: Path) -> dict[str, str]:
    db = settings.DATABASES["default"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db_name}",
        REDIS_URL=settings.REDIS_URL,
        PLINTH_ENV="test",
        PLINTH_DEBUG="false",
        PLINTH_DATA_DIR=str(tmp / "data"),
        PLINTH_LOCAL_RUN_DIR=str(tmp / "local"),
        # The console checks the key and calls the endpoint's router itself, so these tests
        # need no gateway process (the gateway has its own tests).
        PLINTH_PLAYGROUND_UPSTREAM="router",
        PLINTH_SIM_TIME_SCALE="50",
        # Quick passes so an endpoint comes up in seconds (beat runs inside the worker).
        PLINTH_SWEEP_INTERVAL_S="1",
        PLINTH_RECONCILE_INTERVAL_S="1",
        PLINTH_PROBE_INTERVAL_S="2",
        PLINTH_LOCAL_STOP_GRACE_S="2",
        PLINTH_LOCAL_ROUTER_HEALTH_CHECK_S="1",
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    return env


def _wait_for(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server did not answer: {log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


@pytest.fixture(scope="module")
def live_console(
    django_db_setup: None, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveConsole]:
    tmp = tmp_path_factory.mktemp("console")
    env = _environment(settings.DATABASES["default"]["NAME"], tmp)
    port = free_port()
    logs = tmp / "logs"
    logs.mkdir()
    (tmp / "data").mkdir()
    web_log, worker_log = logs / "uvicorn.log", logs / "celery.log"
    bin_dir = Path(sys.executable).parent
    web = subprocess.Popen(
        [str(bin_dir / "uvicorn"), "controlplane.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--no-access-log"],
        cwd=REPO, env=env, stdout=web_log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    worker = subprocess.Popen(
        [str(bin_dir / "celery"), "-A", "controlplane", "worker", "--pool=solo",
         "--beat", "--without-heartbeat", "--without-gossip", "--without-mingle", "-Q",
         settings.CELERY_TASK_DEFAULT_QUEUE, "-l", "info"],
        cwd=REPO, env=env, stdout=worker_log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        _wait_for(f"http://127.0.0.1:{port}/healthz", web, web_log)
        yield LiveConsole(f"http://127.0.0.1:{port}", tmp / "local", logs)
    finally:
        _stop(worker)
        _stop(web)
        stop_local_processes(tmp / "local")


def stop_local_processes(run_dir: Path) -> None:
    """Stop engines and routers the worker left behind (they outlive it by design)."""
    from deployments.drivers.local.processes import ProcessTable

    if not run_dir.is_dir():
        return
    for endpoint_dir in run_dir.iterdir():
        for record in ProcessTable(endpoint_dir).records():
            record.signal(15)
    time.sleep(0.5)
    for endpoint_dir in run_dir.iterdir():
        for record in ProcessTable(endpoint_dir).records():
            record.signal(9)
