"""``plinth optimize`` with the installed command against a running Plinth: the ranked picks as
JSON and as a table, ``--create`` and ``--apply`` saving the best pick through the normal create
and PATCH with a message naming the optimizer, and refusals with their exit codes. Also the
SDK's copy of the fields an applied pick keeps, held equal to the server's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from deployments.endpoints import recommend, services
from deployments.endpoints.models import Deployment
from runtime.sim.launcher import REPO_ROOT
from tests.conftest import Cast
from tests.experiments.canary.helpers import BF16
from tests.fixtures.sdk import SdkEnv
from tests.sdk.test_cli import Cli

sys.path.insert(0, str(REPO_ROOT / "sdk"))

from plinth import client as sdk_client

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
PROFILE = ("--rate", "6", "--isl", "2000", "--osl", "200", "--turns", "2")
SLO = ("--ttft-p90-ms", "1000", "--itl-p90-ms", "40")


@pytest.mark.django_db(transaction=True)  # the server is another process
def test_optimize_create_and_apply_from_the_command_line(
    sdk_env: SdkEnv, server: str, admin_key: str, cast: Cast, tmp_path: Path
) -> None:
    plinth = Cli(sdk_env, tmp_path / "home")
    plinth("login", server, stdin=admin_key + "\n")

    # The answer as JSON: the API's, with the SLOs given in ms arriving in seconds.
    args = ("optimize", "--model", LLAMA, "--gpu", "H100-SXM", "--gpu", "L40S", *PROFILE, *SLO)
    data = json.loads(plinth(*args, "-o", "json"))
    best = data["best"]
    assert best is not None and best["predicted"]["meets_slo"] is True, data["notes"]
    assert best["predicted"]["itl_p90_s"] <= 0.04 and data["rate_rps"] == 6
    assert data["ranked"][0]["label"] == best["label"]
    assert {c["spec"]["hardware"]["gpu"] for c in data["ranked"]} <= {"H100-SXM", "L40S"}
    table = plinth(*args)
    assert "TTFT_P90_MS" in table and f"1*  {best['label']}" in table, table

    # Throughput objective with confirmation: the picks measured in simulated time.
    h100 = ("optimize", "--model", LLAMA, "--gpu", "H100-SXM")
    throughput = ("--objective", "throughput", "--max-gpus", "2")
    confirm_one = ("--confirm", "--confirm-top", "1")
    confirmed = json.loads(plinth(*h100, *throughput, *confirm_one, "-o", "json"))
    assert confirmed["ranked"][0]["measured"]["completed"] > 0
    assert "MEASURED_TTFT_P90_MS" in plinth(*h100, *confirm_one)

    # --create: an endpoint from the best pick, its first revision saying where it came from.
    out = plinth("optimize", "--model", LLAMA, "--gpu", "L40S", "--create", "opt-new", "-o", "json")
    created = json.loads(out)
    label = created["result"]["best"]["label"]
    assert created["endpoint"]["slug"] == "opt-new" and created["endpoint"]["target_revision"] == 1
    new = Deployment.objects.get(slug="opt-new")
    assert new.target_revision is not None
    assert new.target_revision.message == f"from the optimizer: {label}"
    assert new.target_revision.spec["hardware"]["gpu"] == "L40S"

    # --apply: the endpoint's model by default, a new revision through PATCH, and the endpoint's
    # own identity kept (its served name is what its callers ask for).
    actor = cast.actor(cast.dave, cast.acme)
    services.create_deployment(actor, slug="opt-chat", name="C", spec=BF16)
    out = plinth("optimize", "--gpu", "L40S", *PROFILE, "--apply", "opt-chat")
    assert "opt-chat: revision 2 (from the optimizer: " in out, out
    chat = Deployment.objects.get(slug="opt-chat")
    assert chat.target_revision is not None and chat.target_revision.number == 2
    assert chat.target_revision.message.startswith("from the optimizer: ")
    assert chat.target_revision.spec["hardware"]["gpu"] == "L40S"
    assert chat.target_revision.spec["model"]["served_name"] == "chat"

    # Refusals: another model's pick (5), both rate and concurrency (5, naming the field),
    # an unknown endpoint (3), --apply with --create (2), and nothing to pick (5).
    out = plinth("optimize", "--model", "Qwen/Qwen3-8B", "--apply", "opt-chat", code=5)
    assert "opt-chat serves" in out, out
    assert "traffic" in plinth("optimize", "--model", LLAMA, "--rate", "1", "-c", "4", code=5)
    plinth("optimize", "--apply", "no-such-endpoint", code=3)
    plinth("optimize", "--model", LLAMA, "--apply", "opt-chat", "--create", "x", code=2)
    plinth("optimize", code=2)
    impossible = ("--gpu", "L40S", "--rate", "500", "--max-gpus", "1")
    out = plinth("optimize", *impossible, "--apply", "opt-chat", code=5)
    assert "nothing saved" in out, out
    assert Deployment.objects.get(slug="opt-chat").target_revision.number == 2  # type: ignore[union-attr]


@pytest.mark.django_db(transaction=True)  # the server is another process
def test_optimize_confirm_marks_the_confirmed_pick_in_the_table(
    sdk_env: SdkEnv, server: str, admin_key: str, tmp_path: Path
) -> None:
    """A confirmed pick carries reasons and figures its ranked entry does not; the table still
    marks its row, and only its row."""
    plinth = Cli(sdk_env, tmp_path / "home")
    plinth("login", server, stdin=admin_key + "\n")
    gpus = ("--gpu", "H100-SXM", "--gpu", "L40S")
    args = ("optimize", "--model", LLAMA, *gpus, *PROFILE, *SLO, "--confirm", "--confirm-top", "2")
    best = json.loads(plinth(*args, "-o", "json"))["best"]
    assert best is not None and best["measured"] is not None
    rows = plinth(*args).splitlines()[1:]
    starred = [row for row in rows if row.split()[0].endswith("*")]
    assert len(starred) == 1 and f"*  {best['label']}  " in starred[0], rows


def test_the_sdk_keeps_what_the_server_keeps_when_a_pick_is_applied() -> None:
    """The SDK installs without Django, so it repeats the console's lists of what an applied
    recommendation keeps; they must not drift apart."""
    assert sdk_client.KEPT_MODEL_FIELDS == recommend.KEPT_MODEL_FIELDS
    assert sdk_client.KEPT_GROUPS == recommend.KEPT_GROUPS
    assert sdk_client.optimizer_message("x") == recommend.optimizer_message("x")
    current = {**BF16, "runtime": {"env": {"A": "1"}}}
    candidate = {"model": {"source": BF16["model"]["source"]}, "hardware": {"gpu": "L40S"}}
    fitted = sdk_client.fit_candidate(current, candidate)
    assert fitted["model"]["served_name"] == "chat" and fitted["runtime"] == {"env": {"A": "1"}}
    with pytest.raises(sdk_client.OptimizerMismatch) as raised:
        sdk_client.fit_candidate(current, {"model": {"source": "Qwen/Qwen3-8B"}}, endpoint="c")
    assert raised.value.fields[0].field == "model"
