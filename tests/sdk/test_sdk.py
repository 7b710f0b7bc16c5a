"""The SDK installed alone (no Django) drives a whole journey against a running Plinth."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.fixtures.sdk import SdkEnv, client_env

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process


def test_the_sdk_alone_drives_a_journey_against_a_running_plinth(
    sdk_env: SdkEnv, server: str, admin_key: str, tmp_path: Path
) -> None:
    script = Path(__file__).with_name("journey.py")
    env = client_env(tmp_path, PLINTH_URL=server, PLINTH_API_KEY=admin_key)
    result = subprocess.run(
        [str(sdk_env.python), str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("journey ok")
