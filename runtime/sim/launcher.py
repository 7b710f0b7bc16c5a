"""Start simulated engines and the smg router as real processes on loopback, from Python.

For tests and benchmarks of anything that talks to engines (the local driver, the gateway, the
router): ``SimCluster(engines=2, policy="cache_aware")`` starts two ``python -m runtime.sim``
processes and one ``smg launch`` in front of them, waits until the router routes to all of them, and
stops everything on exit. Standard library only, so any test suite can use it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = "sim/llama-test"
DEFAULT_TIME_SCALE = 100.0


class LaunchError(RuntimeError):
    """A process exited or did not become ready in time; the message ends with its log tail."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = 2.0, api_key: str | None = None) -> tuple[int, bytes]:
    """(status, body) of a GET; status 0 when nothing answers."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {url}")
    request = urllib.request.Request(url)  # noqa: S310 (scheme checked above)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
    except (OSError, ValueError):
        return 0, b""


@dataclass
class ManagedProcess:
    """One child process with its log file."""

    name: str
    url: str
    port: int
    popen: subprocess.Popen[bytes]
    log_path: Path
    argv: list[str] = field(default_factory=list)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        if self.alive():
            self.popen.send_signal(sig)

    def wait(self, timeout: float) -> int | None:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; returns the exit status."""
        self.signal(signal.SIGTERM)
        status = self.wait(timeout)
        if status is None:
            self.popen.kill()
            status = self.wait(5.0)
        return status

    def wait_until(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            if not self.alive():
                raise LaunchError(
                    f"{self.name} exited ({self.popen.returncode}) {what}\n{self._tail()}"
                )
            time.sleep(0.1)
        raise LaunchError(f"{self.name} was not {what} within {timeout:g} s\n{self._tail()}")

    def _tail(self) -> str:
        return "\n".join(self.log_text().splitlines()[-30:])


def _spawn(
    name: str, argv: list[str], port: int, env: Mapping[str, str], log_dir: Path
) -> ManagedProcess:
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log:
        popen = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=dict(env), cwd=REPO_ROOT
        )
    return ManagedProcess(name, f"http://127.0.0.1:{port}", port, popen, log_path, argv)


def _log_dir(log_dir: Path | str | None) -> Path:
    path = Path(log_dir) if log_dir else Path(tempfile.mkdtemp(prefix="plinth-sim-"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def engine_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def start_engine(
    *,
    model: str = DEFAULT_MODEL,
    args: Sequence[str] = (),
    port: int | None = None,
    time_scale: float = DEFAULT_TIME_SCALE,
    startup_delay: float = 0.0,
    env: Mapping[str, str] | None = None,
    log_dir: Path | str | None = None,
    name: str | None = None,
    wait: bool = True,
    timeout: float = 30.0,
) -> ManagedProcess:
    """Start ``python -m runtime.sim``; with ``wait``, return once ``/ready`` answers 200.

    ``args`` are SGLang launch flags (and ``--sim-*`` options) added after the model and port.
    """
    port = port or free_port()
    argv = [sys.executable, "-m", "runtime.sim", "--model-path", model, "--port", str(port)]
    argv += ["--enable-metrics", "--enable-cache-report"]
    argv += ["--time-scale", f"{time_scale:g}", "--sim-startup-delay", f"{startup_delay:g}"]
    argv += list(args)
    proc = _spawn(name or f"engine-{port}", argv, port, engine_env(env), _log_dir(log_dir))
    if wait:
        wait_engine_ready(proc, timeout)
    return proc


def wait_engine_ready(proc: ManagedProcess, timeout: float = 30.0) -> None:
    proc.wait_until(lambda: http_get(f"{proc.url}/ready")[0] == 200, timeout, "ready")


def smg_binary() -> str:
    beside = Path(sys.executable).with_name("smg")
    found = str(beside) if beside.exists() else shutil.which("smg")
    if not found:
        raise LaunchError("the smg router binary is not installed (pip install smg==1.13.0)")
    return found


def start_router(
    worker_urls: Sequence[str],
    *,
    policy: str = "cache_aware",
    args: Sequence[str] = (),
    port: int | None = None,
    api_key: str | None = None,
    env: Mapping[str, str] | None = None,
    log_dir: Path | str | None = None,
    wait: bool = True,
    timeout: float = 30.0,
    prefill: Sequence[tuple[str, int]] = (),
    decode: Sequence[str] = (),
) -> ManagedProcess:
    """Start ``smg launch`` in front of ``worker_urls``; with ``wait``, until all are healthy.

    With ``prefill`` ((url, bootstrap port) pairs) and ``decode`` urls instead, the router runs
    in ``--pd-disaggregation`` mode.
    """
    port = port or free_port()
    argv = [smg_binary(), "launch", "--host", "127.0.0.1", "--port", str(port)]
    if worker_urls:
        argv += ["--worker-urls", *worker_urls]
    if prefill or decode:
        argv.append("--pd-disaggregation")
        for url, bootstrap_port in prefill:
            argv += ["--prefill", url, str(bootstrap_port)]
        for url in decode:
            argv += ["--decode", url]
    argv += ["--policy", policy]
    argv += ["--health-check-interval-secs", "1", "--prometheus-port", str(free_port())]
    argv += ["--prometheus-host", "127.0.0.1", "--log-level", "warn"]
    argv += ["--shutdown-grace-period-secs", "1"]
    if api_key:
        argv += ["--api-key", api_key]
    argv += list(args)
    router_env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}
    proc = _spawn(f"smg-{port}", argv, port, router_env, _log_dir(log_dir))
    if wait:
        wait_router_ready(proc, len(worker_urls) + len(prefill) + len(decode), timeout, api_key)
    return proc


def router_workers(url: str, api_key: str | None = None) -> list[dict[str, Any]]:
    status, body = http_get(f"{url}/workers", api_key=api_key)
    if status != 200:
        return []
    workers = json.loads(body).get("workers", [])
    return [w for w in workers if isinstance(w, dict)]


def wait_router_ready(
    proc: ManagedProcess, workers: int, timeout: float = 30.0, api_key: str | None = None
) -> None:
    def all_healthy() -> bool:
        listed = router_workers(proc.url, api_key)
        return len(listed) >= workers and all(w.get("is_healthy", True) for w in listed)

    proc.wait_until(all_healthy, timeout, f"routing to {workers} workers")
    proc.wait_until(lambda: http_get(f"{proc.url}/readiness")[0] == 200, timeout, "ready")


class SimCluster:
    """N simulated engines behind one smg router; a context manager that cleans up after itself.

    >>> with SimCluster(engines=2, policy="round_robin") as cluster:
    ...     openai.OpenAI(base_url=f"{cluster.url}/v1", api_key="x")
    """

    def __init__(
        self,
        engines: int = 2,
        *,
        policy: str = "cache_aware",
        model: str = DEFAULT_MODEL,
        engine_args: Sequence[str] = (),
        router_args: Sequence[str] = (),
        time_scale: float = DEFAULT_TIME_SCALE,
        api_key: str | None = None,
        log_dir: Path | str | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.count, self.policy, self.model = engines, policy, model
        self.engine_args = list(engine_args) + (["--api-key", api_key] if api_key else [])
        self.router_args, self.time_scale, self.api_key = list(router_args), time_scale, api_key
        self.log_dir, self.timeout = _log_dir(log_dir), timeout
        self.engines: list[ManagedProcess] = []
        self.router: ManagedProcess | None = None

    @property
    def url(self) -> str:
        assert self.router is not None, "the cluster is not started"
        return self.router.url

    @property
    def engine_urls(self) -> list[str]:
        return [e.url for e in self.engines]

    def start(self) -> SimCluster:
        try:
            for i in range(self.count):
                self.engines.append(self._start_engine(i))
            for engine in self.engines:
                wait_engine_ready(engine, self.timeout)
            self.router = start_router(
                self.engine_urls,
                policy=self.policy,
                args=self.router_args,
                api_key=self.api_key,
                log_dir=self.log_dir,
                timeout=self.timeout,
            )
        except BaseException:
            self.close()
            raise
        return self

    def restart_router(self) -> ManagedProcess:
        """A new router on the old one's port, once that one is stopped or killed: a cluster's
        router coming back at the address its clients know."""
        assert self.router is not None, "the cluster is not started"
        port = self.router.port
        self.router.stop()
        self.router = start_router(
            self.engine_urls,
            policy=self.policy,
            args=self.router_args,
            port=port,
            api_key=self.api_key,
            log_dir=self.log_dir,
            timeout=self.timeout,
        )
        return self.router

    def _start_engine(self, index: int) -> ManagedProcess:
        return start_engine(
            model=self.model,
            args=self.engine_args,
            time_scale=self.time_scale,
            log_dir=self.log_dir,
            name=f"engine-{index}",
            wait=False,
        )

    def close(self) -> None:
        if self.router is not None:
            self.router.stop()
        for engine in self.engines:
            engine.stop()

    def __enter__(self) -> SimCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
