"""The tools environment: made once however many workers ask at the same time, a half-made one
is made again, and a finished one is reused without a look at pip.

The seam mocked is the install itself (``venv.create`` and pip's subprocess): the real install is
~1.2 GB from PyPI, which ``make test`` does once before pytest (test_end_to_end.py uses it).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from deployments.drivers.local import tools_env


@pytest.fixture
def installs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    done: list[list[str]] = []

    def create(env: Path, **_: Any) -> None:
        (Path(env) / "bin").mkdir(parents=True)

    def pip(argv: list[str], **_: Any) -> None:
        time.sleep(0.2)  # long enough for the other threads to queue on the lock
        done.append(argv)
        (Path(argv[0]).parent / "aiperf").write_text("#!/bin/sh\n")

    monkeypatch.setattr(tools_env.venv, "create", create)
    monkeypatch.setattr(tools_env.subprocess, "run", pip)
    return done


def test_workers_asking_at_once_install_it_once(tmp_path: Path, installs: list[list[str]]) -> None:
    found: list[Path] = []
    threads = [
        threading.Thread(target=lambda: found.append(tools_env.ensure_aiperf(tmp_path)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(installs) == 1 and installs[0][-1] == f"aiperf=={tools_env.AIPERF_VERSION}"
    assert set(found) == {tools_env.aiperf_executable(tmp_path)}
    assert tools_env.aiperf_installed(tmp_path)
    tools_env.ensure_aiperf(tmp_path)
    assert len(installs) == 1  # installed: nothing asked of pip


def test_a_half_made_environment_is_made_again(tmp_path: Path, installs: list[list[str]]) -> None:
    left = tools_env.aiperf_env_dir(tmp_path)
    (left / "lib").mkdir(parents=True)
    (left / "lib" / "partial").write_text("an install that was killed")
    tools_env.ensure_aiperf(tmp_path)
    assert not (left / "lib" / "partial").exists() and len(installs) == 1
    assert tools_env.aiperf_installed(tmp_path)
