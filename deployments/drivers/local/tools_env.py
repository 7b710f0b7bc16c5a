"""The tools environment: a virtualenv of its own for NVIDIA AIPerf, created on first use.

AIPerf (PyPI ``aiperf``, Apache-2.0) pulls in about 1.2 GB (transformers, zmq, pandas, ...), so it
stays out of Plinth's own virtualenv: it lives in ``<PLINTH_TOOLS_DIR>/aiperf-<version>/`` and is
only ever run as a subprocess. The version is pinned in ``deployments.aiperf`` and nowhere else (the
Kubernetes Job's image, ``docker/aiperf/Dockerfile``, is built with the same version).

Creation takes a couple of minutes on a cold pip cache, and two workers may ask for it at once: an
exclusive file lock serialises them, and a stamp file written last marks a finished install, so a
half-made environment (a killed worker) is removed and built again rather than used.

``python -m deployments.drivers.local.tools_env`` installs it (``make test`` calls it before
pytest).
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from deployments.aiperf import AIPERF_VERSION

STAMP = ".plinth-installed"


def aiperf_env_dir(tools_dir: Path) -> Path:
    return Path(tools_dir) / f"aiperf-{AIPERF_VERSION}"


def aiperf_executable(tools_dir: Path) -> Path:
    return aiperf_env_dir(tools_dir) / "bin" / "aiperf"


def aiperf_installed(tools_dir: Path) -> bool:
    env = aiperf_env_dir(tools_dir)
    stamp = env / STAMP
    return stamp.is_file() and stamp.read_text().strip() == AIPERF_VERSION


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_aiperf(tools_dir: Path, *, quiet: bool = True) -> Path:
    """The ``aiperf`` executable of the pinned version, installing it first if needed."""
    if aiperf_installed(tools_dir):
        return aiperf_executable(tools_dir)
    env = aiperf_env_dir(tools_dir)
    with _locked(env.with_name(env.name + ".lock")):
        if aiperf_installed(tools_dir):  # another worker finished while this one waited
            return aiperf_executable(tools_dir)
        if env.exists():  # left half-made by an install that died
            shutil.rmtree(env)
        venv.create(env, with_pip=True, clear=True)
        pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
        if quiet:
            pip.append("-q")
        subprocess.run([*pip, f"aiperf=={AIPERF_VERSION}"], check=True)
        (env / STAMP).write_text(AIPERF_VERSION + "\n")
    return aiperf_executable(tools_dir)


def main() -> int:
    import os

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    django.setup()
    from django.conf import settings

    tools_dir = Path(settings.PLINTH_TOOLS_DIR)
    if not aiperf_installed(tools_dir):
        print(f"[tools] installing aiperf=={AIPERF_VERSION} into {aiperf_env_dir(tools_dir)}")
    print(ensure_aiperf(tools_dir, quiet=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
