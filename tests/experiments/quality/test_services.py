"""Quality gates through the services: starting one on a canary's revision, the refusals, the
promote and make-target checks, the admin's override, and a run that cannot reach its engines."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controlplane.access import AccessDenied
from controlplane.models import AuditEvent
from controlplane.services import Conflict, ServiceError
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.experiments.canary import services as canary_services
from deployments.experiments.models import Canary, QualityGate, QualityGateStatus
from deployments.experiments.quality import run as quality_run
from deployments.experiments.quality import services as quality_services
from tests.conftest import Cast
from tests.experiments.canary.helpers import BF16, fp8, mark_serving
from tests.experiments.quality.helpers import finish

pytestmark = pytest.mark.django_db


@pytest.fixture
def canaried(cast: Cast) -> Deployment:
    """A serving BF16 endpoint with an FP8-weights canary (revision 2) at 20%."""
    actor = cast.actor(cast.dave, cast.acme)
    deployment = mark_serving(
        services.create_deployment(actor, slug="chat", name="Chat", spec=BF16)
    )
    canary_services.start_canary(actor, deployment.pk, spec=fp8(), weight=20)
    return deployment


def test_a_gate_is_queued_on_the_canarys_revision_with_defaults(
    cast: Cast, canaried: Deployment
) -> None:
    gate = quality_services.start_gate(cast.actor(cast.dave, cast.acme), canaried.pk, 2)
    assert (gate.revision.number, gate.baseline_revision.number) == (2, 1)
    assert (gate.max_mean_kl, gate.min_top1_agreement) == (0.05, 0.95)
    assert gate.status == QualityGateStatus.PENDING and gate.prompt_set == "builtin"
    assert canaried.events.filter(reason="QualityGateQueued", revision_number=2).exists()
    assert AuditEvent.objects.filter(action="quality_gate.start").count() == 1


def test_a_custom_prompt_set_is_stored_and_bad_lines_are_named(
    cast: Cast, canaried: Deployment
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    jsonl = "\n".join(json.dumps({"prompt": p}) for p in ("Say hi", "Count to five")) + "\n"
    gate = quality_services.start_gate(actor, canaried.pk, 2, prompts_jsonl=jsonl)
    assert gate.prompt_set == "custom" and gate.prompts == ["Say hi", "Count to five"]
    for bad in ('{"prompt": ""}', "not json", '{"other": 1}', '{"prompt": "a\\u0000b"}'):
        with pytest.raises(ServiceError) as refused:
            quality_services.parse_jsonl(bad)
        assert refused.value.field == "prompts_jsonl" and "line 1" in refused.value.message


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"max_mean_kl": -0.1}, "max_mean_kl"),
        ({"min_top1_agreement": 1.5}, "min_top1_agreement"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
    ],
)
def test_thresholds_out_of_range_are_refused_by_name(
    cast: Cast, canaried: Deployment, given: dict[str, Any], field: str
) -> None:
    with pytest.raises(ServiceError) as refused:
        quality_services.start_gate(cast.actor(cast.dave, cast.acme), canaried.pk, 2, **given)
    assert refused.value.field == field
    assert not QualityGate.objects.exists()


def test_only_a_running_canarys_revision_is_gated_and_one_run_at_a_time(
    cast: Cast, canaried: Deployment
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    with pytest.raises(Conflict) as refused:
        quality_services.start_gate(actor, canaried.pk, 1)  # the serving revision
    assert refused.value.code == "not_a_canary"
    quality_services.start_gate(actor, canaried.pk, 2)
    with pytest.raises(Conflict) as again:
        quality_services.start_gate(actor, canaried.pk, 2)
    assert again.value.code == "gate_running"
    with pytest.raises(AccessDenied):
        quality_services.start_gate(cast.actor(cast.carol, cast.acme), canaried.pk, 2)


def test_promote_waits_for_a_pass(cast: Cast, canaried: Deployment) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    gate = quality_services.start_gate(actor, canaried.pk, 2)
    with pytest.raises(Conflict) as pending:
        canary_services.promote_canary(actor, canaried.pk)
    assert pending.value.code == "gate_refused" and "not judged yet" in pending.value.message
    finish(gate, QualityGateStatus.FAILED)
    with pytest.raises(Conflict) as failed:
        canary_services.promote_canary(actor, canaried.pk)
    assert "quality gate failed" in failed.value.message
    finish(gate, QualityGateStatus.PASSED)
    promoted = canary_services.promote_canary(actor, canaried.pk)
    assert promoted.status == "promoted"


def test_an_admin_overrides_a_failed_gate_with_a_reason_and_it_is_audited(
    cast: Cast, canaried: Deployment
) -> None:
    developer, admin = cast.actor(cast.dave, cast.acme), cast.actor(cast.alice, cast.acme)
    finish(quality_services.start_gate(developer, canaried.pk, 2))
    with pytest.raises(AccessDenied):
        quality_services.override_gate(developer, canaried.pk, 2, reason="ship it")
    with pytest.raises(ServiceError) as no_reason:
        quality_services.override_gate(admin, canaried.pk, 2, reason="  ")
    assert no_reason.value.field == "reason"
    gate = quality_services.override_gate(admin, canaried.pk, 2, reason="evaluated by hand")
    assert gate.status == QualityGateStatus.OVERRIDDEN and gate.overridden_by
    record = AuditEvent.objects.get(action="quality_gate.override")
    assert record.after is not None and record.after["reason"] == "evaluated by hand"
    assert record.before is not None and record.before["status"] == QualityGateStatus.FAILED
    assert canaried.events.filter(reason="QualityGateOverridden").exists()
    with pytest.raises(Conflict) as twice:
        quality_services.override_gate(admin, canaried.pk, 2, reason="again")
    assert twice.value.code == "not_overridable"
    assert canary_services.promote_canary(developer, canaried.pk).status == "promoted"


def test_a_failed_revision_cannot_become_the_target_outside_a_canary(
    cast: Cast, canaried: Deployment
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    finish(quality_services.start_gate(actor, canaried.pk, 2))
    canary_services.abort_canary(actor, canaried.pk)
    with pytest.raises(Conflict) as rollback:
        services.rollback(actor, canaried.pk, to_revision=2)
    assert rollback.value.code == "gate_refused" and rollback.value.field == "to_revision"
    with pytest.raises(Conflict) as patched:  # the same settings by another route
        services.update_settings(actor, canaried.pk, spec=fp8(), base_revision=1)  # the target
    assert patched.value.field == "spec"
    quality_services.override_gate(
        cast.actor(cast.alice, cast.acme), canaried.pk, 2, reason="accepted drift"
    )
    assert services.rollback(actor, canaried.pk, to_revision=2).number == 3


def test_a_run_whose_canary_pool_is_not_ready_ends_in_error_not_a_verdict(
    cast: Cast, canaried: Deployment
) -> None:
    Deployment.objects.filter(pk=canaried.pk).update(router_url="http://127.0.0.1:9")
    gate = quality_services.start_gate(cast.actor(cast.dave, cast.acme), canaried.pk, 2)
    assert quality_run.run_gate(str(gate.pk)) == QualityGateStatus.ERROR
    assert quality_run.run_gate(str(gate.pk)) == "skipped"  # a second delivery runs nothing
    gate.refresh_from_db()
    assert "not running or not ready" in gate.error and gate.results is None
    assert canaried.events.filter(reason="QualityGateError").exists()
    assert Canary.objects.get().gate_verdict is None
