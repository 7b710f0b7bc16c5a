"""``plinth adapters list|add|remove`` and ``plinth keys create --adapter`` with the installed
command against a running Plinth: each change a revision of the endpoint's settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controlplane.models import ApiKey
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from tests.conftest import Cast
from tests.fixtures.endpoints import small_spec
from tests.fixtures.sdk import SdkEnv
from tests.sdk.test_cli import Cli

pytestmark = pytest.mark.django_db(transaction=True)  # the server is another process


def test_adapters_are_added_listed_and_removed_from_the_command_line(
    sdk_env: SdkEnv, server: str, admin_key: str, tmp_path: Path, cast: Cast
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    services.create_deployment(actor, slug="chat", name="Chat", spec=small_spec())
    plinth = Cli(sdk_env, tmp_path / "home")
    plinth("login", server, stdin=admin_key + "\n")

    out = plinth("adapters", "add", "chat", "legal", "--source", "acme/legal-lora", "--rank", "8")
    assert "revision 2" in out, out
    listed = json.loads(plinth("adapters", "list", "chat", "-o", "json"))
    assert [a["name"] for a in listed["adapters"]] == ["legal"]
    assert "chat (base)" in plinth("adapters", "list", "chat")
    refused = plinth("adapters", "add", "chat", "x", "--source", "a/b", "--rank", "0", code=5)
    assert "rank" in refused
    made = json.loads(plinth("keys", "create", "legal-team", "--adapter", "legal", "-o", "json"))
    assert ApiKey.objects.get(pk=made["id"]).allowed_adapters == ["legal"]

    assert "revision 3" in plinth("adapters", "remove", "chat", "legal")
    target = Deployment.objects.get(slug="chat").target_revision
    assert target is not None and target.spec["lora"]["adapters"] == []
    plinth("adapters", "remove", "chat", "legal", code=3)
