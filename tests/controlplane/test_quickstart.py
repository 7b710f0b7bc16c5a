"""`make run`'s script on a machine with no database or Redis configured: embedded PostgreSQL
and Redis start, the console's sign-in page answers, the printed admin login works, and
Ctrl-C stops every process it started. A child killed from outside (the worker, the embedded
Redis) comes back by itself; `scripts/manage.sh` reaches this run's servers whatever the shell's
DATABASE_URL says; SIGTERM sent twice to the process group still stops everything, the local
cluster's engines and routers included."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


@pytest.fixture
def run_root() -> Iterator[Path]:
    """A folder outside pytest's own: pgserver opens its parents to its `pgserver` user, and
    another pytest session starting meanwhile closes pytest's folder again (chmod 700)."""
    root = Path(tempfile.mkdtemp(prefix="plinth-quickstart-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def printed(lines: list[str]) -> dict[str, Any]:
    """A wait's options for ``make run``: two minutes, and its output so far when that fails."""
    return {"timeout": 120.0, "interval": 0.3, "output": lambda: "".join(lines)}


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def start(
    data_dir: Path, ports: dict[str, int], **extra: str
) -> tuple[subprocess.Popen[str], list[str]]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(extra)
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


def test_run_starts_everything_embedded_and_stops_on_ctrl_c(run_root: Path) -> None:
    ports = {name: free_port() for name in ("web", "gateway", "metrics", "redis")}
    console = f"http://127.0.0.1:{ports['web']}"
    proc, lines = start(run_root / "data", ports)
    try:
        wait_until(lambda: answers(f"{console}/login/"), "console answering", **printed(lines))
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
    proc, lines = start(run_root / "data", ports)
    try:
        wait_until(lambda: answers(f"{console}/login/"), "console answering", **printed(lines))
        assert "password:" not in "".join(lines)
    finally:
        stop(proc)


def said(lines: list[str], text: str) -> bool:
    return any(text in line for line in list(lines))


def child_of(parent: int, marker: bytes) -> int:
    """The pid of ``parent``'s child whose command line holds ``marker``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and marker in cmdline:
            return int(entry.name)
    raise AssertionError(f"no child of {parent} runs {marker!r}")


def local_processes(root: Path) -> list[int]:
    """Live processes of the local cluster: each works in its endpoint's folder under ``root``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cwd = (entry / "cwd").resolve(strict=True)
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and cwd.is_relative_to(root.resolve()) and state != "Z":
            found.append(int(entry.name))
    return found


def manage_sh(data_dir: Path, *args: str) -> str:
    # A shell that points elsewhere: manage.sh must still use this run's servers.
    env = {
        **os.environ,
        "PLINTH_DATA_DIR": str(data_dir),
        "DATABASE_URL": "postgres://postgres@127.0.0.1:1/someone-elses",
        "REDIS_URL": "redis://127.0.0.1:1/0",
    }
    done = subprocess.run(
        ["bash", "scripts/manage.sh", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_run_restarts_what_dies_and_two_sigterms_stop_everything(run_root: Path) -> None:
    from tests.fixtures.endpoints import FAST_SIM_ENV, small_spec

    ports = {name: free_port() for name in ("web", "gateway", "metrics", "redis")}
    console = f"http://127.0.0.1:{ports['web']}"
    data = run_root / "data"
    fast = {**FAST_SIM_ENV, "PLINTH_LOCAL_STOP_GRACE_S": "3", "PLINTH_RECONCILE_INTERVAL_S": "1"}
    proc, lines = start(data, ports, PLINTH_LOCAL_ROUTER_HEALTH_CHECK_S="1", **fast)
    try:
        wait_until(lambda: answers(f"{console}/login/"), "console answering", **printed(lines))
        key = manage_sh(data, "plinth_create_key", "--name", "test", "--role", "admin")
        created = httpx.post(
            f"{console}/api/v1/deployments",
            headers={"Authorization": f"Bearer {key}"},
            json={"slug": "kept", "name": "Kept", "spec": small_spec()},
            timeout=30,
        )
        assert created.status_code == 201, created.text
        running = lambda: len(local_processes(data / "local")) >= 2  # noqa: E731
        wait_until(running, "an engine and a router running", **printed(lines))

        os.kill(child_of(proc.pid, b"worker"), signal.SIGKILL)
        wait_until(lambda: said(lines, "worker restarted (pid"), "worker back", **printed(lines))
        assert said(lines, "worker exited with status -9; restarting it in 1 s")

        os.kill(int((data / "redis" / "redis.pid").read_text()), signal.SIGKILL)
        wait_until(lambda: said(lines, "redis restarted (pid"), "redis back", **printed(lines))
        assert said(lines, "redis exited with status -9; restarting it in 1 s")
        assert answers(f"{console}/login/")
        assert answers(f"http://127.0.0.1:{ports['gateway']}/health")
        assert not said(lines, "[plinth] stopping")
    finally:
        # A service manager's stop, then another before the cleanup is done.
        os.killpg(proc.pid, signal.SIGTERM)
        # Best effort: the second SIGTERM is the point, after the first was seen or not.
        with contextlib.suppress(AssertionError):
            wait_until(lambda: said(lines, "[plinth] stopping"), "stopping", timeout=30)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=120)
    output = "".join(lines)
    assert "[plinth] stopped" in output, output
    assert local_processes(data / "local") == [], "an engine or router outlived make run"
    for port in ports.values():
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"


def test_manage_sh_refuses_a_data_folder_make_run_never_used(run_root: Path) -> None:
    env = {**os.environ, "PLINTH_DATA_DIR": str(run_root)}
    done = subprocess.run(
        ["bash", "scripts/manage.sh", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "run.env is missing" in done.stderr
