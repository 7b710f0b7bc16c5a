"""``plinth keys create|update|list`` with the installed command against a running Plinth:
changing an existing key's per-minute limits, priority and weight, as the console can."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controlplane.models import ApiKey
from tests.fixtures.sdk import SdkEnv
from tests.sdk.test_cli import Cli

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process


def test_a_keys_limits_change_from_the_command_line(
    sdk_env: SdkEnv, server: str, admin_key: str, tmp_path: Path
) -> None:
    plinth = Cli(sdk_env, tmp_path / "home")
    plinth("login", server, stdin=admin_key + "\n")
    key_id = json.loads(plinth("keys", "create", "app", "--kind", "inference", "-o", "json"))["id"]

    out = plinth("keys", "update", key_id, "--rpm", "600", "--tpm", "90000")
    assert "requests_per_minute: 600" in out and "tokens_per_minute: 90000" in out, out
    out = plinth("keys", "update", key_id, "--tokens-per-minute", "none")  # lifted; rpm kept
    assert {"requests_per_minute: 600", "tokens_per_minute: "} <= set(out.splitlines()), out
    key = ApiKey.objects.get(pk=key_id)
    assert (key.requests_per_minute, key.tokens_per_minute) == (600, None)

    # Refusals: the API's field (5), a value that is not a number or nothing to change (2),
    # an unknown key (3).
    assert "requests_per_minute" in plinth("keys", "update", key_id, "--rpm", "0", code=5)
    plinth("keys", "update", key_id, "--rpm", "lots", code=2)
    plinth("keys", "update", key_id, code=2)
    plinth("keys", "update", "3f2c6a1e-0000-4000-8000-000000000000", "--rpm", "5", code=3)


def test_a_keys_priority_and_weight_are_set_from_the_command_line(
    sdk_env: SdkEnv, server: str, admin_key: str, tmp_path: Path
) -> None:
    plinth = Cli(sdk_env, tmp_path / "home")
    plinth("login", server, stdin=admin_key + "\n")
    made = plinth("keys", "create", "nightly", "--priority", "batch", "--weight", "2", "-o", "json")
    key_id = json.loads(made)["id"]
    assert (json.loads(made)["priority"], json.loads(made)["weight"]) == ("batch", 2)

    out = plinth("keys", "update", key_id, "--priority", "critical")
    assert {"priority: critical", "weight: 2"} <= set(out.splitlines()), out
    key = ApiKey.objects.get(pk=key_id)
    assert (key.priority, key.weight) == ("critical", 2)
    assert "priority" in plinth("keys", "update", key_id, "--priority", "urgent", code=5)
