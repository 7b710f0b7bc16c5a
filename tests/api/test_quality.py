"""/api/v1/deployments/{id}/revisions/{n}/gate: start, read, an admin's override; refusals name
the field, promote is refused naming the gate."""

from __future__ import annotations

import pytest

from controlplane.models import AuditEvent
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.experiments.canary import services as canary_services
from deployments.experiments.models import QualityGate
from runtime.quality_run import builtin_prompts
from tests.api.conftest import SPEC, Clients, error_of, fields_of, spec_with
from tests.conftest import Cast
from tests.experiments.canary.helpers import mark_serving
from tests.experiments.quality.helpers import finish

GATE = "deployments/chat/revisions/2/gate"


@pytest.fixture
def canaried(cast: Cast) -> Deployment:
    actor = cast.actor(cast.dave, cast.acme)
    deployment = mark_serving(
        services.create_deployment(actor, slug="chat", name="Chat", spec=SPEC)
    )
    canary_services.start_canary(
        actor, deployment.pk, spec=spec_with(quantization={"method": "fp8"}), weight=20
    )
    return deployment


def test_a_developer_starts_a_gate_and_anyone_reads_it(api: Clients, canaried: Deployment) -> None:
    answer = api.dave.post(GATE, {"max_mean_kl": 0.02, "prompts_jsonl": '{"prompt": "Hi"}\n'})
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["revision"], body["baseline_revision"], body["status"]) == (2, 1, "pending")
    assert body["max_mean_kl"] == 0.02 and body["min_top1_agreement"] == 0.95
    assert (body["prompt_set"], body["prompts"]) == ("custom", 1)
    assert api.carol.get(GATE).json()["id"] == body["id"]
    assert api.carol.post(GATE, {}).status_code == 403
    assert api.bob.get(GATE).status_code == 404


def test_bad_input_names_the_field(api: Clients, canaried: Deployment) -> None:
    assert fields_of(api.dave.post(GATE, {"min_top1_agreement": 2})) == ["min_top1_agreement"]
    assert fields_of(api.dave.post(GATE, {"prompts_jsonl": "nope"})) == ["prompts_jsonl"]
    assert api.dave.post(GATE, {"max_mean_kl": "low"}).status_code == 422
    assert api.dave.post("deployments/chat/revisions/9/gate", {}).status_code == 404
    assert error_of(api.dave.post("deployments/chat/revisions/1/gate", {}))["code"] == (
        "not_a_canary"
    )
    assert api.carol.get("deployments/chat/revisions/1/gate").status_code == 404  # none


def test_promote_is_refused_naming_the_gate_until_an_admin_overrides(
    api: Clients, canaried: Deployment
) -> None:
    assert api.dave.post(GATE, {}).status_code == 201
    finish(QualityGate.objects.get())
    refused = error_of(api.dave.post("deployments/chat/canary/promote", {}))
    assert refused["code"] == "gate_refused" and "quality gate failed" in refused["message"]
    assert api.dave.post(GATE + "/override", {"reason": "fine"}).status_code == 403
    assert fields_of(api.alice.post(GATE + "/override", {"reason": ""})) == ["reason"]
    overridden = api.alice.post(GATE + "/override", {"reason": "reviewed the worst prompts"})
    assert overridden.status_code == 200, overridden.content
    assert overridden.json()["status"] == "overridden"
    assert overridden.json()["override_reason"] == "reviewed the worst prompts"
    assert AuditEvent.objects.filter(action="quality_gate.override").exists()
    promoted = api.dave.post("deployments/chat/canary/promote", {})
    assert promoted.status_code == 200 and promoted.json()["status"] == "promoted"


def test_a_gates_prompt_count_is_the_one_its_results_list(
    api: Clients, canaried: Deployment
) -> None:
    """The built-in set's gate counts its prompts before it runs, and the record's count agrees
    with its results after (it read 0 beside 20 results)."""
    started = api.dave.post(GATE, {})
    assert started.status_code == 201, started.content
    assert (started.json()["prompt_set"], started.json()["prompts"]) == (
        "builtin",
        len(builtin_prompts()),
    )
    finish(QualityGate.objects.get())
    body = api.carol.get(GATE).json()
    results = body["results"]
    assert body["prompts"] == results["prompts"] == len(results["per_prompt"]) > 0
    assert results["tokens"] == sum(p["tokens"] for p in results["per_prompt"])


def test_an_endpoints_gate_runs_are_listed_newest_first(api: Clients, canaried: Deployment) -> None:
    first = api.dave.post(GATE, {"prompts_jsonl": '{"prompt": "Hi"}\n'}).json()
    finish(QualityGate.objects.get(pk=first["id"]))
    second = api.dave.post(GATE, {}).json()
    listed = api.carol.get("deployments/chat/gates").json()
    assert [g["id"] for g in listed["items"]] == [second["id"], first["id"]]
    assert listed["count"] == 2 and listed["items"][1]["results"]["prompts"] == 1
    assert listed["items"][1]["prompts"] == 1
    assert api.bob.get("deployments/chat/gates").status_code == 404  # another organization's
