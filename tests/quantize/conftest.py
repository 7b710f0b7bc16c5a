"""What the quantization tests share: the tool's virtualenv (scripts/quantize_env.sh builds it;
test.sh does so before the suite), the environment its processes run in, and the small model
``make_model.py`` builds, once per test session (a few seconds to half a minute on 2 cores)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def tool_python() -> str:
    """The tool virtualenv's python."""
    found = subprocess.run(
        [str(REPO / "scripts/quantize_env.sh"), "--path"], capture_output=True, text=True
    )
    if found.returncode != 0:
        pytest.fail("the tool's venv is not built: run scripts/quantize_env.sh (test.sh does)")
    return found.stdout.strip().splitlines()[-1]


def tool_env() -> dict[str, str]:
    """The tool's processes: on the CPU, one torch thread (more only contend on 2 cores), no hub,
    the tool's package and Plinth's runtime importable."""
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env.update(
        CUDA_VISIBLE_DEVICES="",
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",
        PYTHONPATH=f"{REPO / 'tools/quantize'}:{REPO}",
    )
    return env


@pytest.fixture(scope="session")
def small_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make_model.py``'s four-block Llama checkpoint, built once. Tests copy it where they
    need it and never change it."""
    source = tmp_path_factory.mktemp("small-model") / "tiny-llama"
    subprocess.run(
        [tool_python(), str(REPO / "tests/quantize/make_model.py"), str(source)],
        check=True,
        env=tool_env(),
        capture_output=True,
        timeout=180,
    )
    return source
