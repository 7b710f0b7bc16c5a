"""The autoscaler task on real PostgreSQL and Redis: endpoints made through the services, load
stored as the probe stores it, last requests where the gateway leaves them; each pass is run
directly with the moment it decides at, and its work lands on the real broker after commit."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from controlplane import services as platform
from controlplane.models import AuditEvent, Role
from deployments.autoscaling import services as autoscaler
from deployments.autoscaling import tasks as scaling
from deployments.endpoints import services
from deployments.endpoints.models import Deployment, DeploymentEvent
from deployments.endpoints.reconcile import revision_plan
from deployments.quotas.models import Quota
from deployments.traffic.models import MetricSample
from deployments.traffic.usage import LAST_REQUEST_HASH
from runtime.capacity import Workload, replica_model
from runtime.spec import RuntimeSpec
from tests.api.conftest import Api
from tests.conftest import Cast, queued
from tests.fixtures.measured import serving_endpoint

# One replica carries 10 requests in flight; decisions over 60 s; scale down after 120 s.
AUTOSCALING = {"min_replicas": 1, "max_replicas": 4, "concurrency_target": 10,
               "target_utilization": 1.0, "window_seconds": 60,
               "scale_down_delay_seconds": 120}  # fmt: skip
TO_ZERO = {**AUTOSCALING, "min_replicas": 0, "scale_to_zero": True,
           "scale_to_zero_after_seconds": 600}  # fmt: skip


@pytest.fixture
def broker(broker: redis.Redis) -> Iterator[redis.Redis]:
    """The shared broker fixture, with the gateway's last-request hash empty too."""
    broker.delete(LAST_REQUEST_HASH)
    yield broker
    broker.delete(LAST_REQUEST_HASH)


def endpoint(cast: Cast, slug: str, autoscaling: dict[str, Any], replicas: int = 1) -> Deployment:
    """Dave's endpoint, created through the services and then serving, as reconcile records it."""
    return serving_endpoint(cast, slug, autoscaling, replicas)


def probe(deployment: Deployment, *loads: float, end: datetime, every: int = 15) -> None:
    """Samples every ``every`` s ending at ``end``, as the probe stores them (running + queued)."""
    last = len(loads) - 1
    MetricSample.objects.bulk_create(
        MetricSample(
            deployment=deployment, ts=end - timedelta(seconds=(last - i) * every),
            interval_s=every, replicas_ready=deployment.ready_replicas,
            running=load * 0.75, queued=load * 0.25,
        )
        for i, load in enumerate(loads)
    )  # fmt: skip


def run_pass(at: datetime, capture: Any) -> dict[str, int]:
    with capture(execute=True):
        return scaling.autoscale(now=at.isoformat())


def autoscaled(deployment: Deployment) -> list[DeploymentEvent]:
    return list(deployment.events.filter(reason="Autoscaled").order_by("id"))


def test_load_over_the_target_scales_up_with_an_event_an_audit_record_and_one_reconcile(
    cast: Cast, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    chat = endpoint(cast, "chat", AUTOSCALING)
    now = timezone.now()
    probe(chat, 30, 35, 32, 28, 31, end=now)
    assert run_pass(now, django_capture_on_commit_callbacks) == {"checked": 1, "scaled": 1}

    chat.refresh_from_db()
    assert chat.desired_replicas == 2  # 35 in flight needs 4; a step at most doubles
    assert chat.last_scaled_at is not None and chat.generation == 2
    [event] = autoscaled(chat)
    assert "peak of 35 requests in flight" in event.message and "1 -> 2" in event.message
    assert event.data["from"] == 1 and event.data["replicas"] == 2
    assert event.data["inputs"]["peak"] == 35 and event.data["inputs"]["up_target"] == 4
    assert event.data["inputs"]["policy"]["concurrency_target"] == 10
    audit = AuditEvent.objects.get(action="deployment.autoscale", target_id=str(chat.pk))
    assert audit.actor_label == "system" and audit.actor_user is None
    assert audit.before["desired_replicas"] == 1 and audit.after["desired_replicas"] == 2
    assert queued(broker) == [("deployments.reconcile_deployment", [str(chat.pk)])]

    # Through the REST API, the decision is on the endpoint's timeline with its inputs.
    key = platform.create_api_key(
        cast.actor(cast.alice, cast.acme), name="ops", kind="management", role=Role.VIEWER
    )
    listed = Api(key.plaintext).get("deployments/chat/events").json()
    shown = next(item for item in listed["items"] if item["reason"] == "Autoscaled")
    assert shown["data"]["inputs"]["peak"] == 35


def test_the_next_pass_in_the_cool_down_changes_nothing_and_the_one_after_doubles_again(
    cast: Cast, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    chat = endpoint(cast, "chat", AUTOSCALING)
    now = timezone.now()
    probe(chat, *[35] * 10, end=now + timedelta(seconds=90))
    run_pass(now, django_capture_on_commit_callbacks)
    broker.delete(settings.CELERY_TASK_DEFAULT_QUEUE)

    run_pass(now + timedelta(seconds=15), django_capture_on_commit_callbacks)
    chat.refresh_from_db()
    assert chat.desired_replicas == 2 and len(autoscaled(chat)) == 1
    assert queued(broker) == []

    run_pass(now + timedelta(seconds=90), django_capture_on_commit_callbacks)
    chat.refresh_from_db()
    assert chat.desired_replicas == 4 and len(autoscaled(chat)) == 2
    assert queued(broker) == [("deployments.reconcile_deployment", [str(chat.pk)])]


def test_low_load_removes_one_replica_only_once_it_held_for_the_delay(
    cast: Cast, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    chat = endpoint(cast, "chat", AUTOSCALING, replicas=3)
    start = timezone.now() + timedelta(seconds=61)  # past the cool-down of creating it at 3
    probe(chat, *[5] * 7, end=start)  # 90 s of low load: less than the 120 s delay
    run_pass(start, django_capture_on_commit_callbacks)
    chat.refresh_from_db()
    assert chat.desired_replicas == 3 and autoscaled(chat) == []

    later = start + timedelta(seconds=45)
    probe(chat, 5, 5, 5, end=later)  # now 135 s of low load
    run_pass(later, django_capture_on_commit_callbacks)
    chat.refresh_from_db()
    assert chat.desired_replicas == 2  # one replica per step, though one would carry the load
    [event] = autoscaled(chat)
    assert "for 120 s fits 1 replica " in event.message and "3 -> 2" in event.message
    assert event.data["inputs"]["stabilised_average"] == 5


def test_an_idle_endpoint_scales_to_zero_and_a_gateway_request_wakes_it(
    cast: Cast, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    chat = endpoint(cast, "chat", TO_ZERO)
    now = timezone.now()
    # The usage flush moved the gateway's last request into the row 20 minutes ago.
    Deployment.objects.filter(pk=chat.pk).update(last_request_at=now - timedelta(minutes=20))
    probe(chat, 0, 0, 0, 0, end=now)
    run_pass(now, django_capture_on_commit_callbacks)
    chat.refresh_from_db()
    assert chat.desired_replicas == 0 and chat.status in {"stopping", "scaled_to_zero"}
    assert "no request for" in autoscaled(chat)[0].message

    # A request the gateway counted but the usage flush has not moved yet: Redis only.
    broker.hset(LAST_REQUEST_HASH, str(chat.pk), int((now + timedelta(seconds=5)).timestamp()))
    broker.delete(settings.CELERY_TASK_DEFAULT_QUEUE)
    run_pass(now + timedelta(seconds=10), django_capture_on_commit_callbacks)
    chat.refresh_from_db()
    assert chat.desired_replicas == 1
    assert "a request arrived while at zero: 0 -> 1" in autoscaled(chat)[1].message
    assert queued(broker) == [("deployments.reconcile_deployment", [str(chat.pk)])]


def test_endpoints_that_are_not_the_autoscalers_to_change_are_left_alone(
    cast: Cast, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    dave = cast.actor(cast.dave, cast.acme)
    stopped = endpoint(cast, "stopped", AUTOSCALING)
    services.stop(dave, stopped.pk)
    rolling = endpoint(cast, "rolling", AUTOSCALING)
    Deployment.objects.filter(pk=rolling.pk).update(rollout_started_at=timezone.now())
    failed = endpoint(cast, "failed", AUTOSCALING)
    Deployment.objects.filter(pk=failed.pk).update(failed_at=timezone.now(), ready_replicas=0)
    now = timezone.now()
    for deployment in (stopped, rolling, failed):
        probe(deployment, 400, 400, 400, end=now)
    assert run_pass(now, django_capture_on_commit_callbacks) == {"checked": 2, "scaled": 0}
    assert not DeploymentEvent.objects.filter(reason="Autoscaled").exists()
    assert queued(broker) == []


def test_a_person_who_scaled_meanwhile_wins(
    cast: Cast, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    chat = endpoint(cast, "chat", AUTOSCALING)
    services.scale(cast.actor(cast.dave, cast.acme), chat.pk, replicas=3)
    with django_capture_on_commit_callbacks(execute=True):
        changed = autoscaler.autoscale_to(chat.pk, 2, "decided from 1", {}, expected=1)
    chat.refresh_from_db()
    assert not changed and chat.desired_replicas == 3 and autoscaled(chat) == []
    assert queued(broker) == []


def test_a_pass_reads_endpoints_in_batches_with_a_fixed_number_of_queries_each(
    cast: Cast,
    broker: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    django_assert_num_queries: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    now = timezone.now()
    for n in range(12):
        probe(endpoint(cast, f"chat-{n}", AUTOSCALING), 5, 5, end=now)
    # A smaller page size (a tuning constant, not a seam) so 12 endpoints make three pages.
    monkeypatch.setattr(scaling, "BATCH", 5)
    # Three batches (5, 5, 2) of two queries each (endpoints, samples), and the empty one.
    with django_assert_num_queries(7):
        result = run_pass(now, django_capture_on_commit_callbacks)
    assert result == {"checked": 12, "scaled": 0}


def test_without_redis_it_still_scales_by_load(cast: Cast, settings: Any) -> None:
    chat = endpoint(cast, "chat", AUTOSCALING)
    now = timezone.now()
    probe(chat, 25, 25, end=now)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens: no gateway times
    assert scaling.autoscale(now=now.isoformat()) == {"checked": 1, "scaled": 1}
    chat.refresh_from_db()
    assert chat.desired_replicas == 2


def test_beat_runs_the_autoscaler_every_interval() -> None:
    from controlplane.celery import app

    app.autodiscover_tasks(force=True)
    entry = app.conf.beat_schedule["deployments.autoscale"]
    assert entry["task"] == scaling.autoscale.name == "deployments.autoscale"
    assert entry["task"] in app.tasks
    assert entry["schedule"] == settings.PLINTH_AUTOSCALE_INTERVAL_S == 15
    assert entry["options"]["expires"] == 15  # a pass overtaken by the next one is dropped


# --- a split endpoint's pools (SLO policy) ------------------------------------------------------

SPLIT = {"min_replicas": 1, "max_replicas": 1, "window_seconds": 60,
         "scale_down_delay_seconds": 120, "slo": {"ttft_p90_ms": 500, "itl_p90_ms": 40},
         "prefill": {"min_replicas": 1, "max_replicas": 3},
         "decode": {"min_replicas": 1, "max_replicas": 3}}  # fmt: skip


def split_endpoint(cast: Cast, slug: str, autoscaling: dict[str, Any] = SPLIT) -> Deployment:
    spec = {
        "model": {"source": "meta-llama/Llama-3.1-8B-Instruct"},
        "hardware": {"gpu": "H100-SXM"},
        "disaggregation": {"enabled": True},
        "autoscaling": autoscaling,
    }
    made = services.create_deployment(cast.actor(cast.dave, cast.acme), slug=slug, name=slug,
                                      spec=spec, replicas=1)  # fmt: skip
    Deployment.objects.filter(pk=made.pk).update(
        applied_revision=made.target_revision, current_revision=made.target_revision,
        ready_replicas=1, total_replicas=2, first_ready_at=timezone.now() - timedelta(hours=1),
    )  # fmt: skip
    return Deployment.objects.get(pk=made.pk)


def probe_pools(deployment: Deployment, end: datetime, prefill: dict[str, Any],
                decode: dict[str, Any]) -> None:  # fmt: skip
    """Two minutes of samples with per-replica figures, as the probe stores them."""
    MetricSample.objects.bulk_create(
        MetricSample(
            deployment=deployment, ts=end - timedelta(seconds=15 * i), interval_s=15,
            replicas_ready=2, requests_per_s=0.5,
            replicas=[{"name": "p-0", "role": "prefill", **prefill},
                      {"name": "d-0", "role": "decode", **decode}],
        )
        for i in range(9)
    )  # fmt: skip


BACKLOG = {"queued": 8, "queued_tokens": 80_000, "running": 1}
QUIET = {"running": 2, "kv_usage": 0.05, "queued": 0, "queued_tokens": 0}


def test_a_prefill_backlog_grows_the_prefill_pool_and_leaves_decode(
    cast: Cast, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    split = split_endpoint(cast, "split")
    now = timezone.now()
    probe_pools(split, now, prefill=BACKLOG, decode=QUIET)
    assert run_pass(now, django_capture_on_commit_callbacks) == {"checked": 1, "scaled": 1}

    split.refresh_from_db()
    assert split.target_revision is not None
    assert split.pool_sizes(split.target_revision.number, split.target_revision.spec) == {
        "prefill": 2, "decode": 1,
    }  # fmt: skip
    assert split.desired_replicas == 1
    [event] = autoscaled(split)
    assert event.data["pool"] == "prefill" and event.data["from"] == 1
    assert "queued prefill tokens" in event.message and "1 -> 2" in event.message
    audit = AuditEvent.objects.get(action="deployment.autoscale_pool", target_id=str(split.pk))
    assert audit.before["pools"] == {"prefill": 1, "decode": 1}
    assert queued(broker) == [("deployments.reconcile_deployment", [str(split.pk)])]

    # Reconcile's plan for the revision runs the pool at its new size.
    plan = revision_plan(split, split.target_revision)
    sizes = {r.role: plan.replicas_of(r) for r in plan.plan.roles if r.role != "router"}
    assert sizes == {"prefill": 2, "decode": 1}

    # Within the prefill pool's cool-down nothing more; the decode pool has its own.
    broker.delete(settings.CELERY_TASK_DEFAULT_QUEUE)
    MetricSample.objects.all().delete()
    probe_pools(split, now + timedelta(seconds=15), prefill=BACKLOG,
                decode={**QUIET, "kv_usage": 0.97})  # fmt: skip
    assert run_pass(now + timedelta(seconds=15), django_capture_on_commit_callbacks)["scaled"] == 1
    split.refresh_from_db()
    assert split.pool_sizes(split.target_revision.number, split.target_revision.spec) == {
        "prefill": 2, "decode": 2,
    }  # fmt: skip
    assert autoscaled(split)[-1].data["pool"] == "decode"


def test_a_stale_pool_decision_changes_nothing(cast: Cast, broker: redis.Redis) -> None:
    split = split_endpoint(cast, "split")
    assert not autoscaler.autoscale_pool_to(split.pk, "prefill", 3, "test", {}, expected=2)
    split.refresh_from_db()
    assert split.pool_replicas == {} and autoscaled(split) == []


def test_a_pool_stops_at_the_gpu_quota(cast: Cast, broker: redis.Redis) -> None:
    split = split_endpoint(cast, "split")
    Quota.objects.create(organization=cast.acme, gpus=3)  # one prefill, one decode, one spare
    assert autoscaler.autoscale_pool_to(split.pk, "prefill", 3, "backlog", {}, expected=1)
    split.refresh_from_db()
    assert split.pool_replicas["prefill"] == 2
    assert "held at 2 by quota gpus" in autoscaled(split)[-1].message
    assert split.events.filter(reason="QuotaLimited").exists()


def test_an_idle_split_endpoint_scales_both_pools_to_zero_and_a_request_wakes_them(
    cast: Cast, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    idle_split = {**SPLIT, "min_replicas": 0, "scale_to_zero": True,
                  "scale_to_zero_after_seconds": 600}  # fmt: skip
    split = split_endpoint(cast, "split", idle_split)
    assert autoscaler.autoscale_pool_to(split.pk, "prefill", 2, "backlog", {}, expected=1)
    now = timezone.now()
    Deployment.objects.filter(pk=split.pk).update(
        last_request_at=now - timedelta(minutes=20), last_scaled_at=now - timedelta(minutes=20)
    )
    probe_pools(split, now, prefill={"running": 0, "queued": 0}, decode={"running": 0})
    assert run_pass(now, django_capture_on_commit_callbacks) == {"checked": 1, "scaled": 1}
    split.refresh_from_db()
    assert split.desired_replicas == 0 and split.status in {"stopping", "scaled_to_zero"}
    event = autoscaled(split)[-1]
    assert "scaling both pools to zero: 1 -> 0" in event.message
    assert event.data["inputs"]["idle_seconds"] >= 600

    # At zero the pools hold; a request the gateway counted wakes the endpoint, both pools
    # back at their floors (autoscaling.prefill/decode min_replicas), as one replica wakes.
    broker.hset(LAST_REQUEST_HASH, str(split.pk), int((now + timedelta(seconds=5)).timestamp()))
    broker.delete(settings.CELERY_TASK_DEFAULT_QUEUE)
    assert run_pass(now + timedelta(seconds=10), django_capture_on_commit_callbacks)["scaled"] == 1
    split.refresh_from_db()
    assert split.desired_replicas == 1
    assert "a request arrived while at zero: 0 -> 1" in autoscaled(split)[-1].message
    revision = split.target_revision
    assert revision is not None
    assert split.pool_sizes(revision.number, revision.spec) == {"prefill": 1, "decode": 1}
    plan = revision_plan(split, revision)
    sizes = {r.role: plan.replicas_of(r) for r in plan.plan.roles if r.role != "router"}
    assert sizes == {"prefill": 1, "decode": 1}
    assert queued(broker) == [("deployments.reconcile_deployment", [str(split.pk)])]


# --- the SLO policy's model correction ------------------------------------------------------------

SLO_POLICY = {"min_replicas": 1, "max_replicas": 4, "window_seconds": 60,
              "scale_down_delay_seconds": 120, "target_utilization": 1.0,
              "slo": {"ttft_p90_ms": 500, "itl_p90_ms": 40}}  # fmt: skip


def test_an_endpoint_faster_than_its_model_corrects_it_down_one_event_per_move(
    cast: Cast, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    chat = endpoint(cast, "chat", SLO_POLICY, replicas=2)
    assert chat.target_revision is not None
    spec = RuntimeSpec.model_validate(chat.target_revision.spec)
    model = replica_model(spec, "engine", Workload())
    assert model is not None
    rate = 0.75 * model.capacity_rps(0.5, 0.04)
    predicted = model.predict(rate)
    now = timezone.now()
    # Five minutes of two replicas answering twice as fast as the model predicts.
    MetricSample.objects.bulk_create(
        MetricSample(
            deployment=chat, ts=now - timedelta(seconds=15 * i), interval_s=15,
            replicas_ready=2, requests_per_s=2 * rate, ttft_p90=0.5 * predicted.ttft_s,
            itl_p90=0.5 * predicted.itl_s,
        )
        for i in range(21)
    )  # fmt: skip
    run_pass(now, django_capture_on_commit_callbacks)
    [first] = chat.events.filter(reason="ModelCorrected")
    assert first.revision_number == chat.target_revision.number
    assert first.data["role"] == "engine"
    assert (first.data["from"], first.data["correction"]) == ({}, {"itl": 0.8})
    assert abs(first.data["fitted"]["itl"] - 0.5) < 0.01
    assert first.data["inputs"]["correction"] == {"ttft": 1.0, "itl": 0.8}
    assert "ITL x1.00 -> x0.80" in first.message

    # The next pass starts from what the last one applied: one more bounded step down.
    run_pass(now + timedelta(seconds=15), django_capture_on_commit_callbacks)
    second = chat.events.filter(reason="ModelCorrected").latest("id")
    assert (second.data["from"], second.data["correction"]) == ({"itl": 0.8}, {"itl": 0.64})
