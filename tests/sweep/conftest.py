"""Fixtures of the sweeps: the attacked world (see ``tests.sweep.world``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Cast
from tests.sweep.world import World, build_world


@pytest.fixture
def run_dir(tmp_path: Path, settings: Any) -> Path:
    """The local driver's run directory, where engines' log files live."""
    settings.PLINTH_LOCAL_RUN_DIR = str(tmp_path / "run")
    return tmp_path / "run"


@pytest.fixture
def world(cast: Cast, run_dir: Path) -> World:
    return build_world(cast, run_dir)
