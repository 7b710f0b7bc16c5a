"""Platform pages: API keys (shown once, scoped, revoked), members and roles, write-only
secrets, the audit log with filters, usage and clusters."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from controlplane import services as platform
from controlplane.models import ApiKey, AuditEvent, Membership, Secret
from deployments.models import Deployment, UsageRecord
from tests.conftest import Cast


def test_a_new_key_is_shown_once(alice: Client, endpoint: Deployment) -> None:
    form = {"name": "backend", "kind": "inference", "endpoints": [str(endpoint.pk)]}
    response = alice.post("/keys/", form)
    assert response.status_code == 200
    key = ApiKey.objects.get(name="backend")
    assert key.allowed_deployment_ids == [endpoint.pk]
    shown = response.content.decode().split('id="created-key"')[1].split(">")[0]
    plaintext = shown.split('value="')[1].split('"')[0]
    assert plaintext.startswith(key.prefix)
    assert platform.authenticate_key(plaintext, kind="inference") == key
    assert plaintext not in alice.get("/keys/").content.decode()


def test_a_refused_key_names_its_field(alice: Client, cast: Cast) -> None:
    response = alice.post("/keys/", {"name": "", "kind": "inference"})
    assert response.status_code == 422
    assert b"key name must not be empty" in response.content
    bad_date = alice.post("/keys/", {"name": "x", "kind": "inference", "expires": "soon"})
    assert bad_date.status_code == 422 and b"expiry: use a date" in bad_date.content


def test_revoking_a_key(alice: Client, cast: Cast) -> None:
    created = platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")
    response = alice.post(f"/keys/{created.api_key.pk}/revoke/", follow=True)
    assert b"revoked" in response.content
    assert platform.authenticate_key(created.plaintext, kind="inference") is None


def test_another_orgs_key_cannot_be_revoked(bob: Client, cast: Cast) -> None:
    created = platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")
    assert bob.post(f"/keys/{created.api_key.pk}/revoke/").status_code == 404
    created.api_key.refresh_from_db()
    assert created.api_key.revoked_at is None


def test_viewers_cannot_create_keys(carol: Client, cast: Cast) -> None:
    assert carol.post("/keys/", {"name": "x", "kind": "inference"}).status_code == 403
    assert not ApiKey.objects.exists()


def test_temporary_keys_stay_off_the_key_list(alice: Client, cast: Cast) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    platform.create_api_key(actor, name="playground x", kind="inference", temporary=True)
    assert b"playground x" not in alice.get("/keys/").content


def test_members_are_added_changed_and_removed(alice: Client, cast: Cast) -> None:
    get_user_model().objects.create_user("erin", password="x-long-password")
    assert alice.post("/members/", {"username": "erin", "role": "viewer"}).status_code == 302
    erin = Membership.objects.get(user__username="erin")
    alice.post(f"/members/{erin.pk}/", {"role": "developer", "action": "change"})
    erin.refresh_from_db()
    assert erin.role == "developer"
    alice.post(f"/members/{erin.pk}/", {"action": "remove"})
    assert not Membership.objects.filter(pk=erin.pk).exists()


def test_an_unknown_member_is_named(alice: Client, cast: Cast) -> None:
    response = alice.post("/members/", {"username": "nobody", "role": "viewer"})
    assert response.status_code == 422 and b"no user named" in response.content


def test_the_last_owner_cannot_be_demoted(alice: Client, cast: Cast) -> None:
    own = Membership.objects.get(user=cast.alice, organization=cast.acme)
    response = alice.post(f"/members/{own.pk}/", {"role": "viewer"}, follow=True)
    assert b"at least one owner" in response.content


def test_viewers_do_not_see_secret_names(alice: Client, carol: Client, cast: Cast) -> None:
    platform.set_secret(cast.actor(cast.alice, cast.acme), name="hf-token", value="hf_x")
    page = carol.get("/secrets/")
    assert page.status_code == 403
    assert "hf-token" not in page.content.decode()
    assert "hf-token" not in carol.get("/clusters/").content.decode()
    assert "hf-token" in alice.get("/clusters/").content.decode()


def test_secrets_are_write_only(alice: Client, cast: Cast) -> None:
    form = {"name": "hf-token", "value": "hf_supersecretvalue", "description": "HF"}
    assert alice.post("/secrets/", form).status_code == 302
    page = alice.get("/secrets/").content.decode()
    assert "hf-token" in page and "hf_supersecretvalue" not in page
    audit = alice.get("/audit/").content.decode()
    assert "secret.create" in audit and "hf_supersecretvalue" not in audit
    secret = Secret.objects.get(name="hf-token")
    alice.post(f"/secrets/{secret.pk}/delete/")
    assert not Secret.objects.exists()


def test_a_bad_secret_name_is_named(alice: Client, cast: Cast) -> None:
    response = alice.post("/secrets/", {"name": "Bad Name", "value": "v"})
    assert response.status_code == 422 and b"secret name must be" in response.content


def test_the_audit_log_filters_and_stays_in_its_org(alice: Client, bob: Client, cast: Cast) -> None:
    platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")

    def rows(client: Client, query: str) -> str:
        return client.get(f"/audit/{query}").content.decode().split("<tbody>")[1]

    filtered = rows(alice, "?action=api_key")
    assert "api_key.create" in filtered and "member.add" not in filtered
    assert "member.add" in rows(alice, "?actor=alice")
    assert "api_key.create" not in rows(bob, "")


def test_the_audit_log_takes_a_fixed_number_of_queries(alice: Client, cast: Cast) -> None:
    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            alice.get("/audit/")
        return len(ctx.captured_queries)

    few = count()
    actor = cast.actor(cast.alice, cast.acme)
    for n in range(5):
        platform.create_api_key(actor, name=f"k{n}", kind="inference")
    assert count() == few


def test_usage_sums_per_key_and_endpoint(alice: Client, bob: Client, cast: Cast) -> None:
    key = platform.create_api_key(cast.actor(cast.alice, cast.acme), name="k", kind="inference")
    minute = timezone.now().replace(second=0, microsecond=0)
    # An hour apart, so the hourly chart has several points whatever the time of day.
    for i in range(3):
        UsageRecord.objects.create(
            organization=cast.acme, api_key=key.api_key, deployment_id=key.api_key.pk,
            deployment_slug="chat", minute=minute - timedelta(minutes=61 * i), requests=2,
            prompt_tokens=100, cached_tokens=40, completion_tokens=1000,
        )  # fmt: skip
    page = alice.get("/usage/").content.decode()
    assert ">6<" in page and ">3000<" in page and "<polyline" in page
    assert "chat" not in bob.get("/usage/").content.decode().split("<main")[1]


def test_clusters_list_the_shared_local_cluster(alice: Client, cast: Cast) -> None:
    page = alice.get("/clusters/").content.decode()
    assert "local" in page and "(shared)" in page


def test_adding_a_cluster_needs_a_kubeconfig(alice: Client, cast: Cast) -> None:
    response = alice.post("/clusters/", {"name": "gpu-east", "namespace": "plinth"})
    assert response.status_code == 422
    assert b"kubeconfig" in response.content
    platform.set_secret(cast.actor(cast.alice, cast.acme), name="kc", value="apiVersion: v1")
    secret = Secret.objects.get(name="kc")
    form = {"name": "gpu-east", "namespace": "plinth", "kubeconfig": str(secret.pk)}
    assert alice.post("/clusters/", form).status_code == 302
    assert b"gpu-east" in alice.get("/clusters/").content


def test_audit_events_are_recorded_for_console_actions(alice: Client, endpoint: Deployment) -> None:
    alice.post("/endpoints/chat/stop/")
    event = AuditEvent.objects.get(action="deployment.stopped")
    assert event.actor_label == "user:alice"


@pytest.mark.parametrize("url", ["/keys/", "/members/", "/secrets/", "/clusters/", "/usage/"])
def test_list_pages_take_a_bounded_number_of_queries(
    alice: Client, cast: Cast, url: str, django_assert_max_num_queries: Any
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    for n in range(10):
        key = platform.create_api_key(actor, name=f"k{n}", kind="inference")
        platform.set_secret(actor, name=f"s{n}", value="v")
        UsageRecord.objects.create(
            organization=cast.acme, api_key=key.api_key, deployment_id=key.api_key.pk,
            deployment_slug=f"e{n}", minute=timezone.now(), requests=1,
        )  # fmt: skip
    with django_assert_max_num_queries(12):
        assert alice.get(url).status_code == 200
