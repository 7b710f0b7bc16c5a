"""``plinth canary start|status|promote|abort`` with the installed command against a running
Plinth, and the SDK's ``canaries`` resource underneath it."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.experiments.models import Canary
from tests.conftest import Cast
from tests.experiments.canary.helpers import BF16, fp8, mark_serving
from tests.fixtures.sdk import SdkEnv
from tests.sdk.test_cli import Cli

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process


def test_a_canary_from_the_command_line(
    sdk_env: SdkEnv, server: str, admin_key: str, cast: Cast, tmp_path: Path
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    mark_serving(services.create_deployment(actor, slug="cli-canary", name="C", spec=BF16))
    plinth = Cli(sdk_env, tmp_path / "home")
    plinth("login", server, stdin=admin_key + "\n")
    spec = tmp_path / "fp8.json"  # JSON is YAML
    spec.write_text(json.dumps(fp8()))

    assert "no canary" in plinth("canary", "status", "cli-canary", code=3)
    out = plinth("canary", "start", "cli-canary", "--weight", "20", "-f", str(spec), "--sticky")
    assert "weight: 20" in out and "status: running" in out and "sticky: True" in out, out
    status = json.loads(plinth("canary", "status", "cli-canary", "-o", "json"))
    assert (status["revision"], status["baseline_revision"]) == (2, 1)
    assert status["traffic"]["canary"]["requests"] == 0
    plinth("canary", "start", "cli-canary", "--weight", "60", "-f", str(spec), code=5)
    out = plinth("canary", "abort", "cli-canary", "--reason", "changed my mind")
    assert "status: aborted" in out and "changed my mind" in out
    plinth("canary", "promote", "cli-canary", code=4)  # nothing runs: a conflict

    plinth("canary", "start", "cli-canary", "--weight", "5", "-f", str(spec))
    assert "status: promoted" in plinth("canary", "promote", "cli-canary", "-m", "looks good")
    target = Deployment.objects.get(slug="cli-canary").target_revision
    assert target is not None and target.number == 3


def test_edit_and_apply_work_after_an_aborted_canary(
    sdk_env: SdkEnv, server: str, admin_key: str, cast: Cast, tmp_path: Path, settings: Any
) -> None:
    from deployments.experiments.tasks import watch_canaries

    actor = cast.actor(cast.dave, cast.acme)
    mark_serving(services.create_deployment(actor, slug="cli-after", name="A", spec=BF16))
    plinth = Cli(sdk_env, tmp_path / "home")
    plinth("login", server, stdin=admin_key + "\n")
    canary = tmp_path / "fp8.json"  # JSON is YAML
    canary.write_text(json.dumps(fp8()))

    # Aborted by hand: `plinth edit` saves on top of the revision the endpoint reports.
    plinth("canary", "start", "cli-after", "--weight", "10", "-f", str(canary))
    plinth("canary", "abort", "cli-after")
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps({**BF16, "batching": {"max_running_requests": 64}}))
    assert "target_revision: 3" in plinth("edit", "cli-after", "-f", str(edited), "-o", "yaml")

    # Aborted by the watcher (its pool never ready): `plinth apply` saves too.
    mark_serving(Deployment.objects.get(slug="cli-after"))
    plinth("canary", "start", "cli-after", "--weight", "10", "-f", str(canary))
    settings.PLINTH_STARTUP_WINDOW_S = 60
    started = Canary.objects.get(deployment__slug="cli-after", status="running").started_at
    assert watch_canaries((started + timedelta(seconds=61)).isoformat())["aborted"] == 1
    document = {
        "apiVersion": "plinth.dev/v1",
        "kind": "Endpoint",
        "metadata": {"name": "cli-after"},
        "spec": {**BF16, "batching": {"max_running_requests": 32}},
    }
    applied = tmp_path / "endpoint.json"
    applied.write_text(json.dumps(document))
    assert "cli-after: updated (revision 5)" in plinth("apply", "-f", str(applied))
