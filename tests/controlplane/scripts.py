"""`make run`'s scripts (scripts/*.py are not a package) loaded as modules for tests, and the
embedded Redis started with `make run`'s own command line."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import redis

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load(name: str) -> ModuleType:
    """scripts/<name>.py as a module; its own imports of sibling scripts resolve too."""
    if str(SCRIPTS) not in sys.path:
        sys.path.append(str(SCRIPTS))
    spec = importlib.util.spec_from_file_location(f"plinth_script_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class EmbeddedRedis:
    """redis-server as `make run` starts it (scripts/run.py's ``redis_argv``), on a free port."""

    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.data_dir = data_dir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(load("run").redis_argv(self.port, self.data_dir))
        client = self.client()
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:  # BusyLoadingError too: it is still reading its AOF
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)
