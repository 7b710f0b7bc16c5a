"""/api/v1/deployments/{id}/events, /metrics (time range), /usage, and /usage for the org."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from controlplane import services as platform
from deployments.endpoints import timeline
from deployments.endpoints.models import Deployment
from deployments.traffic.models import MetricSample, UsageRecord
from tests.api.conftest import Clients, fields_of
from tests.conftest import Cast
from tests.fixtures.measured import measure, model_of, serving_endpoint


def test_events_newest_first_with_level_filter(api: Clients, endpoint: Deployment) -> None:
    timeline.record_event(endpoint, "warning", "Unschedulable", "0/3 nodes have 8 free GPUs")
    body = api.carol.get("deployments/chat/events").json()
    assert body["count"] == 2
    assert [e["reason"] for e in body["items"]] == ["Unschedulable", "Created"]
    warnings = api.carol.get("deployments/chat/events?level=warning").json()
    assert [e["message"] for e in warnings["items"]] == ["0/3 nodes have 8 free GPUs"]
    assert fields_of(api.carol.get("deployments/chat/events?level=loud")) == ["level"]
    assert api.bob.get("deployments/chat/events").status_code == 404


def _sample(endpoint: Deployment, minutes_ago: int, rps: float) -> None:
    MetricSample.objects.create(
        deployment=endpoint,
        ts=timezone.now() - timedelta(minutes=minutes_ago),
        interval_s=15,
        requests_per_s=rps,
        ttft_p50=0.12,
    )


def test_metrics_in_a_time_range_oldest_first(api: Clients, endpoint: Deployment) -> None:
    for minutes, rps in ((5, 1.0), (30, 2.0), (90, 3.0)):
        _sample(endpoint, minutes, rps)
    body = api.carol.get("deployments/chat/metrics").json()  # default: the last hour
    assert [s["requests_per_s"] for s in body["samples"]] == [2.0, 1.0]
    assert body["truncated"] is False
    start = (timezone.now() - timedelta(hours=2)).isoformat()
    wide = api.carol.get(f"deployments/chat/metrics?start={start.replace('+', '%2B')}").json()
    assert [s["requests_per_s"] for s in wide["samples"]] == [3.0, 2.0, 1.0]
    backwards = api.carol.get(
        "deployments/chat/metrics?start=2026-01-02T00:00:00Z&end=2026-01-01T00:00:00Z"
    )
    assert backwards.status_code == 422 and fields_of(backwards) == ["start"]
    too_long = api.carol.get(
        "deployments/chat/metrics?start=2020-01-01T00:00:00Z&end=2026-01-01T00:00:00Z"
    )
    assert too_long.status_code == 422
    assert fields_of(api.carol.get("deployments/chat/metrics?start=yesterday")) == ["start"]
    assert api.bob.get("deployments/chat/metrics").status_code == 404


def test_usage_totals_per_key(api: Clients, cast: Cast, endpoint: Deployment) -> None:
    key = platform.create_api_key(cast.actor(cast.dave, cast.acme), name="app", kind="inference")
    minute = timezone.now().replace(second=0, microsecond=0)
    for i, (req, prompt) in enumerate(((3, 300), (2, 100))):
        UsageRecord.objects.create(
            organization=cast.acme,
            api_key=key.api_key,
            deployment_id=endpoint.pk,
            deployment_slug="chat",
            minute=minute - timedelta(minutes=i),
            requests=req,
            prompt_tokens=prompt,
            completion_tokens=10,
        )
    body = api.carol.get("deployments/chat/usage").json()
    [row] = body["rows"]
    assert row["api_key_name"] == "app" and row["api_key_prefix"] == key.api_key.prefix
    assert (row["requests"], row["prompt_tokens"], row["completion_tokens"]) == (5, 400, 20)
    assert api.carol.get("usage").json()["rows"] == body["rows"]
    assert api.bob.get("usage").json()["rows"] == []
    assert api.bob.get("deployments/chat/usage").status_code == 404


@pytest.mark.parametrize("rows", [1, 30])
def test_events_list_takes_a_bounded_number_of_queries(
    api: Clients, endpoint: Deployment, rows: int, django_assert_max_num_queries: Any
) -> None:
    for i in range(rows):
        timeline.record_event(endpoint, "info", "Probe", f"probe {i}")
    api.carol.get("deployments/chat")  # warm the key's last-used stamp
    with django_assert_max_num_queries(4):
        assert api.carol.get("deployments/chat/events?limit=200").json()["count"] == rows + 1


def test_the_model_against_measured_with_the_correction_and_band(api: Clients, cast: Cast) -> None:
    chat = serving_endpoint(cast, "served")
    rate = 0.5 * model_of(chat).capacity_rps(0.5, 0.04)
    measure(chat, ttft=[1.2] * 4, itl=[0.9, 0.9, 1.0, 0.8], rate_per_replica=rate,
            end=timezone.now())  # fmt: skip

    body = api.carol.get("deployments/served/model-accuracy").json()

    assert body["revision"] == 1 and body["modelled"] is True and body["window_s"] == 180
    figures = {f["metric"]: f for f in body["figures"]}
    assert figures["ttft"]["correction"] == pytest.approx(1.2)
    assert figures["ttft"]["source"] == "samples" and figures["ttft"]["samples"] == 4
    assert figures["itl"]["band"] == pytest.approx([0.8, 1.0])
    assert figures["itl"]["measured"] == pytest.approx(0.9 * figures["itl"]["predicted"], rel=1e-3)
    assert "model corrected +20%" in figures["ttft"]["summary"]
    assert body["correction"]["ttft"] == pytest.approx(1.2)
    assert api.bob.get("deployments/served/model-accuracy").status_code == 404


def test_the_model_against_measured_while_nothing_serves(
    api: Clients, endpoint: Deployment
) -> None:
    body = api.carol.get("deployments/chat/model-accuracy").json()
    assert body["revision"] is None and body["figures"] == [] and body["correction"] == {}


def test_the_model_against_measured_of_a_revision_that_is_not_there_names_the_field(
    api: Clients, cast: Cast
) -> None:
    serving_endpoint(cast, "served")
    assert api.carol.get("deployments/served/model-accuracy?revision=1").json()["revision"] == 1
    missing = api.carol.get("deployments/served/model-accuracy?revision=7")
    assert missing.status_code == 422 and fields_of(missing) == ["revision"]
    assert fields_of(api.carol.get("deployments/served/model-accuracy?revision=x")) == ["revision"]
