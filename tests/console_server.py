"""The control plane served by uvicorn as in production, as a real process for tests that need
the ASGI stack itself (connection pooling, a database that is down, the SDK over HTTP)."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from runtime.sim.launcher import REPO_ROOT, free_port
from tests.gateway.conftest import stop_process
from tests.waiting import wait_until


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def serve_console(env: dict[str, str], log: Path, *, timeout: float = 30) -> Iterator[str]:
    """Start ``controlplane.asgi`` under uvicorn with ``env`` on a free port; yield its base URL
    once ``/healthz`` answers, and stop it afterwards (its output goes to ``log``)."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "controlplane.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--no-access-log"],
        cwd=REPO_ROOT, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: server.poll() is not None or _answers(f"{url}/healthz"), "uvicorn", timeout
        )
        assert server.poll() is None, log.read_text()
        yield url
    finally:
        stop_process(server)
