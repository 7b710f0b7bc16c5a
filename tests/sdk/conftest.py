"""Fixtures of the SDK and CLI tests: the SDK installed alone into a fresh virtual environment
(once per session), and a real control plane (uvicorn) on the test database for it to drive.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from controlplane import services as platform
from controlplane.models import Role
from runtime.sim.launcher import REPO_ROOT
from tests.conftest import Cast
from tests.console_server import serve_console
from tests.gateway.conftest import subprocess_env

SDK_DIR = REPO_ROOT / "sdk"


@dataclass(frozen=True)
class SdkEnv:
    """A virtual environment holding the SDK and its four dependencies, nothing of Plinth's."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def plinth(self) -> Path:
        return self.root / "bin" / "plinth"


@pytest.fixture(scope="session")
def sdk_env(tmp_path_factory: pytest.TempPathFactory) -> SdkEnv:
    """``pip install sdk/`` into a new venv: what a user does, so a Django import sneaking into
    the SDK, or a file missing from the package, fails here."""
    root = tmp_path_factory.mktemp("sdk-venv")
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    env = SdkEnv(root)
    # A copy of the source without build leftovers (a stale build/ would be installed), so
    # the build's own files never land in the working tree either.
    build = tmp_path_factory.mktemp("sdk-src")
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    shutil.copytree(SDK_DIR, build / "sdk", ignore=ignore)
    pip = [str(env.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "-c", str(REPO_ROOT / "constraints.txt"), str(build / "sdk")],
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    return env


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """The control plane served by uvicorn as in production, on the test database."""
    env = subprocess_env(PLINTH_DATA_DIR=str(tmp_path / "data"))
    with serve_console(env, tmp_path / "uvicorn.log", timeout=60) as url:
        yield url


@pytest.fixture
def admin_key(cast: Cast) -> str:
    """A management key of Acme's owner."""
    actor = cast.actor(cast.alice, cast.acme)
    return platform.create_api_key(actor, name="sdk", kind="management", role=Role.ADMIN).plaintext


def client_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a user's shell: no Plinth settings but those given, a home of its own
    (the CLI's config file goes there)."""
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "PIP_INDEX_URL")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), **extra)
    return env
