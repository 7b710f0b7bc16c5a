"""/api/v1/deployments/{id}/canary: start, read, promote and abort; refusals name the field."""

from __future__ import annotations

from typing import Any

import pytest

from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.experiments.canary import services as canary_services
from tests.api.conftest import SPEC, Clients, error_of, fields_of, spec_with
from tests.conftest import Cast
from tests.experiments.canary.helpers import mark_serving

FP8 = spec_with(quantization={"method": "fp8"})


@pytest.fixture
def serving(cast: Cast) -> Deployment:
    actor = cast.actor(cast.dave, cast.acme)
    return mark_serving(services.create_deployment(actor, slug="chat", name="Chat", spec=SPEC))


def _start(api: Clients, **body: Any) -> Any:
    return api.dave.post("deployments/chat/canary", {"spec": FP8, "weight": 20, **body})


def test_a_developer_starts_a_canary_and_anyone_reads_it(api: Clients, serving: Deployment) -> None:
    answer = _start(api, sticky=True, thresholds={"max_itl_p90_ratio": 1.2, "window_s": 120})
    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["revision"], body["baseline_revision"], body["weight"]) == (2, 1, 20)
    assert body["sticky"] is True and body["status"] == "running"
    assert body["thresholds"]["max_itl_p90_ratio"] == 1.2
    assert body["thresholds"]["window_s"] == 120 and body["thresholds"]["min_requests"] == 20
    read = api.carol.get("deployments/chat/canary").json()
    assert read["id"] == body["id"] and read["traffic"]["canary"]["requests"] == 0
    detail = api.carol.get("deployments/chat").json()
    assert detail["target_revision"] == 1  # the canary is not the target


def test_bad_weights_and_thresholds_are_refused_by_field(api: Clients, serving: Deployment) -> None:
    assert fields_of(_start(api, weight=60)) == ["weight"]
    assert fields_of(_start(api, weight=0)) == ["weight"]
    refused = _start(api, thresholds={"max_error_rate_delta": 2})
    assert refused.status_code == 422 and fields_of(refused) == ["thresholds.max_error_rate_delta"]
    assert _start(api, weight="20").status_code == 422
    assert api.carol.get("deployments/chat/canary").status_code == 404


def test_promote_and_abort(api: Clients, cast: Cast, serving: Deployment) -> None:
    assert _start(api).status_code == 201
    assert error_of(_start(api))["code"] == "canary_running"
    promoted = api.dave.post("deployments/chat/canary/promote", {"message": "good"})
    assert promoted.status_code == 200 and promoted.json()["status"] == "promoted"
    assert api.carol.get("deployments/chat").json()["target_revision"] == 2
    assert error_of(api.dave.post("deployments/chat/canary/abort", {}))["code"] == "no_canary"
    # Once revision 2 serves, a new canary may start beside it.
    mark_serving(Deployment.objects.get(slug="chat"))
    second = api.dave.post("deployments/chat/canary", {"spec": SPEC, "weight": 5})
    assert second.status_code == 201 and second.json()["baseline_revision"] == 2
    aborted = api.dave.post("deployments/chat/canary/abort", {"reason": "not now"})
    assert aborted.json()["status"] == "aborted" and aborted.json()["reason"] == "not now"
    assert api.carol.get("deployments/chat").json()["target_revision"] == 2


def test_viewers_and_other_organizations_change_nothing(api: Clients, serving: Deployment) -> None:
    assert api.carol.post("deployments/chat/canary", {"spec": FP8, "weight": 20}).status_code == 403
    assert api.bob.post("deployments/chat/canary", {"spec": FP8, "weight": 20}).status_code == 404
    assert _start(api).status_code == 201
    assert api.carol.post("deployments/chat/canary/promote", {}).status_code == 403
    assert api.bob.post("deployments/chat/canary/abort", {}).status_code == 404
    assert api.bob.get("deployments/chat/canary").status_code == 404


def test_the_gate_verdict_is_shown_and_refuses_promote(
    api: Clients, cast: Cast, serving: Deployment
) -> None:
    canary = canary_services.start_canary(
        cast.actor(cast.dave, cast.acme), serving.pk, spec=FP8, weight=10
    )
    type(canary).objects.filter(pk=canary.pk).update(gate_verdict={"passed": False})
    assert api.carol.get("deployments/chat/canary").json()["gate_verdict"] == {"passed": False}
    assert error_of(api.dave.post("deployments/chat/canary/promote", {}))["code"] == "gate_refused"


def test_metrics_keep_each_revisions_figures(api: Clients, serving: Deployment) -> None:
    from django.utils import timezone

    from deployments.traffic.models import MetricSample

    figures = {"requests": 40.0, "ttft_p90": 0.2, "itl_p90": 0.01}
    MetricSample.objects.create(
        deployment=serving,
        ts=timezone.now(),
        revisions={"1": figures, "2": {**figures, "itl_p90": 0.05}},
    )
    [sample] = api.carol.get("deployments/chat/metrics").json()["samples"]
    assert (
        sample["revisions"]["2"]["itl_p90"] == 0.05 and sample["revisions"]["1"]["requests"] == 40
    )


def _edit_from_the_reported_revision(api: Clients, spec: dict[str, Any]) -> Any:
    """What a person does after a refusal: reload the endpoint, edit on top of what it shows."""
    reported = api.dave.get("deployments/chat").json()["target_revision"]
    return api.dave.patch("deployments/chat", {"spec": spec, "base_revision": reported})


def test_after_an_abort_an_edit_from_the_reported_revision_is_saved(
    api: Clients, serving: Deployment
) -> None:
    assert _start(api).status_code == 201
    assert api.dave.post("deployments/chat/canary/abort", {}).status_code == 200
    edited = _edit_from_the_reported_revision(api, spec_with(batching={"max_running_requests": 8}))
    assert edited.status_code == 200, edited.content
    assert edited.json()["target_revision"] == 3  # after the aborted canary's revision 2
    # The aborted canary's number is no base to edit from: it never became the settings.
    stale = api.dave.patch("deployments/chat", {"spec": FP8, "base_revision": 2})
    assert stale.status_code == 409 and error_of(stale)["code"] == "revision_conflict"
    assert fields_of(stale) == ["base_revision"]


def test_after_the_watchers_abort_an_edit_from_the_reported_revision_is_saved(
    api: Clients, serving: Deployment, settings: Any
) -> None:
    from datetime import timedelta

    from deployments.experiments.tasks import watch_canaries

    settings.PLINTH_STARTUP_WINDOW_S = 60
    assert _start(api).status_code == 201
    started = serving.canaries.get().started_at
    assert watch_canaries((started + timedelta(seconds=61)).isoformat())["aborted"] == 1
    edited = _edit_from_the_reported_revision(api, spec_with(batching={"max_running_requests": 8}))
    assert edited.status_code == 200, edited.content
    assert edited.json()["target_revision"] == 3
