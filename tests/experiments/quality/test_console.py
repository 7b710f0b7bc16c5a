"""The Experiments tab (canaries, gates with their verdicts and worst prompts, benchmarks; run a
gate, an admin's override) and the optimizer's "Apply as a canary" with a gate and a benchmark."""

from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

from controlplane.models import AuditEvent
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.experiments.canary import services as canary_services
from deployments.experiments.models import Benchmark, Canary, QualityGate, QualityGateStatus
from deployments.experiments.quality import services as quality_services
from tests.conftest import Cast
from tests.console.conftest import signed_in
from tests.experiments.canary.helpers import BF16, fp8, mark_serving
from tests.experiments.quality.helpers import finish

pytestmark = pytest.mark.django_db


@pytest.fixture
def serving(cast: Cast) -> Deployment:
    actor = cast.actor(cast.dave, cast.acme)
    return mark_serving(services.create_deployment(actor, slug="chat", name="Chat", spec=BF16))


def test_the_tab_lists_canaries_and_gates_with_their_verdicts(
    cast: Cast, serving: Deployment
) -> None:
    actor = cast.actor(cast.dave, cast.acme)
    canary_services.start_canary(actor, serving.pk, spec=fp8(), weight=20)
    finish(quality_services.start_gate(actor, serving.pk, 2))
    viewer = signed_in(cast.carol).get("/endpoints/chat/experiments/").content.decode()
    assert "Experiments" in viewer and "r2" in viewer and "20%" in viewer
    assert "failed" in viewer and "0.0912" in viewer and "why the sky is blue" in viewer
    assert 'id="gate-form"' not in viewer and "Override gate" not in viewer
    developer = signed_in(cast.dave).get("/endpoints/chat/experiments/").content.decode()
    assert 'id="gate-form"' in developer and "Override gate" not in developer
    assert (
        "Override gate"
        in signed_in(cast.alice).get("/endpoints/chat/experiments/").content.decode()
    )


def test_a_developer_runs_a_gate_and_an_admin_overrides_it_from_the_tab(
    cast: Cast, serving: Deployment
) -> None:
    canary_services.start_canary(
        cast.actor(cast.dave, cast.acme), serving.pk, spec=fp8(), weight=20
    )
    dave = signed_in(cast.dave)
    answer = dave.post(
        "/endpoints/chat/revisions/2/gate/", {"max_mean_kl": "0.02", "min_top1_agreement": ""}
    )
    assert answer.status_code == 302 and answer["Location"].endswith("/endpoints/chat/experiments/")
    gate = QualityGate.objects.get()
    assert (gate.max_mean_kl, gate.min_top1_agreement) == (0.02, 0.95)
    refused = dave.post("/endpoints/chat/revisions/2/gate/", {"max_mean_kl": "low"}, follow=True)
    assert "thresholds must be numbers" in refused.content.decode()
    finish(gate)
    assert (
        dave.post("/endpoints/chat/revisions/2/gate/override/", {"reason": "x"}).status_code == 403
    )
    alice = signed_in(cast.alice)
    empty = alice.post("/endpoints/chat/revisions/2/gate/override/", {"reason": ""}, follow=True)
    assert "say why" in empty.content.decode()
    alice.post("/endpoints/chat/revisions/2/gate/override/", {"reason": "read the worst prompts"})
    gate.refresh_from_db()
    assert gate.status == QualityGateStatus.OVERRIDDEN
    assert AuditEvent.objects.filter(action="quality_gate.override").exists()


def test_the_optimizer_applies_a_pick_as_a_canary_with_a_gate_and_a_benchmark(
    cast: Cast, serving: Deployment
) -> None:
    dave = signed_in(cast.dave)
    form = {
        "as": "canary",
        "spec": json.dumps(fp8()),
        "label": "FP8 on H100",
        "query": urlencode({"model": BF16["model"]["source"]}),
        "endpoint": "chat",
        "weight": "20",
        "gate": "on",
        "benchmark": "on",
    }
    answer = dave.post("/optimize/apply/", form)
    assert answer.status_code == 302, answer.content
    assert answer["Location"].endswith("/endpoints/chat/experiments/")
    canary = Canary.objects.get(deployment=serving)
    assert canary.weight == 20 and canary.revision.spec["quantization"]["method"] == "fp8"
    assert canary.revision.message == "from the optimizer: FP8 on H100"
    assert canary.revision.spec["model"]["served_name"] == "chat"  # the endpoint's identity kept
    gate = QualityGate.objects.get(revision=canary.revision)
    assert gate.status == QualityGateStatus.PENDING  # runs once the canary's pool answers
    assert Benchmark.objects.get(deployment=serving).revision == canary.revision
    page = dave.get(answer["Location"]).content.decode()
    assert "runs as a canary at 20% with a quality gate and a benchmark" in page

    # All or nothing: a refused canary leaves no gate and no benchmark behind.
    again = dave.post("/optimize/apply/", {**form, "weight": "80"}, follow=True)
    assert "Not applied" in again.content.decode()
    assert QualityGate.objects.count() == 1 and Canary.objects.count() == 1
