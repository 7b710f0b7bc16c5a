"""``plinth gate run|list|show|override`` with the installed command against a running Plinth,
and the SDK's ``gates`` resource underneath it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deployments.endpoints import services
from deployments.experiments.canary import services as canary_services
from deployments.experiments.models import QualityGate, QualityGateStatus
from runtime.quality_run import builtin_prompts
from tests.conftest import Cast
from tests.experiments.canary.helpers import BF16, fp8, mark_serving
from tests.experiments.quality.helpers import FAILED_MEAN_KL, finish
from tests.fixtures.sdk import SdkEnv
from tests.sdk.test_cli import Cli

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process


def test_a_quality_gate_from_the_command_line(
    sdk_env: SdkEnv, server: str, admin_key: str, cast: Cast, tmp_path: Path
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    endpoint = mark_serving(services.create_deployment(actor, slug="cli-gate", name="G", spec=BF16))
    plinth = Cli(sdk_env, tmp_path / "home")
    plinth("login", server, stdin=admin_key + "\n")

    # No canary, no gate: nothing to run it on, nothing to show.
    assert "no canary" in plinth("gate", "run", "cli-gate", code=3)
    assert "no quality gate runs" in plinth("gate", "show", "cli-gate", code=3)
    canary_services.start_canary(actor, endpoint.pk, spec=fp8(), weight=20)

    # Run on the running canary's revision, with the built-in prompt set.
    out = plinth("gate", "run", "cli-gate", "--max-mean-kl", "0.03")
    assert "revision: 2" in out and "status: pending" in out, out
    assert f"prompts: {len(builtin_prompts())}" in out, out
    assert "already running" in plinth("gate", "run", "cli-gate", "-r", "2", code=4)
    assert "min_top1_agreement" in plinth(
        "gate", "run", "cli-gate", "-r", "2", "--min-top1-agreement", "2", code=5
    )

    # The judged gate: its record, its figures and one row per prompt it scored.
    finish(QualityGate.objects.get(), QualityGateStatus.FAILED)
    out = plinth("gate", "show", "cli-gate")
    assert "status: failed" in out and f"mean_kl: {FAILED_MEAN_KL:.3f}" in out, out
    assert f"prompts: {len(builtin_prompts())}" in out, out
    assert "why the sky is blue" in out and "PROMPT" in out, out
    shown = json.loads(plinth("gate", "show", "cli-gate", "-r", "2", "-o", "json"))
    assert shown["prompts"] == len(shown["results"]["per_prompt"]) == len(builtin_prompts())

    # A second run on the user's own prompts; the list is newest first.
    jsonl = tmp_path / "evals.jsonl"
    jsonl.write_text('{"prompt": "Say hi"}\n{"prompt": "Count to five"}\n')
    out = plinth("gate", "run", "cli-gate", "--prompts", str(jsonl))
    assert "prompt_set: custom" in out and "prompts: 2" in out, out
    listed = json.loads(plinth("gate", "list", "cli-gate", "-o", "json"))
    assert [(g["status"], g["prompts"]) for g in listed] == [("pending", 2), ("failed", 20)]
    table = plinth("gate", "list", "cli-gate")
    assert "MEAN_KL" in table and "pending" in table and "failed" in table, table

    # An admin overrides the failed run (a pending one is not overridable: a conflict).
    plinth("gate", "override", "cli-gate", "-r", "2", "--reason", "fine", code=4)
    finish(QualityGate.objects.get(prompt_set="custom"), QualityGateStatus.FAILED)
    out = plinth("gate", "override", "cli-gate", "-r", "2", "--reason", "reviewed by hand")
    assert "status: overridden" in out and "reviewed by hand" in out, out
