"""The first `make run` / `make test` installs for minutes on a cold cache: it must show progress.

Dry run of the install recipe (``make -n``): every phase prints a line, and the long pip install
is not silenced (pip prints each package it collects and installs)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_install_says_each_phase_and_lets_pip_show_its_progress() -> None:
    recipe = subprocess.run(
        ["make", "-n", "-B", "install"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    phases = [line for line in recipe.splitlines() if line.startswith('echo "[install]')]
    assert len(phases) == 4, recipe
    (install,) = [line for line in recipe.splitlines() if '-e ".[dev]"' in line]
    assert "--quiet" not in install and " -q" not in install
