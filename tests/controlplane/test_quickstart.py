"""`make run`'s script on a machine with no database or Redis configured: embedded PostgreSQL
and Redis start, the console's sign-in page answers, the printed admin login works, and
Ctrl-C stops every process it started."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate, timeout: float = 120.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.3)
    return False


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start(data_dir: Path, ports: dict[str, int]) -> tuple[subprocess.Popen[str], list[str]]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(
        PLINTH_DATA_DIR=str(data_dir),
        PLINTH_ENV="development",
        PLINTH_WEB_PORT=str(ports["web"]),
        PLINTH_GATEWAY_PORT=str(ports["gateway"]),
        PLINTH_GATEWAY_METRICS_PORT=str(ports["metrics"]),
        PLINTH_EMBEDDED_REDIS_PORT=str(ports["redis"]),
    )
    proc = subprocess.Popen(
        [sys.executable, "scripts/run.py"],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    lines: list[str] = []
    assert proc.stdout is not None
    stream = proc.stdout
    threading.Thread(target=lambda: lines.extend(iter(stream.readline, "")), daemon=True).start()
    return proc, lines


def stop(proc: subprocess.Popen[str]) -> None:
    # Ctrl-C in a terminal signals the whole foreground process group.
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=60)


def test_run_starts_everything_embedded_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    ports = {name: free_port() for name in ("web", "gateway", "metrics", "redis")}
    console = f"http://127.0.0.1:{ports['web']}"
    proc, lines = start(tmp_path / "data", ports)
    try:
        assert wait_until(lambda: answers(f"{console}/login/")), "".join(lines)
        assert answers(f"http://127.0.0.1:{ports['gateway']}/health")
        output = "".join(lines)
        match = re.search(r"password: (\S+)", output)
        assert match, output
        client = httpx.Client(base_url=console, follow_redirects=False)
        page = client.get("/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
        assert token
        signed_in = client.post(
            "/login/",
            data={
                "username": "admin",
                "password": match.group(1),
                "csrfmiddlewaretoken": token.group(1),
            },
        )
        assert signed_in.status_code == 302, signed_in.text[:500]
    finally:
        stop(proc)
    assert "[plinth] stopped" in "".join(lines)
    for port in ports.values():
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"

    # A second run reuses the data: no new admin password is printed.
    proc, lines = start(tmp_path / "data", ports)
    try:
        assert wait_until(lambda: answers(f"{console}/login/")), "".join(lines)
        assert "password:" not in "".join(lines)
    finally:
        stop(proc)
