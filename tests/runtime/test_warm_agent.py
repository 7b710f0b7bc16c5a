"""The warm pool's in-pod agent (``runtime/warm_agent.py``, issue 29 item 6 on Kubernetes) as a
real process beside a real simulated engine: the file it reads stands where the kubelet projects
the pod's ``plinth.dev/warm`` annotation (a downward API volume), and its ``/ready`` is what the
kubelet probes for the pod's readiness. Marked warm, it takes the pod out of service and the
engine releases its GPU memory; asked back, the engine resumes and the pod is ready again."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime import warm_agent
from runtime.secret_flags import API_KEY_ENV
from runtime.sim.launcher import ManagedProcess, free_port, http_get, start_engine
from tests.waiting import wait_until

KEY = "test-warm-agent-key"


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[ManagedProcess]:
    args = ["--enable-memory-saver", "--api-key", KEY]
    proc = start_engine(args=args, log_dir=tmp_path, env={"PLINTH_SIM_COLD_START": "0"})
    yield proc
    proc.stop(timeout=5)


def _agent(engine: ManagedProcess, flag: Path, state: Path, port: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, warm_agent.__file__, f"--engine={engine.url}", f"--flag={flag}"]
    argv += [f"--state={state}", f"--port={port}"]
    # As on Kubernetes: the key in the environment (the Secret), never on the command line.
    # The script alone, as the pod has it (a ConfigMap): nothing of Plinth's on its path.
    env = {"PATH": "/usr/bin:/bin", API_KEY_ENV: KEY}
    return subprocess.Popen(argv, env=env, cwd="/", stdout=subprocess.DEVNULL)


def _status(url: str) -> int:
    try:
        return http_get(url, timeout=5.0)[0]
    except OSError:
        return 0


def test_the_agent_releases_and_resumes_its_engine_as_the_annotation_says(
    engine: ManagedProcess, tmp_path: Path
) -> None:
    flag, state, port = tmp_path / "warm", tmp_path / "released", free_port()
    agent = _agent(engine, flag, state, port)
    ready, live = f"http://127.0.0.1:{port}/ready", f"http://127.0.0.1:{port}/live"
    try:
        # No annotation projected yet: a pod starts serving.
        wait_until(lambda: _status(ready) == 200, "the pod ready", timeout=30)

        flag.write_text("true")
        wait_until(lambda: _status(ready) == 503, "the pod out of service", timeout=30)
        wait_until(lambda: _status(f"{engine.url}/ready") == 503, "released", timeout=30)
        assert state.exists()
        assert _status(live) == 200  # released, not dead: the kubelet must not restart it

        flag.write_text("false")
        wait_until(lambda: _status(ready) == 200, "the pod serving again", timeout=30)
        assert _status(f"{engine.url}/ready") == 200
        assert not state.exists()
        log = engine.log_text()
        assert "memory occupation released" in log and "memory occupation resumed" in log
    finally:
        agent.terminate()
        agent.wait(timeout=10)
