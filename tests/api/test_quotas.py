"""Quotas: set by instance admins (staff sessions, the Django admin), shown to members against
what their endpoints ask for, and enforced at create, edit, scale, start and in the autoscaler
with a 409 that names the quota and says by how much."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.http import HttpRequest
from django.test import Client
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from controlplane.models import AuditEvent
from deployments.autoscaling import services as autoscaler
from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from deployments.quotas import services as quotas
from deployments.quotas.models import Quota
from tests.api.conftest import SPEC, Api, Clients, error_of, spec_with
from tests.autoscaling.test_task import AUTOSCALING, autoscaled, probe, run_pass
from tests.autoscaling.test_task import endpoint as serving_endpoint
from tests.conftest import PASSWORD, Cast
from tests.waiting import wait_until


@pytest.fixture
def staff(db: None) -> Api:
    """An instance admin's own signed-in session (staff, in no organization)."""
    user = get_user_model().objects.create_user("root", password=PASSWORD, is_staff=True)
    client = Client()
    client.force_login(user)
    return Api(None, client=client)


def set_quota(staff: Api, cast: Cast, **limits: Any) -> Any:
    answer = staff.request("PUT", f"organizations/{cast.acme.pk}/quota", limits)
    assert answer.status_code == 200, answer.content
    return answer.json()


def refusal(response: Any) -> dict[str, Any]:
    assert response.status_code == 409, response.content
    error = error_of(response)
    assert error["code"] == "quota_exceeded"
    [field] = error["fields"]
    assert field["code"] == "quota_exceeded" and "instance admin" in field["fix"]
    return error


def line(usage: dict[str, Any], quota: str) -> dict[str, Any]:
    return next(item for item in usage["quotas"] if item["quota"] == quota)


def test_create_and_scale_are_refused_at_the_gpu_quota_with_the_quota_and_the_overshoot(
    api: Clients, cast: Cast, staff: Api
) -> None:
    set_quota(staff, cast, gpus_by_type={"H100-SXM": 4})
    tp2 = spec_with(parallelism={"tp": 2})
    assert api.dave.post("deployments", {"slug": "chat", "spec": tp2}).status_code == 201
    assert api.dave.post("deployments/chat/scale", {"replicas": 2}).status_code == 200

    refused = api.dave.post("deployments/chat/scale", {"replicas": 3})
    error = refusal(refused)
    assert error["message"] == (
        "quota gpus.H100-SXM exceeded: limit 4, in use 0, requested 6 (2 over)"
    )
    assert error["fields"][0]["field"] == "replicas"
    error = refusal(api.dave.post("deployments", {"slug": "more", "spec": SPEC}))
    assert (
        "gpus.H100-SXM" in error["message"] and "in use 4, requested 1 (1 over)" in error["message"]
    )
    assert not Deployment.objects.filter(slug="more").exists()
    assert Deployment.objects.get(slug="chat").desired_replicas == 2

    # Members see their usage against the quota; other GPU types and limits stay unlimited.
    usage = api.carol.get("quota").json()
    assert line(usage, "gpus.H100-SXM") == {"quota": "gpus.H100-SXM", "limit": 4, "in_use": 4}
    assert line(usage, "gpus") == {"quota": "gpus", "limit": None, "in_use": 4}
    assert line(usage, "endpoints")["in_use"] == 1
    assert usage["updated_by"] == "user:root"
    # Scaling down is never refused, and frees the headroom.
    assert api.dave.post("deployments/chat/scale", {"replicas": 1}).status_code == 200
    assert api.dave.post("deployments", {"slug": "more", "spec": SPEC}).status_code == 201


def test_edit_start_and_the_other_quotas_are_enforced_but_lowering_a_quota_stops_nothing(
    api: Clients, cast: Cast, staff: Api
) -> None:
    set_quota(staff, cast, gpus=2, endpoints=2, replicas_per_endpoint=3)
    assert api.dave.post("deployments", {"slug": "chat", "spec": SPEC}).status_code == 201
    edit = {"spec": spec_with(parallelism={"tp": 4}), "base_revision": 1}
    error = refusal(api.dave.patch("deployments/chat", edit))
    assert (
        error["message"].startswith("quota gpus exceeded: limit 2")
        and error["fields"][0]["field"] == "spec"
    )
    assert Deployment.objects.get(slug="chat").revisions.count() == 1

    refusal(api.dave.post("deployments/chat/scale", {"replicas": 3}))
    assert api.dave.post("deployments", {"slug": "second", "spec": SPEC}).status_code == 201
    error = refusal(api.dave.post("deployments", {"slug": "third", "spec": SPEC}))
    assert error["message"] == "quota endpoints exceeded: limit 2, in use 2, requested 1 (1 over)"

    # Stopped, an endpoint frees its GPUs; starting it again must fit.
    assert api.dave.post("deployments/second/stop", {}).status_code == 200
    assert api.dave.post("deployments/chat/scale", {"replicas": 2}).status_code == 200
    error = refusal(api.dave.post("deployments/second/start", {}))
    assert "quota gpus exceeded" in error["message"]

    # A lower quota leaves what runs alone; only asks for more are refused.
    set_quota(staff, cast, gpus=1, replicas_per_endpoint=1)
    assert Deployment.objects.get(slug="chat").desired_replicas == 2
    error = refusal(api.dave.post("deployments/chat/scale", {"replicas": 4}))
    assert "quota replicas_per_endpoint exceeded: limit 1" in error["message"]


def test_the_autoscaler_stops_at_the_quota_and_records_why(
    cast: Cast, staff: Api, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    chat = serving_endpoint(cast, "chat", AUTOSCALING)
    set_quota(staff, cast, gpus=2)
    now = timezone.now()
    probe(chat, *[35] * 10, end=now + timedelta(seconds=90))
    run_pass(now, django_capture_on_commit_callbacks)
    chat.refresh_from_db()
    assert chat.desired_replicas == 2  # the first step (1 -> 2) fits
    assert chat.events.filter(reason="QuotaLimited").count() == 0

    run_pass(now + timedelta(seconds=90), django_capture_on_commit_callbacks)  # wants 4
    run_pass(now + timedelta(seconds=180), django_capture_on_commit_callbacks)  # again
    chat.refresh_from_db()
    assert chat.desired_replicas == 2 and len(autoscaled(chat)) == 1
    [held] = chat.events.filter(reason="QuotaLimited")  # recorded once while it holds
    assert held.level == "warning"
    assert held.message == "quota gpus exceeded: limit 2, in use 0, requested 4 (2 over)"
    assert held.data["quota"] == "gpus" and held.data["wanted"] == 4


def test_the_autoscaler_goes_as_far_as_the_quota_allows(
    cast: Cast, staff: Api, broker: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    chat = serving_endpoint(cast, "chat", {**AUTOSCALING, "max_replicas": 8}, replicas=2)
    set_quota(staff, cast, gpus_by_type={"H100-SXM": 3})
    assert autoscaler.autoscale_to(chat.pk, 4, "peak of 40", {}, expected=2)
    chat.refresh_from_db()
    assert chat.desired_replicas == 3
    [event] = autoscaled(chat)
    assert event.message == "peak of 40; held at 3 by quota gpus.H100-SXM"


def test_only_instance_admins_set_quotas_and_every_change_is_audited(
    api: Clients, cast: Cast, staff: Api
) -> None:
    path = f"organizations/{cast.acme.pk}/quota"
    owner = Client()  # Acme's owner, not staff: may not raise her own quota
    owner.force_login(cast.alice)  # type: ignore[arg-type]
    assert Api(None, client=owner).request("PUT", path, {"gpus": 99}).status_code == 403
    assert api.alice.request("PUT", path, {"gpus": 99}).status_code == 403
    assert not Quota.objects.exists()

    shown = set_quota(staff, cast, gpus=8, gpus_by_type={"h100": 4})  # aliases are resolved
    assert line(shown, "gpus.H100-SXM")["limit"] == 4
    assert staff.get(path).json() == shown
    bad = staff.request("PUT", path, {"gpus_by_type": {"no-such-gpu": 1}})
    assert bad.status_code == 422 and error_of(bad)["fields"][0]["code"] == "unknown_gpu"
    assert staff.request("PUT", path, {"gpus": -1}).status_code == 422
    missing = staff.request("PUT", "organizations/00000000-0000-0000-0000-000000000007/quota", {})
    assert missing.status_code == 404

    [event] = AuditEvent.objects.filter(organization=cast.acme, action="quota.set")
    assert event.actor_label == "user:root"
    assert event.before == {
        "gpus": None, "gpus_by_type": {}, "endpoints": None, "replicas_per_endpoint": None,
        "quantization_gpu_hours": None,
    }  # fmt: skip
    assert event.after == {
        "gpus": 8, "gpus_by_type": {"H100-SXM": 4}, "endpoints": None,
        "replicas_per_endpoint": None, "quantization_gpu_hours": None,
    }  # fmt: skip


def test_the_django_admin_saves_quotas_through_the_service(cast: Cast) -> None:
    get_user_model().objects.create_superuser("operator", password=PASSWORD)
    client = Client()
    assert client.login(request=HttpRequest(), username="operator", password=PASSWORD)
    form = {
        "organization": str(cast.acme.pk), "gpus": "6", "gpus_by_type": '{"H100-SXM": 2}',
        "endpoints": "", "replicas_per_endpoint": "", "_save": "Save",
    }  # fmt: skip
    assert client.post("/admin/deployments/quota/add/", form).status_code == 302
    quota = Quota.objects.get(organization=cast.acme)
    assert (quota.gpus, quota.gpus_by_type, quota.endpoints) == (6, {"H100-SXM": 2}, None)
    assert AuditEvent.objects.get(action="quota.set").actor_label == "user:operator"
    assert client.get(f"/admin/deployments/quota/{cast.acme.pk}/change/").status_code == 200


@given(
    tp=st.sampled_from([1, 2, 4, 8]),
    replicas=st.integers(0, 16),
    pools=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    running=st.booleans(),
)
def test_demand_counts_every_replica_of_every_pool_while_running(
    tp: int, replicas: int, pools: tuple[int, int], running: bool
) -> None:
    state = "running" if running else "stopped"
    plain = quotas.demand_of(spec_with(parallelism={"tp": tp}), replicas, state)
    assert plain.gpus == (tp * replicas if running else 0)
    split = {"enabled": True, "prefill": {"replicas": pools[0]}, "decode": {"replicas": pools[1]}}
    pd = quotas.demand_of(spec_with(parallelism={"tp": tp}, disaggregation=split), replicas, state)
    on = running and replicas > 0
    assert pd.gpus == (tp * sum(pools) if on else 0)
    assert pd.replicas == (sum(pools) if on else 0)


def _waiting_on_a_lock(done: threading.Event) -> bool:
    """Whether another session of this database is blocked on a row lock (or ``done``)."""
    with connection.cursor() as cursor:
        # The activity view is read once per transaction unless its snapshot is cleared.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        )
        return bool(cursor.fetchone()[0]) or done.is_set()


@pytest.mark.django_db(transaction=True)
def test_two_creates_racing_for_the_last_gpus_cannot_both_pass(cast: Cast) -> None:
    Quota.objects.create(organization=cast.acme, gpus=1)
    dave = cast.actor(cast.dave, cast.acme)
    second_done, outcome = threading.Event(), {}

    def second() -> None:
        try:
            services.create_deployment(dave, slug="second", name="second", spec=SPEC)
            outcome["second"] = "created"
        except quotas.QuotaExceeded as exc:
            outcome["second"] = exc.message
        finally:
            second_done.set()
            connection.close()

    with transaction.atomic():  # the first create, not yet committed
        services.create_deployment(dave, slug="first", name="first", spec=SPEC)
        racer = threading.Thread(target=second)
        racer.start()
        # Commit only once the second create waits on the quota row (or, without the lock,
        # has already counted without seeing the first).
        wait_until(lambda: _waiting_on_a_lock(second_done), "the second create to wait or end")
    racer.join(timeout=30)
    assert outcome["second"] == "quota gpus exceeded: limit 1, in use 1, requested 1 (1 over)"
    assert list(Deployment.objects.values_list("slug", flat=True)) == ["first"]


def test_rollback_and_wake_from_zero_are_held_to_the_quota_too(
    api: Clients, cast: Cast, staff: Api
) -> None:
    to_zero = {"min_replicas": 0, "max_replicas": 2, "scale_to_zero": True}
    spec = spec_with(autoscaling=to_zero)
    assert api.dave.post("deployments", {"slug": "idle", "spec": spec}).status_code == 201
    assert api.dave.post("deployments", {"slug": "busy", "spec": SPEC}).status_code == 201
    wide = {"spec": spec_with(parallelism={"tp": 2}), "base_revision": 1}
    assert api.dave.patch("deployments/busy", wide).status_code == 200
    assert api.dave.post("deployments/busy/scale", {"replicas": 0}).status_code == 200
    assert api.dave.patch("deployments/busy", {"spec": SPEC, "base_revision": 2}).status_code == 200
    assert api.dave.post("deployments/busy/scale", {"replicas": 1}).status_code == 200
    set_quota(staff, cast, gpus=1)

    idle = Deployment.objects.get(slug="idle")
    assert idle.desired_replicas == 0
    assert autoscaler.wake(idle.pk) is False
    [held] = idle.events.filter(reason="ScaleFromZeroRefused")
    assert held.message == "quota gpus exceeded: limit 1, in use 1, requested 1 (1 over)"
    error = refusal(api.dave.post("deployments/busy/rollback", {"to_revision": 2}))
    assert "requested 2" in error["message"] and error["fields"][0]["field"] == "to_revision"


def test_a_canary_counts_its_replicas_on_top_of_the_endpoint_but_not_as_an_endpoint(
    api: Clients, cast: Cast, staff: Api
) -> None:
    assert api.dave.post("deployments", {"slug": "chat", "spec": SPEC}).status_code == 201
    set_quota(staff, cast, gpus=2, endpoints=1)
    chat = Deployment.objects.select_related("target_revision").get(slug="chat")
    quotas.check_canary(chat, spec_with(), 1)  # 1 + 1 GPUs, and still one endpoint
    with pytest.raises(quotas.QuotaExceeded) as refused:
        quotas.check_canary(chat, spec_with(parallelism={"tp": 2}), 1)
    assert refused.value.quota == "gpus" and refused.value.field == "canary.replicas"
