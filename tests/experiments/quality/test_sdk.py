"""The SDK's ``gates`` resource, installed alone (no Django), against a running Plinth."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from deployments.endpoints import services
from deployments.experiments.canary import services as canary_services
from deployments.experiments.models import QualityGate, QualityGateStatus
from tests.conftest import Cast
from tests.experiments.canary.helpers import BF16, fp8, mark_serving
from tests.experiments.quality.helpers import finish
from tests.fixtures.sdk import SdkEnv, client_env

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process

RUN = """
import plinth
client = plinth.Plinth()
gate = client.gates.run("sdk-gate", 2, max_mean_kl=0.03)
assert (gate.revision, gate.baseline_revision, gate.status) == (2, 1, "pending"), gate
assert client.gates.get("sdk-gate", 2).max_mean_kl == 0.03
print("run ok")
"""
OVERRIDE = """
import plinth
client = plinth.Plinth()
gate = client.gates.override("sdk-gate", 2, reason="reviewed by hand")
assert gate.status == "overridden" and gate.override_reason == "reviewed by hand", gate
print("override ok")
"""


def _script(venv: SdkEnv, env: dict[str, str], code: str) -> str:
    result = subprocess.run(
        [str(venv.python), "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_the_sdk_runs_reads_and_overrides_a_gate(
    sdk_env: SdkEnv,
    server: str,
    admin_key: str,
    cast: Cast,
    tmp_path: Path,
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    endpoint = mark_serving(services.create_deployment(actor, slug="sdk-gate", name="G", spec=BF16))
    canary_services.start_canary(actor, endpoint.pk, spec=fp8(), weight=20)
    env = client_env(tmp_path, PLINTH_URL=server, PLINTH_API_KEY=admin_key)
    assert "run ok" in _script(sdk_env, env, RUN)
    finish(QualityGate.objects.get(), QualityGateStatus.FAILED)
    assert "override ok" in _script(sdk_env, env, OVERRIDE)
